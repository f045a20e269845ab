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

from kvspec.gate.proof_replays import run_proofs_on_vllm
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.proofs.runner import ok, print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvspec prove", description="Z3 proofs of kvspec's rules")
    parser.add_argument("--bound", type=int, default=16, help="hash units per cache (default 16)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--no-vllm", action="store_true", help="skip the replays on real vLLM")
    args = parser.parse_args(argv)
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
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok(results) else 1
