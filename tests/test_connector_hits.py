"""The lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector, find_longest_cache_hit_per_group): hand-checked
answers on real vLLM, the reference and spec on their own, the release rule, the check's verdict
and coverage, each broken variant caught, and the flagged hits' attention gaps, which a load fills."""

from dataclasses import replace

import pytest

from kvspec.divergences.connector_hits import FINE_PROBE_STOPPED, observe_connector_divergence
from kvspec.divergences.known import Observed
from kvspec.draws.connector_hits import FIXED_CONNECTOR_CASES
from kvspec.gate.connector_hits import CONNECTOR_MINIMUMS, check_connector_hits
from kvspec.gate.coverage import shortfalls
from kvspec.gate.names import Outcome
from kvspec.gate.options import GateOptions
from kvspec.impl.broken import VARIANTS, applied
from kvspec.impl.connector_hits import connector_hit, nixl_load_after_a_hit
from kvspec.oracles.connector_hits import flagged_hit_gaps
from kvspec.reference.connector_hits import connector_lookup
from kvspec.spec.connector_hits import (
    CONNECTOR_HIT_PROPERTIES,
    ConnectorAnswer,
    a_flagged_hit_is_full_attentions_own,
    an_unflagged_hit_is_safe,
    max_connector_hit,
    spurious_flag,
    takes_the_per_group_path,
)
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import NEWEST_RULES, PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE
from kvspec.spec.setting import CacheState, LookupSetting

LAGS, PAST, AGREE = FIXED_CONNECTOR_CASES
# Read by hand from kv_cache_manager.py: (hit, hit_diverged, per-group hits) for a 64-token
# request over [full 16, Mamba 16]: full attention holds 3 blocks and Mamba the state at 16;
# full attention 2 blocks and Mamba the state at 48 (past it: the core's reconciled hit, 32 where
# Mamba's state at 32 is cached); both at 32.
BY_HAND = {0: (48, True, (48, 16)), 1: (32, False, (32, 48)), 2: (32, False, (32, 32))}
QUICK = 0.1


@pytest.mark.parametrize("index", sorted(BY_HAND))
def test_vllm_answers_the_fixed_cases_as_read_by_hand(vllm_adapter, index):
    _blocks, answer = connector_hit(vllm_adapter, *FIXED_CONNECTOR_CASES[index])
    assert (answer.hit, answer.hit_diverged, answer.per_group) == BY_HAND[index]


@pytest.mark.parametrize("index", sorted(BY_HAND))
def test_the_reference_answers_the_fixed_cases_as_read_by_hand(index):
    _blocks, answer = connector_lookup(*FIXED_CONNECTOR_CASES[index])
    assert (answer.hit, answer.hit_diverged, answer.per_group) == BY_HAND[index]


def test_a_model_without_mamba_takes_the_core_path_unflagged(vllm_adapter):
    setting = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.SLIDING_WINDOW, 16, window=16)), 16)
    state = CacheState(4, frozenset({(0, j) for j in range(3)} | {(1, 0)}))
    assert not takes_the_per_group_path(setting)
    _blocks, answer = connector_hit(vllm_adapter, setting, state, 64)
    # get_computed_blocks' boundary: the hit plus the uncached common prefix (full attention's 48).
    assert answer == ConnectorAnswer(16, False, None, 48) == connector_lookup(setting, state, 64)[1]


def test_a_request_that_skips_prefix_cache_reads_gets_nothing(vllm_adapter):
    blocks, answer = connector_hit(vllm_adapter, *LAGS[:3], None, True)
    assert answer == ConnectorAnswer(0, False, None) == connector_lookup(*LAGS[:3], None, True)[1]
    assert blocks.real_blocks == ((), ())


def test_the_scheduler_s_cap_lowers_every_group_s_lookup(vllm_adapter):
    """[full 16, Mamba 16], full attention 3 blocks and Mamba the state at 16, capped at 20: full
    attention's own hit is 16, as Mamba's; nothing lags, so the hit 16 is unflagged (0.33 on)."""
    _blocks, answer = connector_hit(vllm_adapter, *LAGS[:3], 20, False)
    assert answer == ConnectorAnswer(16, False, (16, 16)) == connector_lookup(*LAGS[:3], 20, False)[1]


