"""Proof time as the bound grows: `python benchmarks/proof_bound.py [--bounds 8 16 32 64] [--runs 3]`.

Prints a Markdown table of the median wall time of `run_proofs(bound)` (no vLLM replays: they do
not depend on the bound) and of its slowest theorem, over ``--runs`` runs per bound. Only the
bit-level finder lemmas (and the Mamba-margin seed search) grow with the bound; the loop,
grouping and arithmetic theorems are unbounded and cost the same at every bound.
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvspec.proofs.runner import ok, run_proofs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounds", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| hash units N | total (median) | slowest theorem (median) | all proved |")
    print("|---:|---:|---|:---:|")
    for bound in args.bounds:
        totals, slowest, verdicts = [], {}, []
        for _ in range(args.runs):
            start = time.perf_counter()
            results = run_proofs(bound)
            totals.append(time.perf_counter() - start)
            verdicts.append(ok(results))
            for r in results:
                slowest.setdefault(r.theorem, []).append(r.seconds)
        name, times = max(slowest.items(), key=lambda item: statistics.median(item[1]))
        print(f"| {bound} | {statistics.median(totals):.1f} s | {name.split('  ')[-1].strip()}: "
              f"{statistics.median(times):.1f} s | {'yes' if all(verdicts) else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
