"""Multi-module MTP in the stateful check: its drafter reads ``k`` prefill tokens ahead, so the
last ``k - 1`` computed tokens are not published (spec/caching.py:cacheable_tokens). The draws
are configurations vLLM accepts, the harness sets vLLM up as the engine does, the fixed runs
hold on vLLM, and the two combinations left out of the draws still meet their open vLLM finding
(spec/open_findings.py)."""

from collections import Counter

import pytest
from hypothesis import given, settings

from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.open_findings import (
    LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES,
    MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD,
)
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES
from kvspec.stateful.config import MachineConfig, _mtp_left_out, _valid, machine_configs
from kvspec.stateful.fixed import fixed_runs, run_fixed
from kvspec.stateful.machine import live_manager, make_cache_machine

FULL_2, FULL_4 = CacheGroup(Kind.FULL, 2), CacheGroup(Kind.FULL, 4)


def mtp(groups, eagle, k, unit=None, blocks=40) -> MachineConfig:
    return MachineConfig(tuple(groups), unit or min(g.block_size for g in groups), eagle, k, None, blocks,
                         multi_module_mtp=True)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(machine_configs())
def test_a_drawn_chain_is_one_vllm_accepts_and_reads_its_length_ahead(config):
    assert _valid(config), config
    if config.multi_module_mtp:
        assert config.eagle is not None and 2 <= config.num_speculative_tokens <= 4
        assert config.prefill_lookahead == config.num_speculative_tokens
        assert not _mtp_left_out(config), config
    else:
        assert config.prefill_lookahead == (1 if config.eagle else 0)
    assert config.hash_lookahead_tokens == (config.prefill_lookahead if config.eagle == "lookahead" else 0)


@pytest.mark.parametrize(("config", "refused"), [
    (mtp([FULL_2], "drop", 3), True),  # the drop flags every group when none is annotated
    (mtp([FULL_2], "drop", 2), False),
    (mtp([FULL_2], "lookahead", 3), False),  # lookahead hashes flag only the annotated groups
    (mtp([CacheGroup(Kind.FULL, 2, is_eagle_group=True)], "lookahead", 3), True),
])
def test_the_chain_refusal_is_vllms(vllm_adapter, config, refused):
    if config.eagle == "lookahead" and LOOKAHEAD_BLOCK_HASHES not in vllm_adapter.rules:
        pytest.skip("this release has no lookahead hashes")
    assert _valid(config) == (not refused)
    if refused:
        with pytest.raises(ValueError, match="Multi-module MTP with prefix caching requires"):
            live_manager(vllm_adapter, config)
    else:
        live_manager(vllm_adapter, config)


def test_the_manager_is_set_up_as_the_engine_sets_it_for_the_chain(vllm_adapter):
    if LOOKAHEAD_BLOCK_HASHES not in vllm_adapter.rules:
        pytest.skip("this release has no lookahead hashes")
    config = mtp([FULL_4, CacheGroup(Kind.SLIDING_WINDOW, 4, window=5)], "lookahead", 3, blocks=24)
    live = live_manager(vllm_adapter, config)
    coordinator = live.manager.coordinator
    assert coordinator.num_reprefillable_tokens == 2
    assert coordinator.single_type_managers[1].extra_retained_tokens == 2
    assert live.manager.block_pool.num_hash_lookahead_tokens == 3
    assert live.trace.setup["num_prefill_lookahead"] == 3


def test_the_fixed_runs_hold_and_hold_a_tail_back(vllm_adapter):
    stats: Counter = Counter()
    runs = [run for run in fixed_runs(vllm_adapter.rules) if run.config.multi_module_mtp]
    for run in runs:
        run_fixed(make_cache_machine(vllm_adapter, stats), run)
    assert stats["runs with multi-module MTP"] == len(runs) and stats["hits"] >= len(runs) - 1  # not of 1 token
    assert stats["steps holding back a re-prefillable tail"] >= 2 * len(runs)


def test_beside_mamba_the_chain_still_stalls_a_prefill_inside_a_mamba_block(vllm_adapter):
    """Why kvspec/stateful/config.py leaves MTP beside Mamba out: a 4-token budget from 8 of 13
    tokens ends at the block boundary 12, the lookahead reserve cuts it to 10, inside the block,
    and from 10 every chunk is cut to nothing (docs/findings/mamba-prefill-stalls-under-multi-module-mtp.md)."""
    assert MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD in vllm_adapter.rules
    config = mtp([FULL_4, CacheGroup(Kind.MAMBA, 4)], "drop", 3)
    assert _mtp_left_out(config)
    live = live_manager(vllm_adapter, config, record_pool=False)
    live.add_request("r0", list(range(13)))
    assert [(s.start, s.end) for s in (live.schedule("r0", 4) for _ in range(3))] == [(0, 4), (4, 8), (8, 10)]
    assert live.schedule("r0", 2048) is None


def test_with_lookahead_hashes_beside_a_window_a_lookup_still_reads_past_the_hashes(vllm_adapter):
    """Why it leaves MTP with lookahead hashes beside a window out: 17 tokens carry
    (17 - 2) // 16 = 0 hashes, and the window's finder reads hash 0 of a 16-token cap
    (docs/findings/lookup-reads-past-the-lookahead-hashes.md)."""
    if LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES not in vllm_adapter.rules:
        pytest.skip("this release has no lookahead hashes")
    config = mtp([CacheGroup(Kind.SLIDING_WINDOW, 16, window=32)], "lookahead", 2)
    assert _mtp_left_out(config)
    live = live_manager(vllm_adapter, config, record_pool=False)
    with pytest.raises(IndexError):
        live.lookup(list(range(17)))
