"""One side of ``kvspec review``: import the vLLM named by KVSPEC_VLLM / KVSPEC_VLLM_SRC, run a
pre-generated workload on it, write what vLLM answered and which invariants it broke.

    python -m kvspec.tools.review_worker WORKLOAD.json RESULTS.json LABEL

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
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.oracles.invariants import CRASHED, Violation
from kvspec.oracles.lookups import lookup_violations
from kvspec.tools.programs import recording_machine, run_program

PROGRESS_EVERY = 10.0  # seconds between progress lines


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
        outcome = {"refused": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else ""}
    outcome["violations"] = conformance_failures(adapter, model)
    return outcome


def _lookup(adapter, path: str, case) -> dict:

    setting, state, max_length = case
    ask = vllm_coordinator if path == "core" else vllm_mooncake
    try:
        hit = ask(adapter, setting, state, max_length)
    except Exception as exc:  # noqa: BLE001
        return {"hit": None, "violations": [Violation(CRASHED, f"{type(exc).__name__}: {exc}")]}
    return {"hit": codec.encode(hit), "violations": lookup_violations(path, hit, setting, state, max_length)}


def evaluate(adapter, workload: dict, label: str) -> dict:
    """vLLM's answer and the violations for every input of ``workload`` (decoded)."""
    total = len(workload["models"]) + len(workload["lookups"]) + len(workload["programs"])
    progress = Progress(label, total)
    results: dict = {"version": adapter.version, "label": adapter.target.label, "models": [], "lookups": [], "programs": []}
    for model in workload["models"]:
        results["models"].append(_grouping(adapter, model))
        progress.tick("grouping")
    for item in workload["lookups"]:
        case = (item["setting"], item["state"], item["max_length"])
        results["lookups"].append({path: _lookup(adapter, path, case) for path in item["paths"]})
        progress.tick("lookups")
    machine = recording_machine(adapter)
    for program in workload["programs"]:
        results["programs"].append(run_program(machine, program))
        progress.tick("operation sequences")
    return results


def main(argv: list[str]) -> int:
    workload_path, results_path, label = argv
    try:
        return _run(workload_path, results_path, label)
    except Exception as exc:  # one line for the parent to show (TargetError: bad target)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _run(workload_path: str, results_path: str, label: str) -> int:

    started = time.monotonic()
    adapter = VllmAdapter(resolve())
    print(f"  {label}: {adapter.target.label} imported in {time.monotonic() - started:.1f} s", flush=True)
    while not os.path.exists(workload_path):  # the parent draws it while vLLM imports here
        time.sleep(0.2)
    with open(workload_path) as f:
        workload = codec.decode(json.load(f))
    results = evaluate(adapter, workload, label)
    results["seconds"] = round(time.monotonic() - started, 1)
    with open(results_path, "w") as f:
        json.dump(results, f)
    print(f"  {label}: done in {results['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
