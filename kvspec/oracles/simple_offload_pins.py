"""The judge of the SimpleCPUOffload connector's bookkeeping: the steps of a case run on real
vLLM (impl/simple_offload_pins.py:run_pins_case), each operation judged by spec/simple_offload_pins.py's
properties, and each lookup's match against the reference (reference/simple_offload.py) over
what the pool holds at that moment."""

from __future__ import annotations

from collections import Counter

from kvspec.oracles.invariants import EQUALS_REFERENCE, PINNED_MATCH, PINS_RELEASED, REFRESH_ORDER, Violation
from kvspec.reference.simple_offload import simple_offload_matched as reference_matched
from kvspec.spec.releases import SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX
from kvspec.spec.setting import CacheState
from kvspec.spec.simple_offload import SimpleOffloadCase
from kvspec.spec.simple_offload_pins import (
    Admit,
    Finish,
    LoadDone,
    Lookup,
    PinsCase,
    Press,
    a_lookup_that_skips_external_reads_pins_nothing,
    an_admission_refreshes_only_the_local_prefix,
    an_outstanding_match_stays_in_the_pool,
    no_pin_outlives_its_request,
)

PINS_SITUATIONS = ("pin sequences", "retried lookups with a match", "skipping lookups the pool could match",
                   "eager admissions past a held local prefix", "lazy admissions past a held local prefix",
                   "loads done", "presses with a match waiting")


def lookup_over(case: PinsCase, lookup: Lookup, cached) -> SimpleOffloadCase:
    """``lookup`` as a lookup of its own over the entries ``cached`` (spec/simple_offload.py)."""
    num_hashes = case.request_hashes(lookup.request)
    pool = CacheState(num_hashes, frozenset((g, j) for g, j in cached if j < num_hashes))
    return SimpleOffloadCase(case.setting, pool, case.request_tokens[lookup.request], lookup.num_computed, case.lazy)


def latest_lookups(ops) -> dict[int, Lookup]:
    """Per request, its latest lookup among ``ops``."""
    return {op.request: op for op in ops if isinstance(op, Lookup)}


def _advance(waiting: dict[int, int], step) -> None:
    """``waiting`` (per request, the tokens its latest lookup matched that are still to be
    loaded) after ``step``: a lookup replaces the request's match, a load done or an abort ends it."""
    op = step.op
    if isinstance(op, Lookup):
        waiting.pop(op.request, None)
        if step.matched and not op.skips_external_reads:
            waiting[op.request] = step.matched
    elif isinstance(op, (LoadDone, Finish)):
        waiting.pop(op.request, None)


def waiting_matches(steps) -> dict[int, int]:
    """Per request, the tokens its latest lookup matched that are still to be loaded after ``steps``."""
    waiting: dict[int, int] = {}
    for step in steps:
        _advance(waiting, step)
    return waiting


def first_broken(case: PinsCase, steps, rules) -> int | None:
    """The operation at which the judge first finds a rule broken (None if none)."""
    for count in range(1, len(steps) + 1):
        if pins_violations(case, steps[:count], rules)[1]:
            return count - 1
    return None


def pins_violations(case: PinsCase, steps, rules) -> tuple[Counter, list[Violation]]:
    """What the case's ``steps`` reached (PINS_SITUATIONS) on a release with ``rules``, and the
    violations found, each naming its operation."""
    reached, found = Counter({"pin sequences": 1}), []
    promised: dict[int, int] = {}  # waiting_matches, one step at a time
    latest: dict[int, Lookup] = {}
    refresh = SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX in rules and not case.lazy
    for index, step in enumerate(steps):
        op, where = step.op, f"operation {index} {step.op}"
        had_a_match = promised.get(getattr(op, "request", None), 0) > 0
        _advance(promised, step)
        if isinstance(op, Lookup):
            reached["retried lookups with a match"] += had_a_match
            latest[op.request] = op
            pool_match = reference_matched(lookup_over(case, op, step.before.pins), rules)
            expected = 0 if op.skips_external_reads else pool_match
            if step.matched != expected:
                found.append(Violation(EQUALS_REFERENCE, f"{where}: vLLM matched {step.matched}, reference {expected}"))
            if op.skips_external_reads:
                reached["skipping lookups the pool could match"] += pool_match > 0
                found += [Violation(PINS_RELEASED, f"{where}: {v}")
                          for v in a_lookup_that_skips_external_reads_pins_nothing(step.before, step.after)]
        elif isinstance(op, Admit):
            local = 0 if latest[op.request].skips_external_reads else latest[op.request].num_computed
            due, held = refresh and local > 0, local > 0 and bool(step.local_copy)
            reached["lazy admissions past a held local prefix" if case.lazy else
                    "eager admissions past a held local prefix"] += held
            found += [Violation(REFRESH_ORDER, f"{where}: {v}") for v in an_admission_refreshes_only_the_local_prefix(
                step.before, step.after, step.local_copy if due else frozenset())]
        elif isinstance(op, LoadDone):
            reached["loads done"] += had_a_match
        elif isinstance(op, Press):
            reached["presses with a match waiting"] += bool(promised) and len(step.after.pins) < len(step.before.pins)
        for r, tokens in promised.items():
            lookup_now = lookup_over(case, latest[r], step.after.pins)
            found += [Violation(PINNED_MATCH, f"{where}: request {r} {v}")
                      for v in an_outstanding_match_stays_in_the_pool(lookup_now, tokens)]
        if not promised:
            found += [Violation(PINS_RELEASED, f"{where}: {v}") for v in no_pin_outlives_its_request(step.after)]
        if found:
            break  # the first broken rule is the finding; what follows builds on a state the spec disowns
    return reached, found
