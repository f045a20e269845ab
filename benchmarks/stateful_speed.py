"""How fast the stateful check runs, side by side in one run: steps per second of the gate's
machine on a real KVCacheManager (with its judges), and of the reference alone doing the same
work (reference/cache_model.py replaying the same pool operations, reference/lookup.py
answering the same lookups over the reference's cache). Medians over --repeats.

    .venv/bin/python benchmarks/stateful_speed.py [--vllm 0.33.0] [--examples 100] [--repeats 3] [--json F]
"""

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import hypothesis
from hypothesis import Phase

from kvspec.gate.result import gate_settings
from kvspec.gate.stateful import STATEFUL_STEPS
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.reference.cache_model import CacheModel, replay
from kvspec.reference.lookup import coordinator_lookup
from kvspec.stateful import judge as cache_machine_checks
from kvspec.stateful.machine import make_cache_machine, run_machine


def run_vllm(adapter, examples: int, record: list | None) -> tuple[int, float]:
    """(steps, seconds) of one seeded run of the machine; ``record`` receives each example's
    pool operations and lookups."""
    stats: Counter = Counter()
    machine = hypothesis.seed(0)(make_cache_machine(adapter, stats))
    judge = cache_machine_checks.MachineJudge
    original_sync, original_expected = judge.sync, judge.expected_hit

    def sync(self, **kwargs):
        if record is not None:
            if getattr(self, "_bench_example", None) is None:
                self._bench_example = {"num_blocks": self.config.num_blocks, "operations": [], "lookups": []}
                record.append(self._bench_example)
            self._bench_example["operations"] += list(self.live.recorder.operations)
        original_sync(self, **kwargs)

    def expected_hit(self, request):
        expected = original_expected(self, request)
        if record is not None and getattr(self, "_bench_example", None) is not None:
            _hit, state, max_length = expected
            self._bench_example["lookups"].append((self.setting, state, max_length))
        return expected

    judge.sync, judge.expected_hit = sync, expected_hit
    try:
        started = time.perf_counter()
        run_machine(machine, gate_settings(examples, phases=[Phase.generate]), STATEFUL_STEPS)
        return stats["steps"], time.perf_counter() - started
    finally:
        judge.sync, judge.expected_hit = original_sync, original_expected


def run_reference(recorded: list) -> float:
    """Seconds for the reference alone to redo the recorded work."""
    started = time.perf_counter()
    for example in recorded:
        model = CacheModel(example["num_blocks"])
        replay(model, example["operations"])
        for setting, state, max_length in example["lookups"]:
            coordinator_lookup(setting, state, max_length)
    return time.perf_counter() - started


def measure(adapter, examples: int, repeats: int) -> dict:
    """Steps per second of the machine on real vLLM and of the reference redoing its work, medians
    over ``repeats`` (benchmarks/figures.py reads this through --json)."""
    recorded: list = []
    steps, _ = run_vllm(adapter, examples, recorded)
    vllm_seconds = [run_vllm(adapter, examples, None)[1] for _ in range(repeats)]
    reference_seconds = [run_reference(recorded) for _ in range(repeats)]
    vllm_rate = steps / statistics.median(vllm_seconds)
    reference_rate = steps / statistics.median(reference_seconds)
    return {
        "target": adapter.target.label, "examples": examples, "repeats": repeats, "steps": steps,
        "operations": sum(len(e["operations"]) for e in recorded),
        "lookups": sum(len(e["lookups"]) for e in recorded),
        "vllm_steps_per_second": round(vllm_rate, 1), "reference_steps_per_second": round(reference_rate, 1),
        "ratio": round(vllm_rate / reference_rate, 4),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    m = measure(VllmAdapter(resolve(args.vllm)), args.examples, args.repeats)
    vllm_rate, reference_rate = m["vllm_steps_per_second"], m["reference_steps_per_second"]
    print(f"target: {m['target']}; {args.examples} runs of {STATEFUL_STEPS} steps ({m['steps']} steps, "
          f"{m['operations']} pool operations, {m['lookups']} admissions looked up), median of {args.repeats}\n")
    print("| figure | real KVCacheManager, judged | reference alone | vLLM / reference |\n|---|---:|---:|---:|")
    print(f"| stateful steps/s | {vllm_rate:,.0f} | {reference_rate:,.0f} | {m['ratio']:.3f} |")
    print(f"| seconds for the gate's 500 runs (estimated) | {500 * STATEFUL_STEPS / vllm_rate:,.1f} | "
          f"{500 * STATEFUL_STEPS / reference_rate:,.2f} | - |")
    if args.json is not None:
        args.json.write_text(json.dumps(m, indent=2) + "\n")


if __name__ == "__main__":
    main()
