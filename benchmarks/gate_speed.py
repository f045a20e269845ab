"""How fast the gate drives real vLLM, side by side with the reference alone, in one run:
lookups per second (core coordinator vs reference/lookup.py), grouping shapes per second
(vLLM vs reference/grouping.py), and stateful steps per second on a real KVCacheManager.
Medians over --repeats; the same drawn inputs for both sides.

    .venv/bin/python benchmarks/gate_speed.py [--vllm 0.33.0] [--cases 400] [--repeats 3]
"""

import argparse
import statistics
import time
from collections import Counter

import hypothesis

from kvspec.draws.lookups import chunked_local_preconditions_hold, lookups
from kvspec.draws.models import models
from kvspec.gate.grouping import vllm_grouping
from kvspec.gate.lookups import vllm_coordinator
from kvspec.gate.result import gate_settings
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.reference.grouping import expected_grouping
from kvspec.reference.lookup import coordinator_lookup
from kvspec.stateful.machine import make_cache_machine


def draw(strategy, count: int, keep=lambda value: True) -> list:
    """``count`` values of ``strategy``, reproducibly (the same for every side and repeat)."""
    values: list = []

    @hypothesis.seed(0)
    @gate_settings(count * 3)
    @hypothesis.given(strategy)
    def collect(value):
        if len(values) < count and keep(value):
            values.append(value)

    collect()
    return values


def rate(fn, inputs, repeats: int) -> float:
    """Median inputs per second of ``fn`` over ``repeats`` passes."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        for value in inputs:
            try:
                fn(value)
            except Exception:  # refusals are part of the workload
                pass
        seconds.append(time.perf_counter() - started)
    return len(inputs) / statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    adapter = VllmAdapter(resolve(args.vllm))

    cases = draw(
        lookups(),
        args.cases,
        keep=lambda c: (len(c[0].groups) > 1 or c[0].hash_block_size == c[0].groups[0].block_size)
        and chunked_local_preconditions_hold(c[0]),
    )
    shapes = draw(models(), args.cases)
    rows = [
        ("lookups/s, core coordinator", rate(lambda c: vllm_coordinator(adapter, *c), cases, args.repeats),
         rate(lambda c: coordinator_lookup(*c), cases, args.repeats)),
        ("grouping shapes/s", rate(lambda m: vllm_grouping(adapter, m), shapes, args.repeats),
         rate(lambda m: expected_grouping(m.layers, m.spec_decode, hybrid_manager=m.hybrid_manager), shapes, args.repeats)),
    ]
    steps = []
    for _ in range(args.repeats):
        stats: Counter = Counter()
        machine = hypothesis.seed(0)(make_cache_machine(adapter, stats))
        machine.TestCase.settings = gate_settings(100, stateful_step_count=30)
        started = time.perf_counter()
        machine.TestCase().runTest()
        steps.append(stats["steps"] / (time.perf_counter() - started))
    print(f"target: {adapter.target.label}; {len(cases)} lookups, {len(shapes)} shapes, median of {args.repeats}\n")
    print("| figure | real vLLM | reference alone | vLLM / reference |\n|---|---:|---:|---:|")
    for name, vllm_rate, reference_rate in rows:
        print(f"| {name} | {vllm_rate:,.0f} | {reference_rate:,.0f} | {vllm_rate / reference_rate:.2f} |")
    print(f"| stateful steps/s, real KVCacheManager | {statistics.median(steps):,.0f} | - | - |")


if __name__ == "__main__":
    main()
