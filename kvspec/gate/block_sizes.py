"""The block sizes the engine core resolves before it builds the KV-cache manager, from real
vLLM, against the spec: the scheduler block size (lcm of the groups'), the hash unit (the
prefix-match unit, or their gcd; refusals included), the cache-hit alignment (the hash unit when
fine-grained partial hits are on, else the lcm), and the EAGLE proof margin. After those phases,
on their own draws (so the phases before draw what they always drew): the same resolution
under decode context parallelism (spec/resolution.py, spec/dcp.py), and with prefix caching off."""

from __future__ import annotations

import math
from collections import Counter
from functools import reduce

from kvspec.draws.block_sizes import (
    FIXED_DCP_AND_CACHE_CASES,
    FIXED_KIND_CASES,
    MARGIN_CASES,
    NEW_RESOLVED_KINDS,
    dcp_and_cache_cases,
    group_lists_and_units,
)
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.oracles.block_sizes import margin_violations, resolution_violations
from kvspec.oracles.invariants import require_none
from kvspec.spec.layers import CLASSIC_KINDS, CacheGroup
from kvspec.spec.releases import HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE, ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT
from kvspec.spec.resolution import (
    cache_hit_alignment,
    eagle_proof_margin,
    groups_hash_unit,
    partial_hash_hits_enabled,
    resolved_block_sizes,
    scheduler_block_size,
)
from kvspec.spec.setting import LookupSetting

BLOCK_SIZE_EXAMPLES = 500
# Group lists holding each drawn kind (seed 0, full budget: over 90 each).
BLOCK_SIZE_MINIMUMS = {f"kind {kind}": 40 for kind in (*CLASSIC_KINDS, *NEW_RESOLVED_KINDS)}


def _as_the_release_resolves(adapter, expected: tuple[int, int, int] | None) -> tuple[int, int, int | None] | None:
    """The spec's (scheduler, hash, alignment), the alignment left out (None) on a release where
    the engine does not resolve it (spec/releases.py:HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE)."""
    if expected is None or adapter.has(HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE):
        return expected
    return (*expected[:2], None)


def resolves_as_the_spec_says(adapter, groups: list[CacheGroup], prefix_match_unit: int | None = None) -> None:
    try:
        unit = groups_hash_unit(groups, prefix_match_unit,
                                one_group_refuses=adapter.has(ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT))
    except ValueError:
        unit = None  # the spec refuses it: vLLM must too
    if unit is None:
        expected = None
    elif len(groups) == 1:
        expected = (unit, unit, unit)
    else:
        setting = LookupSetting(tuple(groups), unit)
        expected = (scheduler_block_size(setting), unit, cache_hit_alignment(setting))
    context = f"{groups}, prefix_match_unit={prefix_match_unit}"
    expected = _as_the_release_resolves(adapter, expected)
    require_none(resolution_violations(expected, resolved_by(adapter, groups, prefix_match_unit), context))


def resolves_as_spec_dcp_says(adapter, case: tuple[list[CacheGroup], int | None, int, bool]) -> None:
    """vLLM's (scheduler, hash, alignment) under ``dcp`` ranks, with prefix caching on or off,
    as spec/resolution.py:resolved_block_sizes says, refusals included."""
    groups, prefix_match_unit, dcp, prefix_caching = case
    try:
        expected = resolved_block_sizes(groups, prefix_match_unit, dcp=dcp, prefix_caching=prefix_caching,
                                        rules=adapter.rules)
    except ValueError:
        expected = None  # the spec refuses it: vLLM must too
    expected = _as_the_release_resolves(adapter, expected)
    context = f"{groups}, prefix_match_unit={prefix_match_unit}, dcp={dcp}, prefix caching {'on' if prefix_caching else 'off'}"
    got = resolved_by(adapter, groups, prefix_match_unit, dcp=dcp, prefix_caching=prefix_caching)
    require_none(resolution_violations(expected, got, context))


def resolved_by(adapter, groups, prefix_match_unit, **options) -> tuple[int, int, int | None] | ValueError:
    """vLLM's (scheduler, hash, alignment; None where the engine resolves none), or the
    ValueError with which it refuses the groups."""
    try:
        resolved = adapter.resolve_block_sizes(groups, prefix_match_unit, **options)
    except ValueError as refusal:
        return refusal
    return resolved.scheduler_block_size, resolved.hash_block_size, resolved.cache_hit_alignment


DCP_AND_CACHE_EXAMPLES = 200


def margin_as_the_spec_says(adapter, case: tuple[int, int, bool]) -> None:
    block_size, hash_block_size, fine = case
    got = adapter.eagle_proof_margin(block_size, hash_block_size, fine)
    require_none(margin_violations(case, got, eagle_proof_margin(block_size, hash_block_size, fine)))


def check_block_sizes(adapter, options: GateOptions) -> CheckResult:
    seed, scale = options.seed, options.scale
    reached: Counter = Counter()
    kinds_reached: Counter = Counter()  # group lists per kind (BLOCK_SIZE_MINIMUMS)

    def resolves(case):
        groups, prefix_match_unit = case
        reached["group lists"] += 1
        kinds_reached.update(f"kind {kind}" for kind in {g.kind for g in groups})
        reached["with a prefix-match unit"] += prefix_match_unit is not None
        reached["partial hits"] += len(groups) > 1 and partial_hash_hits_enabled(
            LookupSetting(tuple(groups), reduce(math.gcd, (g.block_size for g in groups)))
        )
        resolves_as_the_spec_says(adapter, groups, prefix_match_unit)

    failure = run_property(
        resolves, group_lists_and_units(), seed=seed, examples=scaled(BLOCK_SIZE_EXAMPLES, scale),
        fixed=FIXED_KIND_CASES,
    )
    engine_resolves = adapter.has(HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE)
    margins = scaled(200, scale) if engine_resolves else 0
    if not failure and engine_resolves:
        failure = run_property(lambda c: margin_as_the_spec_says(adapter, c), MARGIN_CASES, seed=seed, examples=margins)

    def resolves_dcp(case):
        reached["with DCP > 1" if case[2] > 1 else "prefix caching off"] += 1
        resolves_as_spec_dcp_says(adapter, case)

    if not failure:
        failure = run_property(resolves_dcp, dcp_and_cache_cases(), seed=seed,
                               examples=scaled(DCP_AND_CACHE_EXAMPLES, scale), fixed=FIXED_DCP_AND_CACHE_CASES)
    covered = (
        f"{reached['group lists']} group lists ({reached['with a prefix-match unit']} with a prefix-match "
        f"unit, {reached['partial hits']} with partial hits), {margins} margins, "
        f"{reached['with DCP > 1']} with DCP > 1, {reached['prefix caching off']} with prefix caching off"
    )
    return CheckResult(
        Check.BLOCK_SIZES,
        covered,
        holds=not failure,
        details=failure or [f"{'scheduler block, hash unit, hit alignment and EAGLE margin' if engine_resolves else 'scheduler block and hash unit'} as the spec says"],
        not_in_release=[] if engine_resolves else ["the engine's hit alignment and EAGLE margin"],
        coverage=dict(sorted(kinds_reached.items())),
        minimums=BLOCK_SIZE_MINIMUMS,
    )
