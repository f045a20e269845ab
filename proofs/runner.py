"""Runs every theorem and prints the table. Pure: a counterexample's replays on real vLLM are
the caller's (``replay``; kvspec/gate/proof_replays.py), and ``kvspec prove`` is
kvspec/tools/prove.py."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Callable

from kvspec.proofs import finders as F
from kvspec.proofs import grouping as G
from kvspec.proofs import hits as H
from kvspec.proofs.core import ARITHMETIC, ProofResult, Theorem, run_theorem, single
from kvspec.proofs.counterexamples import Replay, offline_lines, rendered
from kvspec.proofs.replay import eagle_monotonicity_counterexample

EAGLE_SEARCH_UNITS = 6  # the EAGLE non-monotonicity search is a two-copy loop: kept small


def finder_contracts(n: int = 16):
    """The per-type finders' contracts F1-F5 that the loop proofs rest on
    (single_type_kv_cache_manager:*Manager.find_longest_cache_hit)."""
    obligations = []
    for kind in F.KINDS:
        obligations += F.range_and_alignment(kind, n)
        obligations.append(F.monotone(kind, n))
    obligations += [F.confirms(F.SW, n, min_need=1), F.confirms(F.SW, n, first_drop=False), F.confirms(F.MAMBA, n)]
    return obligations, []


def eagle_monotone(n: int = EAGLE_SEARCH_UNITS):
    """With EAGLE the hybrid hit is not monotone in the cache (kv_cache_coordinator:
    HybridKVCacheCoordinator.find_longest_cache_hit, eagle_verified kept across a Mamba shrink).
    The two-cache search (replay.eagle_monotonicity_counterexample) is the refutation; this
    obligation only records its verdict, and its counterexample is replayed on vLLM."""
    import z3  # noqa: PLC0415

    holds = z3.Bool("eagle_monotone_holds")
    refuted = eagle_monotonicity_counterexample(n) is not None
    ob = single("T5b monotone with EAGLE (two caches, SW + Mamba)", [z3.Not(holds)] if refuted else [],
                holds if refuted else z3.BoolVal(True), on_model=lambda _model: H.eagle_finding(n))
    return [ob], []


def theorems(bound: int) -> list[Theorem]:
    n = bound
    loop = "any N, 2-4 spec groups, every pass"
    return [
        Theorem("F  finder contracts F1-F5", f"N={n}, k<=4, all A", lambda: finder_contracts(n)),
        Theorem("0  hash-unit scaling", "unbounded ints", lambda: H.scaling()),
        Theorem("1  Mamba <= attention-verified", loop, lambda: H.mamba_never_past_attention(n)),
        Theorem("2  hit <= M, aligned (all paths)", f"finders N={n}; {loop}", lambda: H.bounded_and_aligned(n)),
        Theorem("3  EAGLE drop <= candidate", f"finders N={n}; 2-3 groups", lambda: H.drop_within_candidate(n)),
        Theorem("4  loop ends, fixed point", "passes <= min(M,N)/A + 2", lambda: H.terminates(n)),
        Theorem("5a monotone without EAGLE", "any N, 2-3 spec groups", lambda: H.monotone(n)),
        Theorem("5b monotone with EAGLE", f"N={EAGLE_SEARCH_UNITS}, SW+Mamba", lambda: eagle_monotone()),
        Theorem("6  warning gate exact", "<=4 groups, all methods", lambda: G.warning_gate(n)),
        Theorem("7  grouping arithmetic", "unbounded ints", lambda: G.grouping_arithmetic(n), solver=ARITHMETIC),
    ]


def run_proofs(bound: int = 16, replay: Callable[[Replay], list[str]] = offline_lines) -> list[ProofResult]:
    """Every theorem at ``bound`` hash units; each counterexample's replays turned into lines
    by ``replay`` (the runner on real vLLM passes one; without, what the proofs alone know)."""
    results = []
    for theorem in theorems(bound):
        result = run_theorem(theorem, replay)
        if theorem.name.startswith("4"):  # a finding beside the theorem, not a failure of it
            result = _with(result, rendered(H.simple_exit_finding(), replay))
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
