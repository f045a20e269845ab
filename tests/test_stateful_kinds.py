"""The stateful check over issue 15's kinds a KVCacheManager holds in a decoder-only model: the
hidden-state cache (full attention's manager) and the circular buffer (one ring block per
request, outside prefix caching), drawn beside every classic kind."""

from collections import Counter

import hypothesis
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from kvspec.gate.coverage import shortfalls
from kvspec.gate.options import GateOptions
from kvspec.gate.result import gate_settings
from kvspec.gate.stateful import MTP_RUNS, STATEFUL_EXAMPLES, STATEFUL_MINIMUMS, check_stateful_manager
from kvspec.impl.broken import applied
from kvspec.oracles.invariants import STATEFUL_REFERENCE, STATEFUL_SAFE, Violated
from kvspec.spec.hits import lookup_preconditions_hold
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind
from kvspec.spec.resolution import groups_hash_unit
from kvspec.stateful.config import STATEFUL_KINDS, MachineConfig, machine_configs
from kvspec.stateful.machine import make_cache_machine, run_machine

# A ring of 4 beside full attention of 16: the hash unit (16, the one prefix-cacheable block) is
# not a divisor of the ring's block, which vLLM accepts (kv_cache_utils:resolve_kv_cache_block_sizes
# asks only the prefix-cacheable groups).
FULL_BESIDE_RING = (CacheGroup(Kind.FULL, 16), CacheGroup(Kind.CIRCULAR_BUFFER, 4))


def run(adapter, examples: int, configs=None) -> Counter:
    stats: Counter = Counter()
    state_machine = hypothesis.seed(0)(make_cache_machine(adapter, stats, configs))
    run_machine(state_machine, gate_settings(examples, phases=[Phase.generate]), steps=30)
    return stats


@settings(max_examples=300, deadline=None, derandomize=True)
@given(machine_configs())
def test_every_drawn_configuration_is_one_vllm_accepts(config):
    assert lookup_preconditions_hold(config.groups), config
    for group in config.groups:
        assert group.kind in STATEFUL_KINDS
        if group.kind not in NOT_PREFIX_CACHEABLE_KINDS:
            assert group.block_size % config.hash_block_size == 0, config


def test_the_hash_unit_need_not_divide_a_circular_buffers_block():
    assert groups_hash_unit(list(FULL_BESIDE_RING)) == 16
    assert groups_hash_unit(list(FULL_BESIDE_RING), 8) == 8  # several groups: no one-group refusal
    with pytest.raises(ValueError):
        groups_hash_unit(list(FULL_BESIDE_RING), 32)


def test_the_engine_resolves_a_group_beside_a_ring_as_the_spec_says(vllm_adapter):
    from kvspec.gate.block_sizes import resolves_as_the_spec_says

    for unit in (None, 8, 16, 32):
        resolves_as_the_spec_says(vllm_adapter, list(FULL_BESIDE_RING), unit)


def test_a_prompt_beside_a_ring_is_reused_and_the_ring_claims_nothing(vllm_adapter):
    config = MachineConfig(FULL_BESIDE_RING, 16, None, 0, None, 24)
    stats: Counter = Counter()
    state = make_cache_machine(vllm_adapter, stats, st.just(config))()
    state.setup(config, [list(range(8)) * 9])
    state.add(document=0, length=65, suffix=[], budget=2048)
    state.stop(pick=0, preempt=False)
    state.add(document=0, length=65, suffix=[], budget=2048)
    assert state.live.requests["r1"].hit_length == 64
    state.blocks_are_accounted_for()
    assert stats["hits with circular_buffer"] == 1


def test_the_check_reaches_each_kind_above_its_minimum(vllm_adapter):
    scale = 0.3
    result = check_stateful_manager(vllm_adapter, GateOptions(scale=scale))
    assert result.holds, result.details
    assert result.minimums == STATEFUL_MINIMUMS
    assert set(STATEFUL_MINIMUMS) == {f"{what} {kind}" for what in ("stateful kind", "hits with")
                                      for kind in STATEFUL_KINDS if kind != Kind.CHUNKED_LOCAL} | {MTP_RUNS}
    assert not shortfalls(result.coverage, result.minimums, scale)
    for kind in STATEFUL_KINDS:
        assert result.coverage[f"hits with {kind}"] > 0, kind


def test_a_ring_that_takes_part_in_the_hybrid_lookup_is_caught(vllm_adapter):
    with applied(vllm_adapter, ["hybrid-looks-up-scratch-groups"]):
        with pytest.raises(Violated) as failure:
            run(vllm_adapter, STATEFUL_EXAMPLES)
    assert failure.value.violations[0].invariant in (STATEFUL_SAFE, STATEFUL_REFERENCE), failure.value.violations
