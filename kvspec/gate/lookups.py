"""Real vLLM's prefix-cache lookups against the reference model (reference/lookup.py) and
the safety rules (spec/hits.py), judged by kvspec/oracles/lookups.py on the groups and cache
states of kvspec/draws/lookups.py. Stateless: each example builds a fresh coordinator (core, or
the Mooncake store connector's) over exactly the drawn cache. The tests
(tests/test_hits_conformance.py) and the gate use the same pieces.

Preconditions vLLM asserts are not findings, so draws that break them are filtered out:
* one group with a hash unit other than its block size (UnitaryKVCacheCoordinator asserts
  ``hash_block_size == block_size``; the Mooncake coordinator accepts it and is still checked);
* a chunked-local group that would drop the EAGLE block, or whose block size differs from the
  hit alignment (ChunkedLocalAttentionManager.find_longest_cache_hit asserts both);
* groups vLLM never lets reach a lookup (spec/hits.py:lookup_preconditions_hold): only
  prefix-cacheable groups beside a circular buffer, none, is not a lookup vLLM makes.
Two restrictions are ours, not vLLM's, and are documented where they are drawn: annotations
only with EAGLE on (vLLM annotates groups only when the drop is in effect), and chunk sizes that
are multiples of the block size (tests/test_hits_conformance.py shows what happens otherwise).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import assume

from kvspec.divergences.known import (
    DRAFTER_KIND,
    Observed,
    core_loop_cause,
    drafter_where,
    paths_where,
    short_hit_where,
)
from kvspec.draws.lookups import (
    FIXED_DCP_LOOKUPS,
    FIXED_LOAD_MASKS,
    FIXED_LOOKUPS,
    HISPARSE_KINDS,
    KINDS,
    LOOKUP_MIX,
    NEW_KINDS,
    chunked_local_preconditions_hold,
    dcp_lookups,
    lookups,
)
from kvspec.emit.describe import describe_lookup
from kvspec.emit.lookup_test import regression_test, told_partial_hits
from kvspec.gate.coverage import shortfalls
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.oracles.invariants import require_none
from kvspec.oracles.lookups import dcp_lookup_violations, load_mask_violations, lookup_violations
from kvspec.oracles.situations import lookup_situation
from kvspec.reference.lookup import (
    coordinator_answer,
    coordinator_lookup,
    mooncake_load_mask,
    mooncake_lookup,
)
from kvspec.spec.hits import drafter_unproven_reason, lookup_preconditions_hold, max_safe_hit
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, Kind
from kvspec.spec.releases import MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import CacheState, Hit, LookupSetting


def store_has_a_cacheable_group(setting: LookupSetting) -> bool:
    """The core's preconditions, and some group prefix-cacheable: a store over none answers the
    whole cap, its loop having no group to shorten it (MooncakeStoreCoordinator._find_hit_blocks);
    whether an engine puts a store beside such a model is not established, so it is not drawn."""
    return lookup_preconditions_hold(setting.groups) and any(
        g.kind not in NOT_PREFIX_CACHEABLE_KINDS for g in setting.groups
    )


def store_beside_this_core(adapter, setting: LookupSetting) -> bool:
    """Whether a Mooncake store serves a core with ``setting``'s opt-out: always where the store
    is told the core's decision (MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE); elsewhere its core never
    opts out of partial hits (only the SimpleCPUOffload connector's manager does), so only
    settings that allow them are the engine's."""
    return setting.allow_partial_hash_hits or adapter.has(MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE)


def vllm_coordinator(adapter, setting, state, max_length) -> Hit:
    return adapter.coordinator_hit(setting, state, max_length)


def vllm_mooncake(adapter, setting, state, max_length) -> Hit:
    # The connector follows the core's alignment (from_kv_cache_config): the adapter passes
    # partial_hash_hits_enabled(setting).
    return adapter.mooncake_hit(setting, state, max_length)


def assert_lookup_conforms(name: str, answer: Hit, reference: Hit, setting, state, max_length, known=None,
                           uncached=None) -> None:
    """vLLM's answer breaks no rule of kvspec/oracles/lookups.py: the target's safety always,
    the drafter's unless ``known`` records that drafter-unproven situation."""
    require_none(
        lookup_violations(name, answer, setting, state, max_length, known={} if known is None else known,
                          reference=reference, uncached=uncached),
        f"{name}: {setting} {state} M={max_length}",
    )


def core_applies(setting: LookupSetting) -> bool:
    """What vLLM's core coordinators assert: one group's hash unit is its block size, chunked
    local's alignment, groups a lookup can be made over."""
    return ((len(setting.groups) > 1 or setting.hash_block_size == setting.groups[0].block_size)
            and chunked_local_preconditions_hold(setting) and lookup_preconditions_hold(setting.groups))


def store_applies(adapter, setting: LookupSetting) -> bool:
    """A lookup a Mooncake store makes on this release: chunked local's alignment, a cacheable
    group, beside a core it serves."""
    return (chunked_local_preconditions_hold(setting) and store_has_a_cacheable_group(setting)
            and store_beside_this_core(adapter, setting))


def core_conforms(adapter, case, known=None) -> Hit:
    """The core coordinator (Unitary or Hybrid) answers as the reference, safely, and reports
    the reference's uncached common prefix (longest single-group hit - reconciled hit)."""
    setting, state, max_length = case
    assume(core_applies(setting))
    answer = adapter.coordinator_answer(setting, state, max_length)
    reference, uncached = coordinator_answer(setting, state, max_length, adapter.rules)
    # vLLM's None: a vLLM that does not report the uncached common prefix.
    assert_lookup_conforms("core", answer.hit, reference, setting, state, max_length, known,
                           uncached=(answer.uncached_common_prefix, uncached))
    return answer.hit


def mooncake_conforms(adapter, case, known=None) -> Hit:
    """The Mooncake store connector's coordinator answers as the reference, safely."""
    setting, state, max_length = case
    assume(store_applies(adapter, setting))
    vllm = vllm_mooncake(adapter, setting, state, max_length)
    reference = mooncake_lookup(setting, state, max_length, adapter.rules)
    assert_lookup_conforms("mooncake", vllm, reference, setting, state, max_length, known)
    return vllm


def load_mask_conforms(adapter, case) -> None:
    """The Mooncake store's receive side loads, at the hit its lookup returned, the blocks the
    reference's lookup reads over a store holding everything, with no second EAGLE drop."""
    setting, state, max_length = case
    assume(store_applies(adapter, setting))
    hit = vllm_mooncake(adapter, setting, state, max_length).length
    masks = adapter.mooncake_load_mask(setting, state.num_hashes, hit)
    expected = mooncake_load_mask(setting, state.num_hashes, hit, adapter.rules)
    require_none(load_mask_violations(masks, expected, hit), f"mooncake: {setting} {state} M={max_length}")


def dcp_core_conforms(adapter, case) -> None:
    """vLLM's core coordinator under DCP > 1 answers as the reference at the sharded block sizes
    (spec/dcp.py, reference/lookup.py:coordinator_answer) and safely. vLLM accepts DCP > 1 in a
    hybrid coordinator only beside full-attention and Mamba groups (HybridKVCacheCoordinator
    asserts it), so only those kinds are drawn (kvspec/draws/lookups.py:dcp_lookups)."""
    setting, state, max_length = case
    answer = adapter.coordinator_answer(setting, state, max_length)  # setting.dcp ranks
    reference, uncached = coordinator_answer(setting, state, max_length, adapter.rules)
    violations = dcp_lookup_violations("core", answer.hit, setting, state, max_length, reference=reference,
                                       uncached=(answer.uncached_common_prefix, uncached))
    require_none(violations, f"{setting} {state} M={max_length}")


LOOKUP_EXAMPLES = 2500  # per coordinator
DCP_LOOKUP_EXAMPLES = 300  # a phase after the drawn lookups, on its own draws
LOAD_MASK_EXAMPLES = 300
# Per path, the least number of lookups that must reach each of issue 15's kinds
# (kvspec/gate/coverage.py), and with a hit > 0 beside it; every kind is counted.
LOOKUP_KIND_MINIMUM = 100
LOOKUP_KIND_HIT_MINIMUM = 20
# HiSparse's host source is counted as a kind of its own: its manager is not its spec's.
HISPARSE_SOURCE = "hisparse_source"
MINIMUM_KINDS = (*NEW_KINDS, *HISPARSE_KINDS, HISPARSE_SOURCE)
LOOKUP_MINIMUMS = {
    **{f"{path} kind {kind}": LOOKUP_KIND_MINIMUM for path in ("lookup", "mooncake") for kind in MINIMUM_KINDS},
    **{f"{path} kind {kind} hit": LOOKUP_KIND_HIT_MINIMUM for path in ("lookup", "mooncake") for kind in MINIMUM_KINDS},
}
LOOKUP_COVERAGE = [f"{path} kind {kind}{hit}" for path in ("lookup", "mooncake") for kind in KINDS + MINIMUM_KINDS
                   for hit in ("", " hit")]


def check_lookups(adapter, options: GateOptions) -> CheckResult:
    """The core coordinator's and the Mooncake store's lookups equal the reference's and are
    safe, on at least ``LOOKUP_EXAMPLES`` drawn (groups, cache, cap) each.

    Both paths judge one stream of draws: an example counts towards the budget when the core
    can look it up, and the store judges every example it can look up as well. Drawing is most
    of the check's time, and each path used to draw a stream (one seed) for itself. The store's
    own stream is still drawn, as it always was, wherever the shared one leaves the store short
    of its budget (0.30's and 0.31's store, which serves only cores that allow partial hits) or
    of a coverage minimum (a quick run's few examples), so no path reaches less than before."""
    seed, scale = options.seed, options.scale
    budget = scaled(LOOKUP_EXAMPLES, scale)
    reached: Counter = Counter()
    last_case: list = []  # Hypothesis replays the minimal failing case last

    observed = Observed()
    known = options.known()

    def judged(path, conforms, case) -> Hit:
        last_case[:] = [path, case]
        vllm = conforms(adapter, case, known)
        _count(reached, path, case, vllm)
        return vllm

    def both_paths(case):
        setting = case[0]
        core = judged("core", core_conforms, case) if core_applies(setting) else None
        store = judged("mooncake", mooncake_conforms, case) if store_applies(adapter, setting) else None
        if core is not None:
            observe_divergences(observed, adapter, "core", case, core, mooncake_hit=store)
        if store is not None:
            observe_divergences(observed, adapter, "mooncake", case, store)
        assume(core is not None)

    def store_only(case):
        observe_divergences(observed, adapter, "mooncake", case, judged("mooncake", mooncake_conforms, case))

    def replay(case) -> str:
        return crash_replay(last_case[0], case, adapter.rules)

    failure = run_property(both_paths, lookups(LOOKUP_MIX, with_hisparse=True), seed=seed, examples=budget,
                           fixed=FIXED_LOOKUPS, replay=replay)
    if not failure and (reached["mooncake"] < budget or store_shortfalls(reached, scale)):
        failure = run_property(store_only, lookups(LOOKUP_MIX, with_hisparse=True), seed=seed, examples=budget,
                               fixed=FIXED_LOOKUPS, replay=replay)
    if failure and last_case:
        failure += ["as a vLLM test:", *regression_for(adapter, *last_case, failure[0]).splitlines()]
    if not failure:  # last, on its own draws, so that it shifts none of the draws above
        def dcp_prop(case):
            dcp_core_conforms(adapter, case)
            reached["dcp"] += 1

        failure = run_property(dcp_prop, dcp_lookups(), seed=seed, examples=scaled(DCP_LOOKUP_EXAMPLES, scale),
                               fixed=FIXED_DCP_LOOKUPS)
    if not failure:  # then the Mooncake receive side, at the hits of the first drawn lookups
        def load_mask_prop(case):
            load_mask_conforms(adapter, case)
            reached["load masks"] += 1

        failure = run_property(load_mask_prop, lookups(LOOKUP_MIX, with_hisparse=True), seed=seed, examples=scaled(LOAD_MASK_EXAMPLES, scale),
                               fixed=FIXED_LOAD_MASKS)
    covered = (
        f"{reached['core']} core + {reached['mooncake']} Mooncake lookups: "
        f"{reached['hybrid']} hybrid, {reached['eagle']} EAGLE, {reached['partial']} partial-hit, "
        f"{reached['mamba']} with Mamba, {reached['hit']} hits > 0; {reached['dcp']} core lookups with DCP > 1, "
        f"{reached['load masks']} Mooncake load masks"
    )
    new = [] if failure else observed.new(known)
    for key in new:
        path, (setting, state, max_length), expected, why = observed.smallest[key][2]
        test = regression_test(setting, state, max_length, expected, why, path=path,
                               partial_hash_hits=told_partial_hits(adapter.rules, setting), name=f"{key[0]} {key[1]}")
        failure += observed.new_entry(key, test)
    return CheckResult(
        Check.LOOKUPS,
        covered,
        holds=not failure,
        details=failure or ["every hit equals the reference's and is safe; no new divergence", observed.summary(known)],
        coverage={key: reached[key] for key in LOOKUP_COVERAGE},
        minimums=LOOKUP_MINIMUMS,
    )


def store_shortfalls(reached: Counter, scale: float) -> list[str]:
    """The store's coverage minimums (LOOKUP_MINIMUMS) ``reached`` leaves unmet at this budget."""
    return shortfalls(reached, {key: n for key, n in LOOKUP_MINIMUMS.items() if key.startswith("mooncake ")}, scale)


def regression_for(adapter, path: str, case, reason: str) -> str:
    """The plain-vLLM test of a failing case: it asserts the reference's hit where vLLM
    departs from it, else the longest safe hit."""
    setting, state, max_length = case
    lookup = vllm_coordinator if path == "core" else vllm_mooncake
    reference = (coordinator_lookup if path == "core" else mooncake_lookup)(setting, state, max_length, adapter.rules)
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
        partial_hash_hits=told_partial_hits(adapter.rules, setting),
        name=lookup_situation(path, setting),
    )


