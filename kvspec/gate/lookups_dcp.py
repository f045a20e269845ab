"""The core coordinator's lookups under decode context parallelism (DCP > 1), against the
reference at the sharded block sizes (spec/dcp.py, reference/lookup.py:coordinator_answer).
A phase of the prefix-cache lookups check that runs after its drawn lookups, on its own draws,
so the earlier phases draw exactly what they drew before it existed.

vLLM accepts DCP > 1 in a hybrid coordinator only beside full-attention and Mamba groups
(HybridKVCacheCoordinator.__init__ asserts it), so only those kinds are drawn. A single group
must hash at its sharded block size (UnitaryKVCacheCoordinator asserts it).
"""

from __future__ import annotations

import math
from functools import reduce

from hypothesis import strategies as st

from kvspec.reference.lookup import coordinator_answer
from kvspec.spec.dcp import DcpSetting, dcp_cache_hit_alignment, sharded_block_size
from kvspec.spec.hits import CacheState, group_unsafe_reason
from kvspec.spec.layers import CacheGroup, Kind

DCP_LOOKUP_EXAMPLES = 300
DCP_SIZES = (2, 4)
DCP_GROUP_KINDS = (Kind.FULL, Kind.MAMBA, Kind.FULL, Kind.MLA)

# Run first in the phase: one full-attention group stretched to 32 tokens, and the smallest
# hybrid whose partial hits exist only under DCP (Mamba block == hash unit).
FIXED_DCP_LOOKUPS = (
    (DcpSetting((CacheGroup(Kind.FULL, 16),), 32, dcp=2), CacheState(6, frozenset((0, j) for j in range(3))), 96),
    (
        DcpSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16, dcp=2),
        CacheState(8, frozenset({(0, j) for j in range(8)} | {(1, 2), (1, 4)})),
        128,
    ),
)


@st.composite
def dcp_lookups(draw):
    """(setting, state, max_length) with full-attention, MLA and Mamba groups."""
    from kvspec.gate.lookups import cache_states  # noqa: PLC0415 (lookup_check imports this module)

    dcp = draw(st.sampled_from(DCP_SIZES))
    base = draw(st.sampled_from([1, 2, 4, 8, 16]))
    use_eagle = draw(st.booleans())
    groups = tuple(
        CacheGroup(
            draw(st.sampled_from(DCP_GROUP_KINDS)),
            base * draw(st.sampled_from([1, 2, 4])),
            is_eagle_group=use_eagle and draw(st.booleans()),
        )
        for _ in range(draw(st.integers(1, 3)))
    )
    sharded = [sharded_block_size(g, dcp) for g in groups]
    gcd = reduce(math.gcd, sharded)
    if len(groups) == 1:
        hash_bs = sharded[0]
    else:
        hash_bs = draw(st.sampled_from([d for d in (gcd, gcd // 2, gcd // 4) if d and gcd % d == 0]))
    setting = DcpSetting(groups, hash_bs, dcp, use_eagle, allow_partial_hash_hits=draw(st.booleans()))
    state = draw(cache_states(setting.view()))
    top = state.num_hashes * hash_bs
    near_top = st.integers(0, dcp_cache_hit_alignment(setting)).map(lambda d: max(0, top - d))
    return setting, state, draw(near_top | st.integers(0, top))


def dcp_core_conforms(adapter, case) -> None:
    """vLLM's core coordinator under DCP answers as the reference (hit, real blocks, uncached
    common prefix), within the cap, on the alignment, and safely at the sharded sizes."""
    from kvspec.gate.lookups import null_blocks_read  # noqa: PLC0415

    setting, state, max_length = case
    context = f"{setting} {state} M={max_length}"
    answer = adapter.coordinator_answer(
        list(setting.groups), state, max_length, use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size, allow_partial_hash_hits=setting.allow_partial_hash_hits, dcp=setting.dcp,
    )  # fmt: skip
    reference, uncached = coordinator_answer(setting, state, max_length)
    hit = answer.hit.length
    assert hit == reference.length, f"hit: vLLM {hit} != reference {reference.length}; {context}"
    assert answer.hit.real_blocks == reference.real_blocks, f"real blocks differ; {context}"
    if answer.uncached_common_prefix is not None:
        assert answer.uncached_common_prefix == uncached, (
            f"uncached common prefix: vLLM {answer.uncached_common_prefix} != reference {uncached}; {context}"
        )
    alignment = dcp_cache_hit_alignment(setting)
    assert hit <= max_length and hit % alignment == 0, f"hit {hit} past the cap or off the alignment {alignment}; {context}"
    view = setting.view()
    for gid in range(len(setting.groups)):
        reason = group_unsafe_reason(view, state, gid, hit)
        assert reason is None, f"vLLM's hit {hit} is unsafe: {reason}; {context}"
    assert not (missing := null_blocks_read(view, answer.hit)), f"vLLM hands null blocks {missing}; {context}"
