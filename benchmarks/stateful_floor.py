"""The stateful check against vLLM's own floor, side by side in one run (issue 17): the gate's
stateful check at the full budget (Hypothesis drawing the runs, the shadow, the reference cache
model, the judges), and the same operation sequences driven on ``KVCacheManager`` with nothing
else: each run's recorded calls (impl/call_trace.py) as the plain-vLLM test kvspec prints for a
failure (kvspec/emit/stateful_test.py, unformatted), compiled first and then called. That test
asserts every hit and allocation as vLLM gave it, so the floor also shows the replay is faithful.

Steps are the machine's scheduler steps (the check's own count), the same work on both sides.

    .venv/bin/python benchmarks/stateful_floor.py [--vllm 0.34.0] [--seed 0] [--repeats 3] [--json F]
"""

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from kvspec.emit.stateful_test import Expected, stateful_test
from kvspec.gate.options import GateOptions
from kvspec.gate.stateful import check_stateful_manager
from kvspec.impl import live
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter

RESULTS = Path(__file__).parent / "results" / "stateful_floor.json"


def judged_run(adapter, seed: int, scale: float = 1.0) -> tuple[float, int, list]:
    """(seconds, steps, traces) of the gate's stateful check (``scale``: its budget's factor);
    every manager it built, traced."""
    managers: list = []
    original = live.LiveManager.__init__

    def traced(self, *args, **kwargs):
        original(self, *args, **kwargs)
        managers.append(self)

    live.LiveManager.__init__ = traced
    try:
        started = time.perf_counter()
        result = check_stateful_manager(adapter, GateOptions(seed=seed, scale=scale))
        seconds = time.perf_counter() - started
    finally:
        live.LiveManager.__init__ = original
    if not result.holds:
        raise SystemExit(f"stateful_floor: the stateful check does not hold here: {result.details[:1]}")
    steps = int(re.search(r"(\d+) steps", result.covered).group(1))
    return seconds, steps, [(m.trace.setup, list(m.trace.calls)) for m in managers if m.trace.calls]


def floor_tests(traces: list, rules) -> list:
    """Each trace as a compiled plain-vLLM test function (formatting skipped: it is not printed)."""
    emit = stateful_test.__wrapped__
    tests = []
    for index, (setup, calls) in enumerate(traces):
        source = emit(setup, calls, Expected("the floor: every call as vLLM answered it"), rules, f"floor {index}")
        namespace: dict = {}
        exec(compile(source, f"<floor {index}>", "exec"), namespace)  # noqa: S102 - our own emitted test
        tests.append(next(v for k, v in namespace.items() if k.startswith("test_")))
    return tests


def floor_seconds(tests: list) -> float:
    started = time.perf_counter()
    for test in tests:
        test()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    adapter = VllmAdapter(resolve(args.vllm))
    runs = [judged_run(adapter, args.seed) for _ in range(args.repeats)]
    steps, traces = runs[0][1], runs[0][2]
    tests = floor_tests(traces, adapter.rules)
    judged = statistics.median(seconds for seconds, _, _ in runs)
    floor = statistics.median(floor_seconds(tests) for _ in range(args.repeats))
    calls = sum(len(c) for _, c in traces)
    figures = {
        "target": adapter.target.label, "seed": args.seed, "repeats": args.repeats, "steps": steps,
        "managers": len(traces), "calls_on_the_manager": calls,
        "judged_seconds": round(judged, 2), "floor_seconds": round(floor, 2),
        "judged_steps_per_second": round(steps / judged, 1), "floor_steps_per_second": round(steps / floor, 1),
        "judged_over_floor": round(judged / floor, 2),
    }  # fmt: skip
    print(f"target: {figures['target']}, seed {args.seed}: the gate's stateful check, {steps} steps over "
          f"{len(traces)} managers ({calls} calls on them), median of {args.repeats}\n")
    print("| figure | the stateful check (judged) | vLLM's floor (the same calls, nothing else) | judged / floor |")
    print("|---|---:|---:|---:|")
    print(f"| seconds | {judged:.2f} | {floor:.2f} | {judged / floor:.1f}x |")
    print(f"| steps/s | {steps / judged:,.0f} | {steps / floor:,.0f} | - |")
    args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
