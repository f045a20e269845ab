"""Real vLLM's prefix-cache lookups against the reference model (reference/lookup.py) and
the safety rules (spec/hits.py), on random groups and random cache states. Stateless: each
example builds a fresh coordinator (core, or the Mooncake store connector's) over exactly the
drawn cache. The tests (tests/test_hits_conformance.py) and the gate use the same pieces.

Preconditions vLLM asserts are not findings, so draws that break them are filtered out:
* one group with a hash unit other than its block size (UnitaryKVCacheCoordinator asserts
  ``hash_block_size == block_size``; the Mooncake coordinator accepts it and is still checked);
* a chunked-local group that would drop the EAGLE block, or whose block size differs from the
  hit alignment (ChunkedLocalAttentionManager.find_longest_cache_hit asserts both).
Two restrictions are ours, not vLLM's, and are documented where they are drawn: annotations
only with EAGLE on (vLLM annotates groups only when the drop is in effect), and chunk sizes that
are multiples of the block size (tests/test_hits_conformance.py shows what happens otherwise).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from functools import reduce

from hypothesis import assume
from hypothesis import strategies as st

from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.emit.describe import describe_lookup
from kvspec.divergences.known import DRAFTER_KIND, Observed, drafter_where, paths_where, short_hit_where
from kvspec.divergences.known import load as load_known
from kvspec.gate.lookups_dcp import DCP_LOOKUP_EXAMPLES, FIXED_DCP_LOOKUPS, dcp_core_conforms, dcp_lookups
from kvspec.reference.lookup import (
    coordinator_answer,
    coordinator_lookup,
    mooncake_load_mask,
    mooncake_lookup,
    spec_groups,
)
from kvspec.emit.lookup_test import regression_test
from kvspec.spec.hits import (
    CacheState,
    Hit,
    LookupSetting,
    blocks_read,
    cache_hit_alignment,
    drafter_unproven_reason,
    dropping_groups,
    max_safe_hit,
    partial_hash_hits_enabled,
    scheduler_block_size,
    target_unsafe_reason,
)
from kvspec.spec.layers import CacheGroup, Kind

KINDS = (Kind.FULL, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL, Kind.MAMBA)
MAX_HASHES = 16


@st.composite
def cache_groups(draw, base: int, use_eagle: bool) -> CacheGroup:
    kind = draw(st.sampled_from(KINDS + (Kind.FULL, Kind.MAMBA)))
    block_size = base * draw(st.sampled_from([1, 2, 4, 1, 2, 3]))
    window = draw(st.integers(1, 3 * block_size + 2)) if kind == Kind.SLIDING_WINDOW else None
    # Ours: real chunk sizes (8192) are block multiples; vLLM does not check it.
    chunk = block_size * draw(st.integers(1, 4)) if kind == Kind.CHUNKED_LOCAL else None
    # Ours: vLLM sets is_eagle_group only when the EAGLE drop is in effect.
    annotated = use_eagle and draw(st.booleans())
    return CacheGroup(kind, block_size, window=window, chunk=chunk, is_eagle_group=annotated)


@st.composite
def lookup_settings(draw) -> LookupSetting:
    base = draw(st.sampled_from([1, 2, 4, 8, 16]))
    use_eagle = draw(st.booleans())
    groups = tuple(draw(st.lists(cache_groups(base, use_eagle), min_size=1, max_size=4)))
    gcd = reduce(math.gcd, (g.block_size for g in groups))
    hash_bs = draw(st.sampled_from([d for d in (gcd, gcd // 2, gcd // 4) if d and gcd % d == 0]))
    return LookupSetting(groups, hash_bs, use_eagle, allow_partial_hash_hits=draw(st.booleans()))


@st.composite
def cache_states(draw, setting: LookupSetting) -> CacheState:
    """Mostly a shared dense prefix (what one earlier request leaves), then per group a
    different prefix length, evicted holes and stray later entries. Long enough for a few
    alignment units even when the lcm is many hash units."""
    units_per_lcm = scheduler_block_size(setting) // setting.hash_block_size
    # At least one lcm block most of the time, or no hit could reach the alignment.
    longest = max(MAX_HASHES, 3 * units_per_lcm)
    num_hashes = draw(st.integers(min(units_per_lcm, longest), longest) | st.integers(0, longest))
    num_groups = len(setting.groups)
    units = st.integers(0, max(0, num_hashes - 1))
    shared = draw(st.just(num_hashes) | st.integers(0, num_hashes))
    cached = set()
    for gid in range(num_groups):
        prefix = draw(st.just(shared) | st.integers(0, num_hashes))
        entries = set(range(prefix))
        if num_hashes:
            entries -= draw(st.sets(units, max_size=2))
            entries |= draw(st.sets(units, max_size=3))
        group = setting.groups[gid]
        if group.kind in (Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL):  # vLLM keys only their whole blocks
            per_block = group.block_size // setting.hash_block_size
            entries = {j for j in entries if (j + 1) % per_block == 0}
        cached |= {(gid, j) for j in entries}
    return CacheState(num_hashes, frozenset(cached))


@st.composite
def lookups(draw):
    setting = draw(lookup_settings())
    state = draw(cache_states(setting))
    top = state.num_hashes * setting.hash_block_size
    near_top = st.integers(0, cache_hit_alignment(setting)).map(lambda d: max(0, top - d))
    max_length = draw(near_top | st.integers(0, top))
    return setting, state, max_length


def chunked_local_preconditions_hold(setting: LookupSetting) -> bool:
    """No chunked-local spec group drops (a drop is shared by equal specs) and its block size
    is the hit alignment."""
    alignment = cache_hit_alignment(setting)
    return all(
        sg.spec.kind != Kind.CHUNKED_LOCAL or (not sg.drops and sg.spec.block_size == alignment)
        for sg in spec_groups(setting, dropping_groups(setting))
    )


def vllm_coordinator(adapter, setting, state, max_length) -> Hit:
    return adapter.coordinator_hit(
        list(setting.groups),
        state,
        max_length,
        use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size,
        allow_partial_hash_hits=setting.allow_partial_hash_hits,
    )


def vllm_mooncake(adapter, setting, state, max_length) -> Hit:
    return adapter.mooncake_hit(
        list(setting.groups),
        state,
        max_length,
        use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size,
        # The connector follows the core's alignment (from_kv_cache_config).
        enable_partial_hash_hits=partial_hash_hits_enabled(setting),
    )


def assert_lookup_conforms(name: str, vllm: Hit, reference: Hit, setting, state, max_length, known=None) -> None:
    """vLLM agrees with the reference, and its answer is safe: for the target always, for the
    drafter unless ``known`` records that drafter-unproven situation (kvspec/divergences/known.py)."""
    context = f"{name}: {setting} {state} M={max_length}"
    hit = vllm.length
    assert hit == reference.length, f"hit: vLLM {hit} != reference {reference.length}; {context}"
    assert vllm.real_blocks == reference.real_blocks, f"real blocks differ; {context}"
    assert hit <= max_length and hit % cache_hit_alignment(setting) == 0, context
    reason = target_unsafe_reason(setting, state, hit, max_length)
    assert reason is None, f"vLLM's hit {hit} is unsafe: {reason}; {context}"
    if reason := drafter_unproven_reason(setting, state, hit):
        where = drafter_where(name, setting)
        assert (DRAFTER_KIND, where) in (known or {}), (
            f"vLLM's hit {hit} is drafter-unproven: {reason}; NEW divergence: {DRAFTER_KIND} at {where!r}; {context}"
        )
    assert not (missing := null_blocks_read(setting, vllm)), f"vLLM hands null blocks {missing}; {context}"
    for gid, group in enumerate(setting.groups):
        if group.kind == Kind.MAMBA:  # the state adopted is the one at the hit, not past it
            assert len(vllm.real_blocks[gid]) == -(-hit // group.block_size), f"mamba {gid}; {context}"


def null_blocks_read(setting: LookupSetting, hit: Hit) -> list[tuple[int, int]]:
    """(group, block) pairs a group reads at the hit but the lookup gave it no real block for."""
    return [
        (gid, block)
        for gid, real in enumerate(hit.real_blocks)
        for block in blocks_read(setting, gid, hit.length)
        if block >= len(real) or not real[block]
    ]


def core_conforms(adapter, case, known=None) -> Hit:
    """The core coordinator (Unitary or Hybrid) answers as the reference, safely, and reports
    the reference's uncached common prefix (longest single-group hit - reconciled hit)."""
    setting, state, max_length = case
    assume(len(setting.groups) > 1 or setting.hash_block_size == setting.groups[0].block_size)
    assume(chunked_local_preconditions_hold(setting))
    answer = adapter.coordinator_answer(
        list(setting.groups), state, max_length, use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size, allow_partial_hash_hits=setting.allow_partial_hash_hits,
    )  # fmt: skip
    reference, uncached = coordinator_answer(setting, state, max_length)
    assert_lookup_conforms("core", answer.hit, reference, setting, state, max_length, known)
    if answer.uncached_common_prefix is not None:  # None: a vLLM that does not report it
        assert answer.uncached_common_prefix == uncached, (
            f"uncached common prefix: vLLM {answer.uncached_common_prefix} != reference {uncached}; "
            f"core: {setting} {state} M={max_length}"
        )
    return answer.hit


