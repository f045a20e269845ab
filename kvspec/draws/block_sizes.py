"""The draws of the block-sizes check: group lists with a prefix-match unit, DCP sizes and prefix
caching on or off, and EAGLE margins."""

from __future__ import annotations

import math
from functools import reduce

from hypothesis import strategies as st

from kvspec.spec.layers import CLASSIC_KINDS, CacheGroup, Kind


@st.composite
def group_lists(draw) -> list[CacheGroup]:
    """1 to 5 groups of every kind, block sizes sharing a base so lcm and gcd both vary."""
    base = draw(st.sampled_from([1, 2, 4, 8, 16, 3, 5]))
    groups = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(CLASSIC_KINDS))
        block_size = base * draw(st.sampled_from([1, 2, 3, 4, 8]))
        groups.append(
            CacheGroup(
                kind,
                block_size,
                window=draw(st.integers(1, 4 * block_size)) if kind == Kind.SLIDING_WINDOW else None,
                chunk=block_size * 2 if kind == Kind.CHUNKED_LOCAL else None,
            )
        )
    return groups


@st.composite
def group_lists_and_units(draw) -> tuple[list[CacheGroup], int | None]:
    """Groups, and a prefix-match unit: none, a divisor of their gcd, or any small number."""
    groups = draw(group_lists())
    gcd = reduce(math.gcd, (g.block_size for g in groups))
    divisors = [d for d in range(1, gcd + 1) if gcd % d == 0]
    unit = draw(st.one_of(st.none(), st.none(), st.sampled_from(divisors), st.integers(1, 64)))
    return groups, unit


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
