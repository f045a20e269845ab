"""Where each gate check spends its time: every check run once under cProfile at the default
budget, its own time (cProfile's tottime) summed by where the code lives (a built-in's
time goes to its callers), side by side in one
run. The buckets say what a speed-up has to attack: Hypothesis's engine and draws, vLLM itself,
kvspec's reference and spec, its judges, its draws, the adapter (impl/), or the rest (Python's
library, Z3).

    .venv/bin/python benchmarks/where_time_goes.py [--vllm 0.34.0] [--seed 0] [--check NAME ...] [--json F]

Profiling slows Python code about twofold, evenly enough for shares; the seconds are not the
gate's (benchmarks/gate_jobs.py measures those).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

from kvspec.gate.options import GateOptions
from kvspec.gate.registry import CHECKS, run_checks
from kvspec.impl.target import PROJECT_ROOT, resolve
from kvspec.impl.vllm_adapter import VllmAdapter

# First match wins: a path containing the marker belongs to the bucket.
BUCKETS = (
    ("Hypothesis", ("/hypothesis/",)),
    ("vLLM", ("/.vllm/", "/vllm/")),
    ("Z3", ("/z3/",)),
    ("kvspec draws", (f"{PROJECT_ROOT}/kvspec/draws/",)),
    ("kvspec reference + spec", (f"{PROJECT_ROOT}/reference/", f"{PROJECT_ROOT}/spec/")),
    ("kvspec proofs", (f"{PROJECT_ROOT}/proofs/",)),
    ("kvspec judges", (f"{PROJECT_ROOT}/kvspec/oracles/", f"{PROJECT_ROOT}/kvspec/stateful/",
                       f"{PROJECT_ROOT}/kvspec/divergences/", f"{PROJECT_ROOT}/kvspec/gate/")),
    ("kvspec adapter (impl/)", (f"{PROJECT_ROOT}/impl/",)),
)
OTHER = "Python and the rest"


def bucket_of(filename: str) -> str:
    return next((name for name, markers in BUCKETS if any(m in filename for m in markers)), OTHER)


def profile_check(adapter, name: str, seed: int) -> dict:
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    (result,) = run_checks(adapter, GateOptions(seed=seed), only=[name])
    profiler.disable()
    seconds = time.perf_counter() - started
    shares: dict[str, float] = {}
    for (filename, _line, _func), (_cc, _nc, tottime, _ct, callers) in pstats.Stats(profiler).stats.items():
        if filename == "~" and callers:  # a built-in: its time goes to the code that called it
            for (caller_file, _l, _f), (_ccc, _cnc, caller_tt, _cct) in callers.items():
                shares[bucket_of(caller_file)] = shares.get(bucket_of(caller_file), 0.0) + caller_tt
        else:
            shares[bucket_of(filename)] = shares.get(bucket_of(filename), 0.0) + tottime
    total = sum(shares.values()) or 1.0
    return {"check": name, "verdict": result.verdict, "profiled_seconds": round(seconds, 1),
            "shares": {b: round(shares.get(b, 0.0) / total, 3) for b in [*(n for n, _ in BUCKETS), OTHER]}}


def markdown(rows: list[dict]) -> str:
    names = list(rows[0]["shares"])
    lines = ["| check | profiled s | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for row in rows:
        lines.append(f"| {row['check']} | {row['profiled_seconds']:.1f} | "
                     + " | ".join(f"{100 * row['shares'][n]:.0f}%" for n in names) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default="0.34.0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="append", default=[], help="only this check (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    if unknown := [c for c in args.check if c not in CHECKS]:
        print(f"where_time_goes: no check {unknown[0]!r}", file=sys.stderr)
        return 2
    adapter = VllmAdapter(resolve(args.vllm))
    run_checks(adapter, GateOptions(seed=args.seed), only=["seed: hybrid coordinator"])  # vLLM's lazy set-up
    rows = []
    for name in args.check or list(CHECKS):
        print(f"where_time_goes: {name} ...", file=sys.stderr, flush=True)
        rows.append(profile_check(adapter, name, args.seed))
    print(f"Own time per check by where the code lives, vLLM {args.vllm}, seed {args.seed} (cProfile tottime shares)\n")
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps({"vllm": args.vllm, "seed": args.seed, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