def crash_replay(path: str, case, rules) -> str:
    """The plain-vLLM test of a lookup vLLM raised on: it asserts the reference's hit (for a
    release with ``rules``), so it fails with vLLM's exception until the crash is fixed."""
    setting, state, max_length = case
    try:
        expected = (coordinator_lookup if path == "core" else mooncake_lookup)(setting, state, max_length, rules).length
        why = "what vLLM's own algorithm, as the spec models it, returns"
    except AssertionError:  # the model of this release meets vLLM's own assert: the crash it reproduces
        expected, why = max_safe_hit(setting, state, max_length), "the longest hit that is safe"
    return regression_test(setting, state, max_length, expected, f"{expected} is {why}; vLLM raised",
                           path=path, partial_hash_hits=told_partial_hits(rules, setting),
                           name=lookup_situation(path, setting))


def _count(reached: Counter, path: str, case, vllm: Hit) -> None:
    """Tally the situation reached."""
    setting, state, max_length = case
    reached[path] += 1
    reached["hybrid"] += len(setting.groups) > 1
    reached["eagle"] += setting.use_eagle
    reached["partial"] += partial_hash_hits_enabled(setting)
    reached["mamba"] += any(g.kind == Kind.MAMBA for g in setting.groups)
    reached["hit"] += vllm.length > 0
    for kind in {HISPARSE_SOURCE if g.hisparse_source else g.kind for g in setting.groups}:
        key = f"{'lookup' if path == 'core' else path} kind {kind}"
        reached[key] += 1
        reached[f"{key} hit"] += vllm.length > 0


