"""``kvspec prove``: the Z3 theorems of proofs/, their counterexamples replayed on real vLLM
(kvspec/gate/proof_replays.py), printed as a table, optionally written as JSON.

    kvspec prove [--bound N] [--json FILE] [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from kvspec.gate.files import ensure_writable, forget_previous, write_atomically
from kvspec.gate.proof_replays import run_proofs_on_vllm
from kvspec.impl.target import TargetError, resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.proofs.runner import ok, print_table
from kvspec.tools.inputs import at_least

# Past this the solver runs for hours (benchmarks/proof_bound.py: at 64 not all proved in time).
MAX_BOUND = 64


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise TargetError(message)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="kvspec prove", description="Z3 proofs of kvspec's rules")
    parser.add_argument("--bound", type=int, default=16, help="hash units per cache (default 16)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--no-vllm", action="store_true", help="skip the replays on real vLLM")
    args = parser.parse_args(argv)
    at_least("--bound", args.bound, 1)
    if args.bound > MAX_BOUND:
        raise TargetError(f"--bound {args.bound}: at most {MAX_BOUND} (the solver does not finish beyond)")
    if args.json is not None:
        ensure_writable(args.json, f"--json {args.json}")
        forget_previous(args.json)
    start = time.perf_counter()
    adapter = None
    if not args.no_vllm:

        adapter = VllmAdapter(resolve())
    results = run_proofs_on_vllm(args.bound, adapter)
    print_table(results)
    total = time.perf_counter() - start
    print(f"\nkvspec prove: bound {args.bound}, {total:.1f}s total" + (f", vLLM {adapter.version}" if adapter else ""))
    if args.json:
        report = {"bound": args.bound, "seconds": round(total, 2), "ok": ok(results),
                  "vllm": adapter.version if adapter else None, "theorems": [asdict(r) for r in results]}
        write_atomically(args.json, json.dumps(report, indent=2) + "\n", f"--json {args.json}")
    if not ok(results):
        print(f"replay: kvspec prove --bound {args.bound}" + (" --no-vllm" if args.no_vllm else ""))
    return 0 if ok(results) else 1
