"""Runs every theorem, prints the table, writes --json. Entry points for `kvspec prove`:
``run_proofs(bound, adapter)`` and ``main(argv)``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from kvspec.proofs import finders as F
from kvspec.proofs import grouping as G
from kvspec.proofs import hits as H
from kvspec.proofs.core import ProofResult, Theorem, run_theorem, single
from kvspec.proofs.replay import eagle_monotonicity_counterexample

EAGLE_SEARCH_UNITS = 6  # the EAGLE non-monotonicity search is a two-copy loop: kept small


def finder_contracts(adapter=None, n: int = 16):
    """The per-type finders' contracts F1-F5 that the loop proofs rest on
    (single_type_kv_cache_manager:*Manager.find_longest_cache_hit)."""
    obligations = []
    for kind in F.KINDS:
        obligations += F.range_and_alignment(kind, n)
        obligations.append(F.monotone(kind, n))
    obligations += [F.confirms(F.SW, n, min_need=1), F.confirms(F.SW, n, first_drop=False), F.confirms(F.MAMBA, n)]
    return obligations, []


def eagle_monotone(adapter=None, n: int = EAGLE_SEARCH_UNITS):
    """With EAGLE the hybrid hit is not monotone in the cache (kv_cache_coordinator:
    HybridKVCacheCoordinator.find_longest_cache_hit, eagle_verified kept across a Mamba shrink).
    The two-cache search (replay.eagle_monotonicity_counterexample) is the refutation; this
    obligation only records its verdict, and its counterexample is replayed on vLLM."""
    import z3  # noqa: PLC0415

    holds = z3.Bool("eagle_monotone_holds")
    refuted = eagle_monotonicity_counterexample(n) is not None
    ob = single("T5b monotone with EAGLE (two caches, SW + Mamba)", [z3.Not(holds)] if refuted else [],
                holds if refuted else z3.BoolVal(True), on_model=lambda _model: H.eagle_finding(adapter, n))
    return [ob], []


def theorems(bound: int, adapter) -> list[Theorem]:
    n = bound
    loop = "any N, 2-4 spec groups, every pass"
    return [
        Theorem("F  finder contracts F1-F5", f"N={n}, k<=4, all A", lambda: finder_contracts(adapter, n)),
        Theorem("0  hash-unit scaling", "unbounded ints", lambda: H.scaling(adapter)),
        Theorem("1  Mamba <= attention-verified", loop, lambda: H.mamba_never_past_attention(adapter, n)),
        Theorem("2  hit <= M, aligned (all paths)", f"finders N={n}; {loop}", lambda: H.bounded_and_aligned(adapter, n)),
        Theorem("3  EAGLE drop <= candidate", f"finders N={n}; 2-3 groups", lambda: H.drop_within_candidate(adapter, n)),
        Theorem("4  loop ends, fixed point", "passes <= min(M,N)/A + 2", lambda: H.terminates(adapter, n)),
        Theorem("5a monotone without EAGLE", "any N, 2-3 spec groups", lambda: H.monotone(adapter, n)),
        Theorem("5b monotone with EAGLE", f"N={EAGLE_SEARCH_UNITS}, SW+Mamba", lambda: eagle_monotone(adapter)),
        Theorem("6  warning gate exact", "<=4 groups, all methods", lambda: G.warning_gate(adapter, n)),
        Theorem("7  grouping arithmetic", "unbounded ints", lambda: G.grouping_arithmetic(adapter, n)),
    ]


def run_proofs(bound: int = 16, adapter=None) -> list[ProofResult]:
    """Every theorem at ``bound`` hash units; counterexamples replayed on ``adapter`` (real vLLM)
    when given."""
    results = []
    for theorem in theorems(bound, adapter):
        result = run_theorem(theorem)
        if theorem.name.startswith("4"):  # a finding beside the theorem, not a failure of it
            result = _with(result, H.simple_exit_finding(adapter))
        results.append(result)
    return results


def _with(result: ProofResult, lines: list[str]) -> ProofResult:
    return ProofResult(**{**asdict(result), "replays": result.replays + lines})


def print_table(results: list[ProofResult], out=sys.stdout) -> None:
    rows = [("theorem", "bound", "result", "time", "vacuity", "mutants")]
    rows += [(r.theorem, r.bound, r.result, f"{r.seconds:.1f}s", "ok" if r.vacuity_ok else "FAIL",
              f"{r.mutants_refuted}/{r.mutants_total}") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    for r in results:
        if r.replays:
            print(f"\n{r.theorem}:", file=out)
            print("\n".join(f"  {line}" for line in r.replays), file=out)


def ok(results: list[ProofResult]) -> bool:
    """Every theorem proved, or refuted with a replayed counterexample (a finding); vacuity
    checks pass and every mutant is refuted."""
    return all(
        (r.result == "proved" or (r.result == "refuted" and r.replays))
        and r.vacuity_ok and r.mutants_refuted == r.mutants_total
        for r in results
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvspec prove", description="Z3 proofs of kvspec's rules")
    parser.add_argument("--bound", type=int, default=16, help="hash units per cache (default 16)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--no-vllm", action="store_true", help="skip the replays on real vLLM")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    adapter = None
    if not args.no_vllm:
        from kvspec.impl.target import resolve  # noqa: PLC0415
        from kvspec.impl.vllm_adapter import VllmAdapter  # noqa: PLC0415

        adapter = VllmAdapter(resolve())
    results = run_proofs(args.bound, adapter)
    print_table(results)
    total = time.perf_counter() - start
    print(f"\nkvspec prove: bound {args.bound}, {total:.1f}s total" + (f", vLLM {adapter.version}" if adapter else ""))
    if args.json:
        report = {"bound": args.bound, "seconds": round(total, 2), "ok": ok(results),
                  "vllm": adapter.version if adapter else None, "theorems": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok(results) else 1