def mooncake_conforms(adapter, case, known=None) -> Hit:
    """The Mooncake store connector's coordinator answers as the reference, safely."""
    setting, state, max_length = case
    assume(chunked_local_preconditions_hold(setting))
    vllm = vllm_mooncake(adapter, setting, state, max_length)
    reference = mooncake_lookup(setting, state, max_length)
    assert_lookup_conforms("mooncake", vllm, reference, setting, state, max_length, known)
    return vllm


def load_mask_conforms(adapter, case) -> None:
    """The Mooncake store's receive side loads, at the hit its lookup returned, the blocks the
    reference's lookup reads over a store holding everything, with no second EAGLE drop."""
    setting, state, max_length = case
    assume(chunked_local_preconditions_hold(setting))
    hit = vllm_mooncake(adapter, setting, state, max_length).length
    masks = adapter.mooncake_load_mask(
        list(setting.groups), state.num_hashes, hit, use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size, enable_partial_hash_hits=partial_hash_hits_enabled(setting),
    )  # fmt: skip
    expected = mooncake_load_mask(setting, state.num_hashes, hit)
    assert masks == expected, f"load mask at {hit}: vLLM {masks}, reference {expected}; mooncake: {setting} {state} M={max_length}"


LOOKUP_EXAMPLES = 2500  # per coordinator
LOAD_MASK_EXAMPLES = 300
# First among the load masks: EAGLE with no annotation (every group drops) over full attention
# and a one-token window, 2 blocks stored, hit 16: the receive side loads the window group's
# block 0; dropping a second time there leaves it out.
FIXED_LOAD_MASKS = (
    (
        LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.SLIDING_WINDOW, 16, window=1)), 16, use_eagle=True),
        CacheState.full_prefix(2, 2),
        32,
    ),
)

