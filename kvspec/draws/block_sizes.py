"""The draws of the block-sizes check: group lists with a prefix-match unit, DCP sizes and prefix
caching on or off, and EAGLE margins."""

from __future__ import annotations

import math
from functools import cache, reduce

from hypothesis import strategies as st

from kvspec.spec.layers import CLASSIC_KINDS, CacheGroup, Kind

# The issue-15 kinds the block-size check draws: prefix-cacheable groups with a fine-grained
# manager (R-SWA, sink) and without one (cross attention). Not yet the groups that take no part in
# prefix caching (circular buffer, HiSparse): vLLM 0.30-0.31 still ask them whether they probe
# inside blocks (kv_cache_utils:partial_hash_hits_enabled), a release difference with no rule yet.
NEW_RESOLVED_KINDS = (Kind.RSWA, Kind.SINK_FULL, Kind.CROSS_ATTENTION)


# Made once, not per draw (Hypothesis validates each strategy it makes); the same choices.
BASES = st.sampled_from([1, 2, 4, 8, 16, 3, 5])
KIND_CHOICES = st.one_of(st.sampled_from(CLASSIC_KINDS), st.sampled_from(NEW_RESOLVED_KINDS))
MULTIPLES = st.sampled_from([1, 2, 3, 4, 8])


@st.composite
def group_lists(draw) -> list[CacheGroup]:
    """1 to 5 groups of every kind, block sizes sharing a base so lcm and gcd both vary."""
    base = draw(BASES)
    groups = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(KIND_CHOICES)
        block_size = base * draw(MULTIPLES)
        groups.append(
            CacheGroup(
                kind,
                block_size,
                window=draw(st.integers(1, 4 * block_size)) if kind == Kind.SLIDING_WINDOW else None,
                chunk=block_size * 2 if kind == Kind.CHUNKED_LOCAL else None,
                rswa_window=block_size * 4 if kind == Kind.RSWA else None,
                sink_len=block_size if kind == Kind.SINK_FULL else None,
            )
        )
    return groups


def _one_of_each(kind: Kind, block_size: int) -> CacheGroup:
    return CacheGroup(kind, block_size, window=block_size if kind == Kind.SLIDING_WINDOW else None,
                      chunk=2 * block_size if kind == Kind.CHUNKED_LOCAL else None,
                      rswa_window=4 * block_size if kind == Kind.RSWA else None,
                      sink_len=block_size if kind == Kind.SINK_FULL else None)


# Run before the drawn lists whatever the budget: each kind in blocks of 32 beside a Mamba group
# of 64 and full attention of 16, so the hash unit is 16 and the fine-grained test asks the kind.
FIXED_KIND_CASES = [([_one_of_each(kind, 32), CacheGroup(Kind.MAMBA, 64), CacheGroup(Kind.FULL, 16)], None)
                    for kind in (*CLASSIC_KINDS, *NEW_RESOLVED_KINDS) if kind != Kind.MAMBA]


@st.composite
def group_lists_and_units(draw) -> tuple[list[CacheGroup], int | None]:
    """Groups, and a prefix-match unit: none, a divisor of their gcd, or any small number."""
    groups = draw(group_lists())
    unit = draw(prefix_match_units(reduce(math.gcd, (g.block_size for g in groups))))
    return groups, unit


@cache
def prefix_match_units(gcd: int):
    divisors = [d for d in range(1, gcd + 1) if gcd % d == 0]
    return st.one_of(st.none(), st.none(), st.sampled_from(divisors), st.integers(1, 64))


@st.composite
def dcp_and_cache_cases(draw) -> tuple[list[CacheGroup], int | None, int, bool]:
    """Groups and a prefix-match unit as above, then DCP 1, 2 or 4 with prefix caching on or
    off (at least one of the two away from the default)."""
    groups, unit = draw(group_lists_and_units())
    dcp = draw(st.sampled_from([1, 2, 4]))
    prefix_caching = draw(st.booleans()) if dcp > 1 else False
    return groups, unit, dcp, prefix_caching


FULL, MAMBA = Kind.FULL, Kind.MAMBA
# First in the phase: one sharded group (32 with DCP 2); the smallest hybrid whose partial hits
# exist only under DCP; two block sizes with prefix caching off (no finer hash unit).
FIXED_DCP_AND_CACHE_CASES = (
    ([CacheGroup(FULL, 16)], None, 2, True),
    ([CacheGroup(FULL, 16), CacheGroup(MAMBA, 16)], None, 2, True),
    ([CacheGroup(FULL, 16), CacheGroup(FULL, 32)], None, 1, False),
)


MARGIN_CASES = st.tuples(st.integers(1, 64), st.integers(1, 64), st.booleans()).filter(lambda c: c[0] % c[1] == 0)