def observe_divergences(observed: Observed, adapter, path: str, case, vllm: Hit, mooncake_hit: Hit | None = None) -> None:
    """Record where vLLM's (safe) hit is not the best the spec allows: shorter than the longest
    safe hit, or different from what another vLLM path answers for the same prompt (the store's
    ``mooncake_hit``, if the caller has it already)."""
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
    # The store is compared only beside a core it serves on this release (store_beside_this_core).
    beside = store_beside_this_core(adapter, setting) and store_has_a_cacheable_group(setting)
    others = [("core vs mooncake", "mooncake", case)] if beside else []
    if len(setting.groups) == 1 and lookup_preconditions_hold(setting.groups * 2):  # the same layers in two groups: hybrid
        both = CacheState(state.num_hashes, state.cached | {(1, j) for _, j in state.cached})
        others.append(("unitary vs hybrid", "hybrid", (replace(setting, groups=setting.groups * 2), both, max_length)))
    for paths, other, other_case in others:
        if other == "mooncake" and mooncake_hit is not None:
            answer = mooncake_hit.length
        else:
            answer = (vllm_mooncake if other == "mooncake" else vllm_coordinator)(adapter, *other_case).length
        if answer != vllm.length:
            longer = other if answer > vllm.length else path
            # Only the core runs the hybrid loop: unitary vs hybrid keeps its plain key.
            cause = core_loop_cause(setting, longer == "mooncake")
            observed.add("paths-disagree", paths_where(paths, setting, longer, cause), size,
                         f"{example}; {path} {vllm.length}, {other} {answer}", abs(answer - vllm.length),
                         (path, case, answer, f"{other} answers {answer} for the same prompt; {path} {vllm.length}"))