# Run first on both paths: situations the draws rarely reach, found by kvspec mutate's survivors.
FIXED_LOOKUPS = (
    # A window group's pop after the EAGLE drop, then its re-alignment to the lcm (32).
    (
        LookupSetting((CacheGroup(Kind.FULL, 32), CacheGroup(Kind.SLIDING_WINDOW, 16, window=200, is_eagle_group=True)),
                      16, use_eagle=True),
        CacheState(8, frozenset({(0, j) for j in range(8)} | {(1, j) for j in range(3)})),
        64,
    ),
    # Mamba shortens the candidate after the window group dropped: the drop must be taken again.
    (
        LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=32, is_eagle_group=True), CacheGroup(Kind.MAMBA, 16)),
                      16, use_eagle=True),
        CacheState(7, frozenset({(0, j) for j in (0, 1, 2, 4, 5, 6)} | {(1, 1), (1, 2)})),
        96,
    ),
)


def check_lookups(adapter, seed: int = 0, scale: float = 1.0) -> CheckResult:
    """The core coordinator's and the Mooncake store's lookups equal the reference's and are
    safe, on ``LOOKUP_EXAMPLES`` drawn (groups, cache, cap) each."""
    reached: Counter = Counter()
    failure: list[str] = []
    last_case: list = []  # Hypothesis replays the minimal failing case last

    observed = Observed()
    known = load_known()

    def property_of(path, conforms):
        def prop(case):
            last_case[:] = [path, case]
            vllm = conforms(adapter, case, known)
            _count(reached, path, case, vllm)
            observe_divergences(observed, adapter, path, case, vllm)

        return prop

    for path, conforms in (("core", core_conforms), ("mooncake", mooncake_conforms)):
        if not failure:
            failure = run_property(
                property_of(path, conforms), lookups(), seed=seed, examples=scaled(LOOKUP_EXAMPLES, scale),
                fixed=FIXED_LOOKUPS,
            )
    if failure and last_case:
        failure += ["as a vLLM test:", *regression_for(adapter, *last_case, failure[0]).splitlines()]
    if not failure:  # last, on its own draws: the phases above draw what they always drew
        def dcp_prop(case):
            dcp_core_conforms(adapter, case)
            reached["dcp"] += 1

        failure = run_property(dcp_prop, dcp_lookups(), seed=seed, examples=scaled(DCP_LOOKUP_EXAMPLES, scale),
                               fixed=FIXED_DCP_LOOKUPS)
    if not failure:  # then the Mooncake receive side, at the hits of the first drawn lookups
        def load_mask_prop(case):
            load_mask_conforms(adapter, case)
            reached["load masks"] += 1

        failure = run_property(load_mask_prop, lookups(), seed=seed, examples=scaled(LOAD_MASK_EXAMPLES, scale),
                               fixed=FIXED_LOAD_MASKS)
    covered = (
        f"{reached['core']} core + {reached['mooncake']} Mooncake lookups: "
        f"{reached['hybrid']} hybrid, {reached['eagle']} EAGLE, {reached['partial']} partial-hit, "
        f"{reached['mamba']} with Mamba, {reached['hit']} hits > 0; {reached['dcp']} core lookups with DCP > 1, "
        f"{reached['load masks']} Mooncake load masks"
    )
    new = [] if failure else observed.new(known)
    for key in new:
        failure += observed.new_entry(key)
        path, (setting, state, max_length), expected, why = observed.smallest[key][2]
        test = regression_test(setting, state, max_length, expected, why, path=path,
                               partial_hash_hits=partial_hash_hits_enabled(setting), name=f"{key[0]} {key[1]}")
        failure += ["  as a vLLM test:", *(f"    {line}" for line in test.splitlines())]
    return CheckResult(
        "prefix-cache lookups",
        covered,
        holds=not failure,
        details=failure or ["every hit equals the reference's and is safe; no new divergence", observed.summary(known)],
    )


