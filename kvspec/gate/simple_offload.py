"""The SimpleCPUOffload connector's lookup on real vLLM
(SimpleCPUOffloadScheduler.get_num_new_matched_tokens, impl/simple_offload.py) against the
reference (reference/simple_offload.py) and the safety rule of spec/simple_offload.py, on the
core lookups' groups and cache states as the CPU pool, a local prefix and eager or lazy mode;
then its bookkeeping between a lookup and the load (kvspec/gate/simple_offload_pins.py).

A match shorter than the longest safe one is a divergence, filed as ``short-hit`` at
"simple-offload ..." and passing only when recorded in known-divergences.toml; a new one prints its
plain-vLLM test (kvspec/emit/simple_offload_test.py), as does a match that breaks a rule (the
fixed cases' or the minimal drawn one's).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kvspec.divergences.known import Observed, short_hit_where
from kvspec.draws.simple_offload import FIXED_SIMPLE_CASES, simple_offload_cases
from kvspec.emit.simple_offload_test import failing_match_test, simple_offload_test
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.gate.simple_offload_pins import PINS_MINIMUMS, run_pins_phase
from kvspec.impl.simple_offload import simple_offload_matched
from kvspec.oracles.invariants import EQUALS_REFERENCE, SAFE_HIT, Violation, require_none
from kvspec.reference.simple_offload import simple_offload_matched as reference_matched
from kvspec.spec.hits import is_safe_hit, max_safe_hit
from kvspec.spec.layers import Kind
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import CacheState
from kvspec.spec.simple_offload import matched_tokens_unsafe_reason, with_local_prefix

SIMPLE_OFFLOAD_EXAMPLES = 600
SIMPLE_OFFLOAD_MINIMUMS = {"matched > 0": 100, "past a local prefix": 150, "lazy": 150, "hybrid": 200,
                           "with Mamba": 100, "local prefix off a local chunk": 5}


def simple_offload_violations(adapter, case) -> tuple[int, list[Violation]]:
    matched, is_async = simple_offload_matched(adapter, case)
    found = []
    if reason := matched_tokens_unsafe_reason(case, matched):
        found.append(Violation(SAFE_HIT, f"SimpleCPUOffload matches {matched} past {case.num_computed}: {reason}"))
    if (expected := reference_matched(case, adapter.rules)) != matched:
        found.append(Violation(EQUALS_REFERENCE, f"matched: vLLM {matched} != reference {expected}"))
    if is_async != (matched > 0):
        found.append(Violation(EQUALS_REFERENCE, f"asynchronous load {is_async} with {matched} tokens matched"))
    return matched, found


def suffix_safe_match(case) -> int:
    """The longest safe hit of the suffix past the local prefix taken as a request of its own
    (what the connector's CPU coordinator sees; spec/hits.py:max_safe_hit)."""
    skipped = case.num_computed // case.setting.hash_block_size
    remaining, limit = case.cpu.num_hashes - skipped, case.num_tokens - 1 - case.num_computed
    if remaining <= 0 or limit <= 0:
        return 0
    suffix = CacheState(remaining, frozenset((g, j - skipped) for g, j in case.cpu.cached if j >= skipped))
    return max_safe_hit(replace(case.setting, allow_partial_hash_hits=not case.lazy), suffix, limit)


def longest_safe_match(case) -> int:
    """The longest match past the local prefix every group could resume at (spec/hits.py), with
    the local prefix's KV."""
    state, top = with_local_prefix(case), case.num_tokens - 1
    step = cache_hit_alignment(case.setting)
    ends = [h for h in range(0, top + 1, step) if h > case.num_computed and is_safe_hit(case.setting, state, h, top)]
    return max(ends, default=case.num_computed) - case.num_computed


def simple_offload_short_where(case, rules) -> str:
    """Where a short match comes from: a local prefix ending inside a local chunk (vLLM matches
    nothing, by design: suffix-relative chunks must match absolute ones); the CPU lookup of the
    suffix alone, short as the core's lookup is; or a window that needs KV of the local prefix,
    which the CPU coordinator does not see."""
    setting = case.setting
    if reference_matched(case, rules) == 0 and any(
            g.kind == Kind.CHUNKED_LOCAL and case.num_computed % g.chunk for g in setting.groups):
        return "simple-offload local prefix off a local chunk"
    if suffix_safe_match(case) > reference_matched(case, rules):
        return short_hit_where("simple-offload", setting)
    return "simple-offload window reaches into the local prefix"


def observe_short_match(observed: Observed, adapter, case, matched: int) -> None:
    """File a match shorter than the longest safe one under its cause (a divergence)."""
    if (safe := longest_safe_match(case)) > matched:
        observed.add("short-hit", simple_offload_short_where(case, adapter.rules),
                     (len(case.setting.groups), case.cpu.num_hashes, len(case.cpu.cached)),
                     f"{case}; vLLM matched {matched}, longest safe {safe}", safe - matched, (case, safe, matched))


def failing_case_test(adapter, case) -> list[str]:
    """The plain-vLLM test of a case that broke a rule, when vLLM's match is what broke it (unsafe,
    or off the reference): none for an asynchronous flag alone, which the test does not read."""
    matched, _is_async = simple_offload_matched(adapter, case)
    reference, unsafe = reference_matched(case, adapter.rules), matched_tokens_unsafe_reason(case, matched)
    if not unsafe and matched == reference:
        return []
    name = f"simple offload {'unsafe' if unsafe else 'off the reference'} match"
    return ["as a vLLM test:", *failing_match_test(case, reference, matched, name).splitlines()]


def check_simple_offload(adapter, options: GateOptions) -> CheckResult:
    reached: Counter = Counter()
    observed, known = Observed(), options.known()
    last_case: list = []  # Hypothesis replays the minimal failing case last

    def prop(case):
        last_case[:] = [case]
        matched, found = simple_offload_violations(adapter, case)
        require_none(found, f"simple-offload: {case}")
        reached["lookups"] += 1
        reached["matched > 0"] += matched > 0
        reached["past a local prefix"] += case.num_computed > 0
        reached["lazy"] += case.lazy
        reached["hybrid"] += len(case.setting.groups) > 1
        reached["with Mamba"] += any(g.kind == Kind.MAMBA for g in case.setting.groups)
        reached["local prefix off a local chunk"] += any(
            g.kind == Kind.CHUNKED_LOCAL and case.num_computed % g.chunk for g in case.setting.groups)
        observe_short_match(observed, adapter, case, matched)

    failure = []
    for case in FIXED_SIMPLE_CASES:
        try:
            prop(case)
        except AssertionError as exc:
            failure = [f"fixed case {case}:", *str(exc).splitlines()]
            break
    if not failure:
        failure = run_property(prop, simple_offload_cases(), seed=options.seed,
                               examples=scaled(SIMPLE_OFFLOAD_EXAMPLES, options.scale))
    if failure and last_case:
        failure += failing_case_test(adapter, last_case[0])
    if not failure:
        failure = run_pins_phase(adapter, options, reached)
    covered = f"{reached['lookups']} lookups: " + ", ".join(f"{reached[s]} {s}" for s in SIMPLE_OFFLOAD_MINIMUMS)
    covered += "; " + ", ".join(f"{reached[s]} {s}" for s in PINS_MINIMUMS)
    for key in [] if failure else observed.new(known):
        failure += observed.new_entry(key, simple_offload_test(*observed.smallest[key][2], f"{key[0]} {key[1]}"))
    common = {"coverage": dict(reached), "minimums": {**SIMPLE_OFFLOAD_MINIMUMS, **PINS_MINIMUMS}}
    if failure:
        return CheckResult(Check.SIMPLE_OFFLOAD, covered, holds=False, details=failure, **common)
    details = ["every match equals the reference's and is safe; no new divergence",
               "every match stays pinned until its load is done, no pin outlives its request, and each "
               "admission refreshes only what its release refreshes", observed.summary(known)]
    return CheckResult(Check.SIMPLE_OFFLOAD, covered, holds=True, details=details, **common)
