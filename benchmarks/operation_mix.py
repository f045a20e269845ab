"""What the stateful check's operation mix reaches, side by side in one run: the gate's machine
with the rules that weight it towards deep cache states (compute_prompt, decode; see
kvspec/stateful/machine.py) and without them, at the gate's budget, over several seeds. It
prints one table (medians over the seeds) and writes it to benchmarks/results/operation_mix.md
and .json: the share of steps per operation, steps that scheduled computation, how deep the
cache got (cached keys, mean per step and most at once), blocks published per group kind,
evictions and hits.

    .venv/bin/python benchmarks/operation_mix.py [--vllm 0.33.0] [--seeds 0 1 2] [--examples 500]
"""

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

import hypothesis
from hypothesis import Phase

from kvspec.gate.result import gate_settings
from kvspec.gate.stateful import STATEFUL_EXAMPLES, STATEFUL_STEPS
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.stateful.machine import make_cache_machine, run_machine

RESULTS = Path(__file__).parent / "results"
OPERATIONS = ("add", "schedule", "compute_prompt", "decode", "stop", "look_up_prompt", "reset_prefix_cache")
KINDS = ("full", "sliding_window", "chunked_local", "mamba")


def measure(adapter, seed: int, examples: int, state_builders: bool) -> dict[str, float]:
    stats: Counter = Counter()
    machine = hypothesis.seed(seed)(make_cache_machine(adapter, stats, state_builders=state_builders))
    run_machine(machine, gate_settings(examples, phases=[Phase.generate]), STATEFUL_STEPS)
    steps = stats["steps"] or 1
    row = {f"steps that are {op}, %": 100 * stats[f"operation {op}"] / steps for op in OPERATIONS}
    row |= {
        "steps that scheduled computation": stats["steps scheduled"],
        "cached keys, mean per step": stats["cached keys, summed over steps"] / steps,
        "cached keys, most at once": stats["cached keys, most at once"],
        **{f"blocks published, {kind}": stats[f"blocks published, {kind}"] for kind in KINDS},
        "evictions": stats["evictions"],
        "preemptions": stats["preemptions"],
        "hits": stats["hits"],
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--examples", type=int, default=STATEFUL_EXAMPLES)
    args = parser.parse_args()
    adapter = VllmAdapter(resolve(args.vllm))
    medians = {}
    for label, builders in (("uniform rules (before)", False), ("weighted to build state (now)", True)):
        rows = [measure(adapter, seed, args.examples, builders) for seed in args.seeds]
        medians[label] = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    labels = list(medians)
    lines = [f"Operation mix of the stateful check, vLLM {adapter.version}, {args.examples} runs of "
             f"{STATEFUL_STEPS} steps, median over seeds {args.seeds}", "",
             f"| figure | {' | '.join(labels)} |", "|---|" + "---:|" * len(labels)]
    for key in medians[labels[0]]:
        lines.append(f"| {key} | " + " | ".join(f"{medians[label][key]:,.1f}" for label in labels) + " |")
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "operation_mix.md").write_text(table + "\n")
    (RESULTS / "operation_mix.json").write_text(json.dumps(
        {"vllm": adapter.version, "seeds": args.seeds, "examples": args.examples, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