def situation(path: str, setting: LookupSetting) -> str:
    """A coarse name for a lookup's situation: the path, the group kinds, EAGLE, partial hits."""
    kinds = "+".join(sorted({g.kind.value for g in setting.groups}))
    shape = "one group" if len(setting.groups) == 1 else f"{len(setting.groups)} groups"
    flags = [f for f, on in (("EAGLE", setting.use_eagle), ("partial", partial_hash_hits_enabled(setting))) if on]
    return f"{path} {shape} {kinds}" + (f" {' '.join(flags)}" if flags else "")


def regression_for(adapter, path: str, case, reason: str) -> str:
    """The plain-vLLM test of a failing case: it asserts the reference's hit where vLLM
    departs from it, else the longest safe hit."""
    setting, state, max_length = case
    lookup = vllm_coordinator if path == "core" else vllm_mooncake
    reference = (coordinator_lookup if path == "core" else mooncake_lookup)(setting, state, max_length)
    vllm = lookup(adapter, setting, state, max_length)
    if vllm.length != reference.length:
        expected, why = reference.length, "what vLLM's own algorithm, as the spec models it, returns"
    else:
        expected, why = max_safe_hit(setting, state, max_length), "the longest hit that is safe"
    return regression_test(
        setting,
        state,
        max_length,
        expected,
        f"{expected} is {why}; kvspec saw {vllm.length}",
        path=path,
        partial_hash_hits=partial_hash_hits_enabled(setting),
        name=situation(path, setting),
    )


def _count(reached: Counter, path: str, case, vllm: Hit) -> None:
    """Tally the situation reached."""
    setting, state, max_length = case
    reached[path] += 1
    reached["hybrid"] += len(setting.groups) > 1
    reached["eagle"] += setting.use_eagle
    reached["partial"] += partial_hash_hits_enabled(setting)
    reached["mamba"] += any(g.kind == Kind.MAMBA for g in setting.groups)
    reached["hit"] += vllm.length > 0


def observe_divergences(observed: Observed, adapter, path: str, case, vllm: Hit) -> None:
    """Record where vLLM's (safe) hit is not the best the spec allows: shorter than the longest
    safe hit, or different from what another vLLM path answers for the same prompt."""
    setting, state, max_length = case
    size = (len(setting.groups), state.num_hashes, max_length)
    example = describe_lookup(path, setting, state, max_length)
    safe = max_safe_hit(setting, state, max_length)
    if safe > vllm.length:
        observed.add("short-hit", short_hit_where(path, setting), size,
                     f"{example}; {path} hit {vllm.length}, longest safe {safe}", safe - vllm.length,
                     (path, case, safe, f"{safe} is the longest safe hit; vLLM returns {vllm.length}"))
    if drafter_unproven_reason(setting, state, vllm.length):  # known, or the conformance check failed
        observed.add(DRAFTER_KIND, drafter_where(path, setting), size,
                     f"{example}; {path} hit {vllm.length}, longest safe {safe}")
    if path != "core":
        return
    others = [("core vs mooncake", "mooncake", case)]
    if len(setting.groups) == 1:  # the same layers split into two groups of one spec: hybrid
        both = CacheState(state.num_hashes, state.cached | {(1, j) for _, j in state.cached})
        others.append(("unitary vs hybrid", "hybrid", (replace(setting, groups=setting.groups * 2), both, max_length)))
    for paths, other, other_case in others:
        answer = (vllm_mooncake if other == "mooncake" else vllm_coordinator)(adapter, *other_case).length
        if answer != vllm.length:
            longer = other if answer > vllm.length else path
            observed.add("paths-disagree", paths_where(paths, setting, longer), size,
                         f"{example}; {path} {vllm.length}, {other} {answer}", abs(answer - vllm.length),
                         (path, case, answer, f"{other} answers {answer} for the same prompt; {path} {vllm.length}"))