def test_the_spec_rejects_an_unflagged_lagging_hit_and_accepts_it_flagged():
    setting, state, num_tokens, _cap, _skip = LAGS
    limit = max_connector_hit(num_tokens)
    unflagged = ConnectorAnswer(48, False, (48, 16))
    assert an_unflagged_hit_is_safe(setting, state, limit, unflagged)
    flagged = replace(unflagged, hit_diverged=True)
    assert all(prop(setting, state, limit, flagged) == [] for prop in CONNECTOR_HIT_PROPERTIES)
    assert not spurious_flag(setting, state, limit, flagged)
    assert spurious_flag(AGREE[0], AGREE[1], limit, ConnectorAnswer(32, True, (32, 32)))


def test_a_flagged_hit_past_full_attentions_own_kv_breaks_the_spec():
    """The flag hands only the lagging groups to the connector: the local prefix it reports is
    full attention's, so its KV must be cached up to the hit."""
    setting = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16), CacheGroup(Kind.FULL, 8)), 8)
    state = CacheState(4, frozenset({(0, 0), (0, 1), (1, 1), (2, 1)}))
    assert a_flagged_hit_is_full_attentions_own(setting, state, 32, ConnectorAnswer(16, True, (16, 16, 0))) == []
    past = ConnectorAnswer(24, True, (16, 16, 0))
    assert a_flagged_hit_is_full_attentions_own(setting, state, 32, past) == [
        "flagged hit 24: group 0 (full) lacks KV for tokens [0, 24)"]


def test_the_per_group_peek_is_a_release_rule():
    """[Mamba 4, full 4], hash unit 2, EAGLE: full attention holds 2 units of a 4-token request.
    From 0.32 it looks past the cap (3) to 4 and drops one unit (hit 2, Mamba lags: flagged);
    0.31 looks at 3, finds 2 and drops to 0."""
    setting = LookupSetting((CacheGroup(Kind.MAMBA, 4), CacheGroup(Kind.FULL, 4)), 2, use_eagle=True)
    case = (setting, CacheState(2, frozenset({(1, 0), (1, 1)})), 4)
    assert connector_lookup(*case, rules=NEWEST_RULES)[1] == ConnectorAnswer(2, True, (0, 2))
    older = NEWEST_RULES - {PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE}
    assert connector_lookup(*case, rules=older)[1] == ConnectorAnswer(0, False, (0, 0))


def test_the_check_holds_above_its_minimums(vllm_adapter):
    result = check_connector_hits(vllm_adapter, GateOptions())
    assert result.holds, result.details
    assert shortfalls(result.coverage, CONNECTOR_MINIMUMS) == []
    assert result.coverage["lookups"] >= 800


@pytest.mark.parametrize("name", ["connector-hit-never-diverges", "per-group-hits-clamped-to-full-attention"])
def test_each_broken_variant_is_caught(vllm_adapter, name):
    with applied(vllm_adapter, [name]):
        result = check_connector_hits(vllm_adapter, GateOptions(scale=QUICK))
    assert result.outcome is Outcome.RULE_VIOLATED, result.details
    assert VARIANTS[name].caught_by == (result.name,)
    assert check_connector_hits(vllm_adapter, GateOptions(scale=QUICK)).holds


def test_latent_a_flagged_hit_claims_kv_a_second_full_attention_group_lacks(vllm_adapter):
    """[full 16, Mamba 16, full 8]: the second full-attention group (8-token blocks) lost its
    first block. Its own hit is 0, so vLLM flags the hit, but reports full attention's 16 as the
    local prefix, handing that group no block for tokens [0, 16). Counted by the check, not
    failed: the scheduler falls back to get_computed_blocks when the connector finds no tokens
    (sched/scheduler.py:1238-1247), and every connector asked this lookup that finds some
    loads the gap (kvspec/oracles/connector_hits.py:flagged_hit_gaps has the paths): allocate_slots
    gives the lagging group fresh, unhashed blocks from its own hit on
    (single_type_kv_cache_manager.py:332-373), and NIXL, Mooncake and MoRIIO pull into those,
    paired with the prefiller's by position (the next test drives NIXL's decode side)."""
    setting = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16), CacheGroup(Kind.FULL, 8)), 8)
    state = CacheState(4, frozenset({(0, 0), (0, 1), (1, 1), (2, 1)}))
    blocks, answer = connector_hit(vllm_adapter, setting, state, 32)
    assert answer == ConnectorAnswer(16, True, (16, 16, 0))
    assert blocks.real_blocks[2] == ()  # no block at all for the 16 tokens the hit claims
    assert flagged_hit_gaps(setting, state, 32, answer)


