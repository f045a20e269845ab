"""Every check of ``kvspec check``, in the order the gate runs them. Each is one function of the
adapter and the run's options (``GateOptions``) that returns what it covered and whether vLLM
held; this list is the one place a check is added, and the tools (zoo, mutate, review) read it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

from kvspec.gate.block_sizes import check_block_sizes
from kvspec.gate.connector_hits import check_connector_hits
from kvspec.gate.coverage import shortfalls
from kvspec.gate.grouping import check_grouping
from kvspec.gate.lookups import check_lookups
from kvspec.gate.names import Check, Outcome
from kvspec.gate.offloading import check_offloading
from kvspec.gate.options import QUICK_SCALE, GateOptions
from kvspec.gate.proofs import check_proofs
from kvspec.gate.result import CheckResult, outcome_result
from kvspec.gate.saved_finds import check_saved_finds
from kvspec.gate.scenarios import check_live_manager, check_seed_hybrid, check_seed_mooncake, check_warning_gate
from kvspec.gate.simple_offload import check_simple_offload
from kvspec.gate.stateful import check_stateful_manager
from kvspec.gate.stores import check_stores


@dataclass(frozen=True)
class GateCheck:
    name: Check
    run: Callable[[object, GateOptions], CheckResult]
    in_quick_runs: bool = True  # the proofs have no smaller budget worth a smoke run
    # Wall seconds at the full budget on 0.34.0, seed 0 (the medians of five `kvspec check --jobs 2` runs, 2026-12-07,
    # benchmarks/results/gate_jobs.md): how `--jobs` shares the checks out (kvspec/tools/gate_workers.py); a
    # scheduling hint, never a limit.
    typical_seconds: float = 0.5


CHECKS: dict[Check, GateCheck] = {
    check.name: check
    for check in (
        GateCheck(Check.SAVED_FINDS, check_saved_finds),
        GateCheck(Check.SEED_HYBRID, check_seed_hybrid),
        GateCheck(Check.SEED_MOONCAKE, check_seed_mooncake),
        GateCheck(Check.WARNING_GATE, check_warning_gate),
        GateCheck(Check.LIVE_MANAGER, check_live_manager),
        GateCheck(Check.GROUPING, check_grouping, typical_seconds=17),
        GateCheck(Check.BLOCK_SIZES, check_block_sizes, typical_seconds=3),
        GateCheck(Check.LOOKUPS, check_lookups, typical_seconds=15),
        GateCheck(Check.OFFLOADING, check_offloading, typical_seconds=15),
        GateCheck(Check.CONNECTOR_HITS, check_connector_hits, typical_seconds=5),
        GateCheck(Check.SIMPLE_OFFLOAD, check_simple_offload, typical_seconds=6),
        GateCheck(Check.STORES, check_stores, typical_seconds=11),
        GateCheck(Check.STATEFUL, check_stateful_manager, typical_seconds=13),
        # A quick run leaves these out (tests/test_proofs.py runs the proofs in the suite).
        GateCheck(Check.PROOFS, check_proofs, in_quick_runs=False, typical_seconds=29),
    )
}
assert list(CHECKS) == list(Check), "the registry runs every named check, in the order names.py lists them"
TYPICAL_SECONDS = {name: check.typical_seconds for name, check in CHECKS.items()}
SKIPPED_WHEN_QUICK = tuple(name for name, check in CHECKS.items() if not check.in_quick_runs)


def quick_first(names: Iterable[str]) -> list[tuple[Check, float]]:
    """The quick-first schedule of ``names``, as (check, budget factor): each check a quick run
    includes at the quick budget, in order, then every one at the full budget. What `kvspec check
    --quick-first` and `kvspec zoo` run: a bug a twentieth of the examples reaches is reported in
    seconds, and when the quick pass holds the full gate still runs whole, so nothing is cut."""
    names = [Check(name) for name in names]
    return [(name, QUICK_SCALE) for name in names if CHECKS[name].in_quick_runs] + [(name, 1.0) for name in names]


def run_checks(adapter, options: GateOptions, only: Iterable[str] | None = None) -> list[CheckResult]:
    """Every check (or those named in ``only``, in that order), each timed, each under the
    deadline on calls into vLLM. A check whose symbols the probe finds missing is not run
    ("cannot drive"); a check that ends in a crash, a hang or a failure to drive reports that
    outcome, and the next check runs."""
    if only is None:
        names = [name for name, check in CHECKS.items() if check.in_quick_runs or not options.quick]
    else:
        names = [Check(name) for name in only]
    missing = adapter.probe(names)
    results = []
    for name in names:
        started = time.perf_counter()
        if missing[name]:
            result = CheckResult(name, "not run", holds=False, outcome=Outcome.CANNOT_DRIVE,
                                 details=[line for m in missing[name] for line in m.lines()])
        else:
            with adapter.watching(options.deadline) as watchdog:
                try:
                    result = CHECKS[name].run(adapter, options)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - a crash, a hang, or kvspec failing to drive
                    result = outcome_result(name, exc)
            result.longest_vllm_call = watchdog.longest
            result = _enforce_minimums(result, options.scale)
        result.seconds = time.perf_counter() - started
        results.append(result)
    return results


def _enforce_minimums(result: CheckResult, scale: float) -> CheckResult:
    """A holding check that left a situation below its minimum did not exercise what it
    promises: kvspec's failure to drive, never a verdict on vLLM (kvspec/gate/coverage.py)."""
    short = shortfalls(result.coverage, result.minimums, scale)
    if not result.holds or not short:
        return result
    return CheckResult(result.name, result.covered, holds=False, outcome=Outcome.CANNOT_DRIVE,
                       details=short + result.details, coverage=result.coverage, minimums=result.minimums,
                       longest_vllm_call=result.longest_vllm_call, not_in_release=result.not_in_release)
