"""The block sizes the engine core resolves before it builds the KV-cache manager, from real
vLLM, against the spec: the scheduler block size (lcm of the groups'), the hash unit (the
prefix-match unit, or their gcd; refusals included), the cache-hit alignment (the hash unit when
fine-grained partial hits are on, else the lcm), and the EAGLE proof margin. After those phases,
on their own draws (so the phases before draw what they always drew): the same resolution
under decode context parallelism (spec/dcp.py), and with prefix caching off."""

from __future__ import annotations

import math
from collections import Counter
from functools import reduce

from hypothesis import strategies as st

from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.spec.dcp import resolved_block_sizes
from kvspec.spec.hits import (
    LookupSetting,
    cache_hit_alignment,
    eagle_proof_margin,
    partial_hash_hits_enabled,
    resolved_hash_block_size,
    scheduler_block_size,
)
from kvspec.spec.layers import CacheGroup, Kind

BLOCK_SIZE_EXAMPLES = 500


@st.composite
def group_lists(draw) -> list[CacheGroup]:
    """1 to 5 groups of every kind, block sizes sharing a base so lcm and gcd both vary."""
    base = draw(st.sampled_from([1, 2, 4, 8, 16, 3, 5]))
    groups = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(list(Kind)))
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


def resolves_as_the_spec_says(adapter, groups: list[CacheGroup], prefix_match_unit: int | None = None) -> None:
    sizes = [g.block_size for g in groups]
    try:
        unit = resolved_hash_block_size(sizes, prefix_match_unit)
    except ValueError:
        unit = None  # the spec refuses it: vLLM must too
    try:
        resolved = adapter.resolve_block_sizes(groups, prefix_match_unit)
    except ValueError as exc:
        assert unit is None, f"vLLM refused prefix_match_unit={prefix_match_unit} for {groups}: {exc}"
        return
    assert unit is not None, f"vLLM accepted prefix_match_unit={prefix_match_unit} for {groups}"
    if len(groups) == 1:
        expected = (unit, unit, unit)
    else:
        setting = LookupSetting(tuple(groups), unit)
        expected = (scheduler_block_size(setting), unit, cache_hit_alignment(setting))
    got = (resolved.scheduler_block_size, resolved.hash_block_size, resolved.cache_hit_alignment)
    assert got == expected, (
        f"(scheduler, hash, alignment): vLLM {got}, spec {expected} for {groups}, "
        f"prefix_match_unit={prefix_match_unit}"
    )


def resolves_as_spec_dcp_says(adapter, case: tuple[list[CacheGroup], int | None, int, bool]) -> None:
    """vLLM's (scheduler, hash, alignment) under ``dcp`` ranks, with prefix caching on or off,
    as spec/dcp.py:resolved_block_sizes says, refusals included."""
    groups, prefix_match_unit, dcp, prefix_caching = case
    try:
        expected = resolved_block_sizes(groups, prefix_match_unit, dcp=dcp, prefix_caching=prefix_caching)
    except ValueError:
        expected = None  # the spec refuses it: vLLM must too
    context = f"{groups}, prefix_match_unit={prefix_match_unit}, dcp={dcp}, prefix caching {'on' if prefix_caching else 'off'}"
    try:
        resolved = adapter.resolve_block_sizes(groups, prefix_match_unit, dcp=dcp, prefix_caching=prefix_caching)
    except ValueError as exc:
        assert expected is None, f"vLLM refused {context}: {exc}"
        return
    got = (resolved.scheduler_block_size, resolved.hash_block_size, resolved.cache_hit_alignment)
    assert expected is not None, f"vLLM resolved {got}, the spec refuses: {context}"
    assert got == expected, f"(scheduler, hash, alignment): vLLM {got}, spec {expected} for {context}"


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
DCP_AND_CACHE_EXAMPLES = 200


def margin_as_the_spec_says(adapter, case: tuple[int, int, bool]) -> None:
    block_size, hash_block_size, fine = case
    got = adapter.eagle_proof_margin(block_size, hash_block_size, fine)
    want = eagle_proof_margin(block_size, hash_block_size, fine)
    assert got == want, f"eagle_proof_margin{case}: vLLM {got}, spec {want}"


MARGIN_CASES = st.tuples(st.integers(1, 64), st.integers(1, 64), st.booleans()).filter(lambda c: c[0] % c[1] == 0)


def check_block_sizes(adapter, seed: int = 0, scale: float = 1.0) -> CheckResult:
    reached: Counter = Counter()

    def resolves(case):
        groups, prefix_match_unit = case
        reached["group lists"] += 1
        reached["with a prefix-match unit"] += prefix_match_unit is not None
        reached["partial hits"] += len(groups) > 1 and partial_hash_hits_enabled(
            LookupSetting(tuple(groups), reduce(math.gcd, (g.block_size for g in groups)))
        )
        resolves_as_the_spec_says(adapter, groups, prefix_match_unit)

    failure = run_property(
        resolves, group_lists_and_units(), seed=seed, examples=scaled(BLOCK_SIZE_EXAMPLES, scale)
    )
    if not failure:
        failure = run_property(lambda c: margin_as_the_spec_says(adapter, c), MARGIN_CASES, seed=seed, examples=scaled(200, scale))

    def resolves_dcp(case):
        reached["with DCP > 1" if case[2] > 1 else "prefix caching off"] += 1
        resolves_as_spec_dcp_says(adapter, case)

    if not failure:
        failure = run_property(resolves_dcp, dcp_and_cache_cases(), seed=seed,
                               examples=scaled(DCP_AND_CACHE_EXAMPLES, scale), fixed=FIXED_DCP_AND_CACHE_CASES)
    covered = (
        f"{reached['group lists']} group lists ({reached['with a prefix-match unit']} with a prefix-match "
        f"unit, {reached['partial hits']} with partial hits), {scaled(200, scale)} margins, "
        f"{reached['with DCP > 1']} with DCP > 1, {reached['prefix caching off']} with prefix caching off"
    )
    return CheckResult(
        "block sizes",
        covered,
        holds=not failure,
        details=failure or ["scheduler block, hash unit, hit alignment and EAGLE margin as the spec says"],
    )