def test_a_nixl_load_on_a_flagged_hit_pulls_the_lagging_groups_gap(vllm_adapter):
    """The same flagged hit admitted for a NIXL load, as the scheduler admits it: the real
    NixlPullConnectorScheduler claims the prompt less the hit and the token the decoder
    recomputes for Mamba (base_scheduler.py:_prefill_backoff), allocate_slots gives the
    8-token group fresh blocks for all of [0, 31), and NIXL hands its worker every one of
    them, the gap [0, 16) included, while full attention pulls only past its hit and Mamba its
    state slot. The worker pairs them with the prefiller's 31 tokens' blocks from the end
    (nixl/base_worker.py:_apply_prefix_caching), so the 8-token group's are all of them."""
    setting = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16), CacheGroup(Kind.FULL, 8)), 8)
    state = CacheState(4, frozenset({(0, 0), (0, 1), (1, 1), (2, 1)}))
    answer, external, pulled = nixl_load_after_a_hit(vllm_adapter, setting, state, 32)
    assert (answer.hit, answer.hit_diverged, external) == (16, True, 15)
    assert pulled == ((1,), (1,), (0, 1, 2, 3))


def test_a_nixl_load_on_a_flagged_hit_pulls_a_lagging_windows_tail(vllm_adapter):
    """The check's smallest flagged gap at seed 0: [sliding window 6 (EAGLE), Mamba, full], 2-token
    blocks, 11 tokens; the window group's own hit is 0, full attention's 8, so the flagged hit
    claims window KV for [3, 8) that is not cached. NIXL loads 2 tokens, the decoder computes
    token 10 first, and the window group pulls blocks 2-4, tokens [4, 10), which hold all of
    token 10's window [5, 10) (its blocks 0-1, null, are never read;
    nixl/base_scheduler.py:get_exchange_clipped_blocks keeps a window's tail only)."""
    setting = LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 2, window=6, is_eagle_group=True),
                             CacheGroup(Kind.MAMBA, 2), CacheGroup(Kind.FULL, 2)), 1, use_eagle=True)
    cached = {(0, 1), (1, 0), (1, 1)} | {(2, i) for i in (0, 1, 3, 4, 5, 6, 7, 8)}
    state = CacheState(11, frozenset(cached))
    _blocks, lookup = connector_hit(vllm_adapter, setting, state, 11)
    assert lookup == ConnectorAnswer(8, True, (0, 2, 8))
    assert flagged_hit_gaps(setting, state, 10, lookup)
    answer, external, pulled = nixl_load_after_a_hit(vllm_adapter, setting, state, 11)
    assert (answer.hit, external) == (8, 2)
    assert pulled == ((2, 3, 4), (4,), (4,))


def test_a_flag_from_a_probe_stopped_at_a_missing_unit_is_filed_under_that_cause(vllm_adapter):
    """known-divergences.toml's connector-flags-a-safe-hit-fine-probe-stops-at-missing-unit:
    group 1 (full 16) holds both blocks under units 1 and 3, but its probe below the cap of 31
    reads only the missing unit 2. With unit 2 cached nothing lags, so nothing is flagged."""
    setting = LookupSetting((CacheGroup(Kind.FULL, 32), CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 32)), 8)
    state = CacheState(4, frozenset({(0, 1), (0, 2), (1, 0), (1, 1), (1, 3), (2, 2), (2, 3)}))
    _, answer = connector_hit(vllm_adapter, setting, state, 32)
    assert (answer.hit, answer.hit_diverged, answer.per_group) == (24, True, (24, 16, 24))
    observed = Observed()
    observe_connector_divergence(observed, vllm_adapter, (setting, state, 32, None, False), 31, answer)
    where = f"connector flags a safe hit several groups no EAGLE: {FINE_PROBE_STOPPED}"
    assert list(observed.counts) == [("short-hit", where)]

    _, whole = connector_hit(vllm_adapter, setting, replace(state, cached=state.cached | {(1, 2)}), 32)
    assert (whole.hit, whole.hit_diverged) == (24, False)
