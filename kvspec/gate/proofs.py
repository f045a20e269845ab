"""The proofs check: the Z3 theorems of proofs/, their counterexamples replayed on this vLLM."""

from __future__ import annotations

from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.proof_replays import run_proofs_on_vllm
from kvspec.gate.result import CheckResult
from kvspec.proofs.runner import ok

PROOF_BOUND = 16  # hash units per cache in the bounded proofs (benchmarks/proof_bound.py: time as it grows)


def check_proofs(adapter, options: GateOptions) -> CheckResult:
    """The Z3 theorems of proofs/ at the default bound: every one proved (or refuted with a
    counterexample replayed on this vLLM), never vacuous, every proof mutant refuted."""
    return proofs_verdict(run_proofs_on_vllm(PROOF_BOUND, adapter), PROOF_BOUND, options.known())


def proofs_verdict(results, bound: int, known: dict) -> CheckResult:
    """The check's verdict on the proofs' ``results`` at ``bound``, given the recorded divergences."""
    proved = sum(r.result == "proved" for r in results)
    refuted = [r.theorem for r in results if r.result == "refuted"]
    mutants = (sum(r.mutants_refuted for r in results), sum(r.mutants_total for r in results))
    covered = (f"{len(results)} theorems at N={bound}: {proved} proved, {len(refuted)} refuted with a "
               f"vLLM replay; mutants refuted {mutants[0]}/{mutants[1]}")
    bad = [f"{r.theorem}: {r.result}, vacuity {'ok' if r.vacuity_ok else 'FAILED'}, "
           f"mutants {r.mutants_refuted}/{r.mutants_total}" for r in results if not ok([r])]
    # A refuted theorem is a divergence of vLLM's behaviour from a property the spec hoped for.
    bad += [f"NEW divergence: {name} refuted; record it in known-divergences.toml as kind "
            f"'non-monotone', where '{name}', once its replay (kvspec prove) is explained"
            for name in refuted if ("non-monotone", name) not in known]
    findings = [f"known divergence {known[('non-monotone', name)].id}: {name} refuted, replayed on vLLM"
                for name in refuted if ("non-monotone", name) in known]
    return CheckResult(Check.PROOFS, covered, holds=not bad, details=bad + findings or ["every theorem proved"])
