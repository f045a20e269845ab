"""The reference's uncached common prefix and its DCP lookups (reference/lookup.py:
coordinator_answer, spec/dcp.py) against hand-worked cases, and real vLLM under DCP."""

from kvspec.draws.lookups import FIXED_DCP_LOOKUPS
from kvspec.gate.lookups import dcp_core_conforms
from kvspec.reference.lookup import coordinator_answer
from kvspec.spec.dcp import DcpSetting
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import CacheState, Hit, LookupSetting

FULL, MAMBA = Kind.FULL, Kind.MAMBA


def dense(num_hashes, *groups, extra=()):
    return CacheState(num_hashes, frozenset({(g, j) for g in groups for j in range(num_hashes)} | set(extra)))


def test_the_uncached_prefix_is_the_longest_group_hit_past_the_reconciled_one():
    setting = LookupSetting((CacheGroup(FULL, 16), CacheGroup(MAMBA, 16)), 16)
    # Full attention hits 64, Mamba only at 32: 32 tokens every group but Mamba has.
    hit, uncached = coordinator_answer(setting, dense(4, 0, extra={(1, 1)}), 64)
    assert (hit.length, uncached) == (32, 32)
    # Every group agrees: nothing uncached; one group: always 0.
    assert coordinator_answer(setting, dense(4, 0, 1), 64)[1] == 0
    assert coordinator_answer(LookupSetting((CacheGroup(FULL, 16),), 16), dense(4, 0), 64)[1] == 0


def test_under_dcp_full_attention_blocks_span_the_ranks():
    one = DcpSetting((CacheGroup(FULL, 16),), 32, dcp=2)
    # Every 32-token unit cached; capped at 96: three blocks of 32 tokens (16 per rank).
    assert coordinator_answer(one, dense(6, 0, extra=()), 96)[0] == Hit(96, ((True, True, True),))
    hybrid = DcpSetting((CacheGroup(FULL, 16), CacheGroup(MAMBA, 16)), 16, dcp=2)
    assert cache_hit_alignment(hybrid) == 16  # partial hits: Mamba block == hash unit is enough
    # Full attention (32-token blocks, probed per 16) has everything, Mamba states at 48 and 80.
    hit, uncached = coordinator_answer(hybrid, dense(8, 0, extra={(1, 2), (1, 4)}), 128)
    assert (hit.length, uncached) == (80, 48)


def test_vllm_under_dcp_answers_as_the_reference(vllm_adapter):
    for case in FIXED_DCP_LOOKUPS:
        dcp_core_conforms(vllm_adapter, case)
