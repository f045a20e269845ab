"""How one proof obligation is discharged, checked for vacuity, and how a theorem's mutants are
refuted. A theorem is a list of obligations (all must be UNSAT when negated) plus mutants (each
must yield a counterexample); ``unknown`` and timeouts are failures, never passes."""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

import z3

from kvspec.proofs.counterexamples import Item, Replay, offline_lines, rendered

TIMEOUT_MS = 20_000


@dataclass(frozen=True)
class ProofResult:
    theorem: str
    bound: str
    result: str  # "proved" | "refuted" | "unknown" | "timeout"
    seconds: float
    vacuity_ok: bool
    mutants_refuted: int
    mutants_total: int
    replays: list[str]
    details: list[str]


@dataclass(frozen=True)
class Part:
    """One query of an obligation: ``facts`` imply ``goal`` (a family splits on block sizes)."""

    facts: list
    goal: z3.BoolRef
    # A counterexample's text lines and replays (proofs/counterexamples.py).
    on_model: Callable[[z3.ModelRef], list[Item]] | None = None


@dataclass
class Obligation:
    """Every part holds. Vacuity: every part's facts are satisfiable, and the key premise is
    used: some part of ``unkeyed`` (the same queries without the key) has a counterexample; with
    no key, some part's goal alone can fail (it is not a tautology)."""

    name: str
    parts: list[Part]
    unkeyed: list[Part]


def single(name, assumptions, goal, key=None, on_model=None) -> Obligation:
    """An obligation of one query; ``key`` is the premise the proof must use."""
    key = key or []
    return Obligation(
        name, [Part(assumptions + key, goal, on_model)], [Part(assumptions, goal, on_model)] if key else []
    )


@dataclass
class Mutant:
    """A weakened rule; its obligation must be refuted (SAT), with a counterexample."""

    name: str
    obligation: Obligation


@dataclass
class Outcome:
    status: str
    model: z3.ModelRef | None = None
    reason: str = ""


# Which Z3 pipeline discharges a theorem's queries (Theorem.solver), set by run_theorem. The
# bounded finder queries are deep If-terms over integers (proofs/encoding.py) that the default
# solver case-splits on: rewriting the term-level Ifs away and solving the equations first makes
# them several times faster (F1-F5 at N=16: 25.7 s -> 5.9 s), while the unbounded grouping
# arithmetic is faster as stated (0.3 s against 2.7 s).
BOUNDED, ARITHMETIC = "bounded", "arithmetic"
_SOLVER: ContextVar[str] = ContextVar("kvspec_proof_solver", default=BOUNDED)


def new_solver() -> z3.Solver:
    if _SOLVER.get() == ARITHMETIC:
        return z3.Solver()
    return z3.Then("simplify", "elim-term-ite", "solve-eqs", "smt").solver()


def check(facts: list, timeout_ms: int | None = None) -> Outcome:
    solver = new_solver()
    solver.set(timeout=timeout_ms or TIMEOUT_MS)
    solver.add(*facts)
    verdict = solver.check()
    if verdict == z3.sat:
        return Outcome("sat", solver.model())
    if verdict == z3.unsat:
        return Outcome("unsat")
    reason = solver.reason_unknown()
    return Outcome("timeout" if "timeout" in reason or "canceled" in reason else "unknown", reason=reason)


def discharge(ob: Obligation, replays: list[Item]) -> tuple[str, bool, str]:
    """(result, vacuity_ok, detail) for one obligation."""
    result, reason = "proved", ""
    for part in ob.parts:
        proof = check(part.facts + [z3.Not(part.goal)])
        if proof.status == "sat":
            replays += part.on_model(proof.model) if part.on_model else []
            result = "refuted"
            break
        if proof.status != "unsat":
            result, reason = proof.status, proof.reason
            break
    premises = all(check(part.facts).status == "sat" for part in ob.parts)
    if ob.unkeyed:
        used = any(check(p.facts + [z3.Not(p.goal)]).status == "sat" for p in ob.unkeyed)
    else:
        used = any(check([z3.Not(p.goal)]).status == "sat" for p in ob.parts)
    vacuity = premises and used
    detail = f"{ob.name}: {result}" + ("" if vacuity else " (VACUOUS: premises unsat or key premise unused)")
    return result, vacuity, detail + (f" [{reason}]" if reason else "")


def refute(mutant: Mutant, replays: list[Item]) -> tuple[bool, str]:
    status = "unsat"
    for part in mutant.obligation.parts:
        outcome = check(part.facts + [z3.Not(part.goal)])
        if outcome.status == "sat":
            replays += part.on_model(outcome.model) if part.on_model else []
            return True, f"mutant {mutant.name}: refuted"
        if outcome.status != "unsat":
            status = outcome.status
    return False, f"mutant {mutant.name}: NOT refuted ({status})"


@dataclass
class Theorem:
    name: str
    bound: str
    build: Callable[[], tuple[list[Obligation], list[Mutant]]]
    findings: list[str] = field(default_factory=list)
    solver: str = BOUNDED  # BOUNDED or ARITHMETIC, see _SOLVER


def run_theorem(theorem: Theorem, replay: Callable[[Replay], list[str]] = offline_lines) -> ProofResult:
    """Every obligation discharged and every mutant refuted; each counterexample's replays
    turned into lines by ``replay`` (on real vLLM when the runner passes one)."""
    start = time.perf_counter()
    solver = _SOLVER.set(theorem.solver)
    try:
        return _run_theorem(theorem, replay, start)
    finally:
        _SOLVER.reset(solver)


def _run_theorem(theorem: Theorem, replay: Callable[[Replay], list[str]], start: float) -> ProofResult:
    obligations, mutants = theorem.build()
    replays: list[Item] = []
    results, vacuity, details = [], True, []
    for ob in obligations:
        result, vac, detail = discharge(ob, replays)
        results.append(result)
        vacuity &= vac
        details.append(detail)
    refuted = 0
    for mutant in mutants:
        ok, detail = refute(mutant, replays)
        refuted += ok
        details.append(detail)
    lines = rendered(replays, replay)  # before the clock stops: replays on vLLM count as the theorem's time
    order = ("timeout", "unknown", "refuted")
    overall = next((r for r in order if r in results), "proved")
    return ProofResult(
        theorem.name,
        theorem.bound,
        overall,
        round(time.perf_counter() - start, 2),
        vacuity,
        refuted,
        len(mutants),
        lines,
        details,
    )
