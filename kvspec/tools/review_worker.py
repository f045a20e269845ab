"""One side of ``kvspec review``: import the vLLM named by KVSPEC_VLLM / KVSPEC_VLLM_SRC, run a
pre-generated workload on it, write what vLLM answered and which invariants it broke.

    python -m kvspec.tools.review_worker WORKLOAD.json RESULTS.json LABEL [PARENT_PID]

Each side runs in its own process because two vLLMs cannot share one. The workload is plain
data drawn by the parent (kvspec/tools/review.py); nothing here draws, so both sides see the same
inputs whatever their vLLM answers.
"""

from __future__ import annotations

import json
import os
import sys
import time

from kvspec.draws import codec
from kvspec.gate.grouping import conformance_failures, vllm_grouping
from kvspec.gate.lookups import vllm_coordinator, vllm_mooncake
from kvspec.gate.names import Check, Outcome
from kvspec.impl.failures import CannotDrive, classify, describe
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.impl.watchdog import DEFAULT_DEADLINE_SECONDS, VllmHung
from kvspec.oracles.invariants import CRASHED, HUNG, Violation
from kvspec.oracles.lookups import lookup_violations
from kvspec.tools.interrupts import die_with_parent, parent_alive
from kvspec.tools.programs import recording_machine, run_program

PROGRESS_EVERY = 10.0  # seconds between progress lines
WORKLOAD_WAIT_SECONDS = 3600.0  # the parent draws the workload in minutes; past this it is gone
EXIT_PARENT_GONE = 3
# Each section of the workload is what one gate check drives: the probe decides if it can run.
SECTIONS = {"models": Check.GROUPING, "lookups": Check.LOOKUPS, "programs": Check.STATEFUL}


class Progress:
    def __init__(self, label: str, total: int):
        self.label, self.total, self.done = label, total, 0
        self.started = self.last = time.monotonic()

    def tick(self, section: str) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY:
            self.last = now
            print(f"  {self.label}: {self.done}/{self.total} inputs ({section}), {now - self.started:.0f} s", flush=True)


def _grouping(adapter, model) -> dict:

    try:
        outcome = {"grouping": codec.encode(vllm_grouping(adapter, model))}
    except Exception as exc:  # noqa: BLE001 - a refusal is an answer to compare
        if classify(exc) is Outcome.CANNOT_DRIVE:
            raise CannotDrive(describe(exc)) from None
        outcome = {"refused": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else ""}
    outcome["violations"] = conformance_failures(adapter, model)
    return outcome


def _lookup(adapter, path: str, case) -> dict:

    setting, state, max_length = case
    ask = vllm_coordinator if path == "core" else vllm_mooncake
    try:
        hit = ask(adapter, setting, state, max_length)
    except VllmHung as exc:
        return {"hit": None, "violations": [Violation(HUNG, str(exc))]}
    except Exception as exc:  # noqa: BLE001
        if classify(exc) is Outcome.CANNOT_DRIVE:
            raise CannotDrive(describe(exc)) from None
        return {"hit": None, "violations": [Violation(CRASHED, f"{type(exc).__name__}: {exc}")]}
    return {"hit": codec.encode(hit),
            "violations": lookup_violations(path, hit, setting, state, max_length, rules=adapter.rules)}


def evaluate(adapter, workload: dict, label: str) -> dict:
    """vLLM's answer and the violations for every input of ``workload`` (decoded). A section
    kvspec cannot drive on this vLLM (the capability probe, or an input that shows it) is None,
    with the reason under ``cannot_drive``."""
    total = len(workload["models"]) + len(workload["lookups"]) + len(workload["programs"])
    progress = Progress(label, total)
    results: dict = {"version": adapter.version, "label": adapter.target.label, "cannot_drive": {}}
    missing = adapter.probe(SECTIONS.values())
    machine = None

    def answer(section: str, item):
        nonlocal machine
        if section == "models":
            return _grouping(adapter, item)
        if section == "lookups":
            case = (item["setting"], item["state"], item["max_length"])
            return {path: _lookup(adapter, path, case) for path in item["paths"]}
        machine = machine or recording_machine(adapter)
        return run_program(machine, item)

    for section, check in SECTIONS.items():
        if missing[check]:
            results[section], results["cannot_drive"][section] = None, [str(m) for m in missing[check]]
            continue
        results[section] = []
        try:
            for item in workload[section]:
                results[section].append(answer(section, item))
                progress.tick(section)
        except CannotDrive as exc:
            results[section], results["cannot_drive"][section] = None, [str(exc)]
    return results


def main(argv: list[str]) -> int:
    workload_path, results_path, label = argv[:3]
    # The parent's pid as review passed it: a worker started just before review died would
    # otherwise take its new parent (init) for review and wait for good.
    parent = int(argv[3]) if len(argv) > 3 else os.getppid()
    die_with_parent()  # Linux: SIGKILL when `kvspec review` dies; elsewhere the wait below checks
    if not parent_alive(parent):
        return EXIT_PARENT_GONE
    try:
        return _run(workload_path, results_path, label, parent)
    except Exception as exc:  # one line for the parent to show (TargetError: bad target)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _run(workload_path: str, results_path: str, label: str, parent: int) -> int:

    started = time.monotonic()
    adapter = VllmAdapter(resolve())
    print(f"  {label}: {adapter.target.label} imported in {time.monotonic() - started:.1f} s", flush=True)
    waited = time.monotonic()
    while not os.path.exists(workload_path):  # the parent draws it while vLLM imports here
        if not parent_alive(parent) or time.monotonic() - waited > WORKLOAD_WAIT_SECONDS:
            print(f"  {label}: kvspec review is gone, stopping", file=sys.stderr, flush=True)
            return EXIT_PARENT_GONE
        time.sleep(0.2)
    with open(workload_path) as f:
        workload = codec.decode(json.load(f))
    with adapter.watching(DEFAULT_DEADLINE_SECONDS):
        results = evaluate(adapter, workload, label)
    results["seconds"] = round(time.monotonic() - started, 1)
    partial = results_path + ".partial"
    with open(partial, "w") as f:
        json.dump(results, f)
    os.replace(partial, results_path)  # the parent never reads half of it
    print(f"  {label}: done in {results['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
