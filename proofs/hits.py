"""Theorems 0-5: the hit-length invariants of vLLM's prefix-cache lookup. Each builder returns
(obligations, mutants); proofs/core.py discharges them. Loop obligations range over 2-4 spec
groups, every alignment vLLM can push, the first pass and any later pass (by induction)."""

from __future__ import annotations

import z3

from kvspec.proofs import finders as F
from kvspec.proofs import loop as L
from kvspec.proofs import replay as R
from kvspec.proofs import replay_more as RM
from kvspec.proofs.coordinators import LoopState, one_pass, simple_exit
from kvspec.proofs.core import Mutant, Obligation, Part, single
from kvspec.proofs.encoding import ALIGNMENTS, FULL, MAMBA, SW, VLLM, Rules, whole

GROUP_COUNTS = (2, 3, 4)


def loop_family(name: str, goal_of, *, counts=GROUP_COUNTS, firsts=(True, False), rules: Rules = VLLM,
                key_of=None, extra_of=None, contracts=None, on_model=None) -> Obligation:
    """One obligation per (spec groups, alignment, first or later pass). ``goal_of(sc, st, ps, con)``;
    ``key_of(sc, con)`` gives the key premise, left out of ``unkeyed``."""
    parts, unkeyed = [], []
    for num in counts:
        for a in ALIGNMENTS:
            for first in firsts:
                sc, st, ps, con, facts = L.setup(num, f"{name[:2]}{num}{a}{int(first)}_", first, a, rules,
                                                 cap_nonneg=key_of is None or "cap" not in name)
                goal = goal_of(sc, st, ps, con)
                facts += extra_of(sc, st, ps, con) if extra_of else []
                key = key_of(sc, con) if key_of else []
                base = facts + (con.facts(**contracts) if contracts else [])
                keyed = base + key + ([] if contracts else con.facts())
                parts.append(Part(keyed, goal, on_model))
                if key_of:
                    unkeyed.append(Part(base + ([] if contracts else con.facts()), goal, on_model))
    return Obligation(name, parts, unkeyed)


def state_after(ps) -> LoopState:
    return LoopState(ps.hit, ps.found, z3.BoolVal(True), ps.verified)


# ------------------------------------------------------------------------------------------ 0
def scaling():
    """Counting in hash units is exact: floor division by a block is floor division by the unit,
    then by the units per block; adding whole units commutes with it; and for positive divisors
    z3's Euclidean division is Python's floor division (kv_cache_utils:BlockHashListWithBlockSize)."""
    m, u, k, c, j, nh, x, d = z3.Ints("m u k c j nh x d")
    pos = [u >= 1, k >= 1]
    obligations = [
        single("M // (k*u) == (M // u) // k", [m >= 0, k >= 1], m / (k * u) == (m / u) / k, key=[u >= 1]),
        single("min(c + j*u, nh*u) // u == min(c // u + j, nh)", [c >= 0, j >= 0, nh >= 0] + pos[1:],
               z3.If(c + j * u <= nh * u, c + j * u, nh * u) / u == z3.If(c / u + j <= nh, c / u + j, nh),
               key=[u >= 1]),
        single("Euclidean == floor for d > 0", [], z3.And((x / d) * d <= x, x < (x / d) * d + d), key=[d >= 1]),
    ]
    mutant = single("mutant", [m >= 0, m <= 1024] + pos, m / (k * u + 1) == (m / u) / k,
                    on_model=RM.scaling_replay(m, u, k))
    mutants = [Mutant("floor by u*k+1", mutant)]
    return obligations, mutants


# ------------------------------------------------------------------------------------------ 1
def t1_goal(sc, st, ps, con):
    return z3.And([
        z3.Implies(g.kind == MAMBA, z3.And(whole(s.result).le(s.candidate),
                                           *[z3.Implies(h.kind == FULL, s.result <= f) for h, f in zip(sc.groups, ps.found)]))
        for s, g in zip(ps.steps, sc.groups)
    ])


def mamba_never_past_attention(n: int = 16):
    """A Mamba group's hit never exceeds the candidate, hence never the full-attention verified
    prefix, in every pass (HybridKVCacheCoordinator.find_longest_cache_hit's MambaSpec gate, #43559)."""
    sorted_key = lambda sc, con: L.sorted_facts(sc)  # noqa: E731

    def seed_replay(_model):
        found = R.seed_counterexample(n)
        if found is None:
            return ["seed-shaped counterexample: none found"]
        lookup, clean, bad = found
        note = f"encoding: rule {clean}, mutant {bad}"
        return R.replay("mamba-peek-margin counterexample (seed #48361)", lookup, "mamba-peek-margin", note)

    ob = loop_family("T1 Mamba <= candidate <= full verified", t1_goal, key_of=sorted_key)
    mutant = loop_family("T1 mutant", t1_goal, rules=Rules(mamba_margin=True), key_of=sorted_key,
                         counts=(2,), firsts=(True,), on_model=seed_replay)
    return [ob], [Mutant("mamba gets the peek margin (mamba-peek-margin)", mutant)]


# ------------------------------------------------------------------------------------------ 2
def bounded_and_aligned(n: int = 16):
    """The reconciled hit is at most M and a multiple of the alignment on every coordinator path:
    unitary and Mooncake single-group (F1-2 at alignment = block or hash unit), hybrid and
    Mooncake multi-group (loop invariant) (kv_cache_coordinator:*.find_longest_cache_hit)."""
    inv = lambda sc, st, ps, con: L.invariant(sc, state_after(ps), con.a)  # noqa: E731
    cap_key = lambda sc, con: [sc.m.units >= 0]  # noqa: E731
    obligations = [loop_family("T2 cap: hit <= M, aligned, <= verified", inv, key_of=cap_key)]
    mutants = [F.finder_mutants(n)[name] for name in ("skip-round-down", "mamba-unaligned", "ignore-cap")]
    _attach(mutants, None)
    return obligations, mutants


def _attach(mutants, variant):
    """Give each finder mutant's parts a replay through an embedded lookup."""
    for mutant in mutants:
        parts = []
        for part in mutant.obligation.parts:
            text = part.on_model

            def on_model(model, text=text, mutant=mutant):
                lines = text(model) if text else []
                case, cap = getattr(text, "case", None), getattr(text, "cap", None)
                if case is None:
                    return lines
                lookup = R.embed_finder(case, model, cap, getattr(text, "drop", None))
                return R.replay(f"{mutant.name}, embedded", lookup, variant, lines[0])

            parts.append(Part(part.facts, part.goal, on_model))
        mutant.obligation = Obligation(mutant.obligation.name, parts, mutant.obligation.unkeyed)


# ------------------------------------------------------------------------------------------ 3
def drop_within_candidate(n: int = 16):
    """With EAGLE, the drop after the peek margin brings full attention (coarse and fine-grained)
    and sliding windows back to at most the candidate (kv_cache_utils:eagle_proof_margin)."""
    goal = lambda sc, st, ps, con: z3.And([  # noqa: E731
        z3.Implies(z3.And(s.drop, g.kind != MAMBA), whole(s.result).le(s.candidate)) for s, g in zip(ps.steps, sc.groups)
    ])
    obligations = [F.peek(FULL, n, False), F.peek(FULL, n, True), F.peek(SW, n)]
    peek_key = lambda sc, con: con.facts(ranges=False, relational=False)  # noqa: E731
    obligations.append(loop_family("T3 loop: every dropped lookup <= candidate", goal, counts=(2, 3),
                                   key_of=peek_key, contracts=dict(peek=False)))
    mutants = [F.finder_mutants(n)[name] for name in ("whole-block-margin", "double-margin", "sw-ignores-drop")]
    _attach(mutants[:1], "eagle-margin-whole-block")
    _attach(mutants[1:], None)
    return obligations, mutants


# ------------------------------------------------------------------------------------------ 4
def terminates(n: int = 16):
    """The fixed-point loop ends within floor(min(M, units)/A) + 2 passes and returns a fixed
    point (HybridKVCacheCoordinator.find_longest_cache_hit's `while True`, `simple` exit)."""
    rank = lambda sc, st, ps, con: z3.Or(ps.stops, z3.And(ps.hit.units >= 0, ps.hit.units < st.hit.units))  # noqa: E731
    fixed = lambda sc, st, ps, con: z3.Implies(  # noqa: E731
        z3.And(ps.stops, z3.Not(simple_exit(sc))), z3.And(ps.candidate.ge(st.hit), st.hit.ge(ps.candidate)))
    ranges_key = lambda sc, con: [f for f in con.facts(peek=False, relational=False)]  # noqa: E731
    obligations = [
        loop_family("T4a rank: a later pass stops or shortens the hit", rank, firsts=(False,),
                    key_of=ranges_key, contracts=dict(ranges=False)),
        loop_family("T4b exit: the exiting pass kept the hit", fixed, key_of=ranges_key, contracts=dict(ranges=False)),
        simple_exit_obligation(VLLM, 2),
    ]
    mutants = [
        Mutant("stop only when the candidate grows", _replayed(loop_family(
            "T4a mutant", rank, firsts=(False,), rules=Rules(stop_strict=True), counts=(2,)),
            RM.stop_strict_replay())),
        Mutant("simple exit with 3 groups", _replayed(simple_exit_obligation(Rules(simple_any_count=True), 3),
                                                      RM.simple_exit_replay())),
    ]
    return obligations, mutants


def _replayed(ob: Obligation, on_model) -> Obligation:
    """The obligation with every part's counterexample replayed by ``on_model``."""
    return Obligation(ob.name, [Part(p.facts, p.goal, on_model) for p in ob.parts], ob.unkeyed)


def simple_exit_obligation(rules: Rules, num: int) -> Obligation:
    """The `simple` exit (full attention + one group, one pass) is a fixed point: one more pass
    keeps the hit, for windows wider than one block (see the finding for one-token windows)."""
    parts, unkeyed = [], []
    for a in ALIGNMENTS:
        for confirm in (True, False):
            sc, st, ps, con, facts = L.setup(num, f"se{num}{a}{int(confirm)}_", True, a, rules, confirm=confirm)
            after = one_pass(sc, state_after(ps), rules, 1, finder=con.finder())
            facts += [z3.Implies(g.kind == SW, g.need >= 1) for g in sc.groups] + L.sorted_facts(sc)
            goal = z3.Implies(z3.And(simple_exit(sc, rules), z3.Not(ps.candidate.ge(st.hit))),
                              z3.And(after.candidate.ge(ps.hit), ps.hit.ge(after.candidate)))
            (parts if confirm else unkeyed).append(Part(facts + con.facts(), goal))
    return Obligation(f"T4c simple exit is a fixed point ({num} groups)", parts, unkeyed)


# ------------------------------------------------------------------------------------------ 5
def monotone(n: int = 16):
    """Without EAGLE the reconciled hit is the greatest fixed point below the verified prefix,
    so it is monotone in the cache; with EAGLE it is not: Z3's counterexample is replayed on vLLM
    (HybridKVCacheCoordinator.find_longest_cache_hit's eagle_verified bookkeeping)."""
    obligations = [gfp_family(step) for step in ("O0 first pass keeps y", "O1 later pass keeps y",
                                                  "O2 exit is a fixed point", "O3 fixed points grow with the cache")]
    mutants = [F.finder_mutants(n)[name] for name in ("mamba-leftmost", "probe-low-first")]
    _attach(mutants, None)
    return obligations, mutants


def gfp_family(step: str) -> Obligation:
    parts, unkeyed = [], []
    for num in GROUP_COUNTS[:2]:
        for a in ALIGNMENTS:
            first = not step.startswith("O1")
            sc, st, ps, con, facts = L.setup(num, f"g{step[:2]}{num}{a}_", first, a)
            y = z3.Int(f"g{step[:2]}{num}{a}_y")
            if step.startswith("O3"):
                other = one_pass(sc, st, VLLM, finder=con.finder("c"))
                premise = L.acceptable(sc, con, "b", y, ps.found)
                goal = z3.Implies(premise, L.acceptable(sc, con, "c", y, other.found))
            elif step.startswith("O2"):
                goal = z3.Implies(ps.stops, z3.And(z3.Not(ps.hit.frac), L.acceptable(sc, con, "b", ps.hit.units, ps.found)))
            else:
                found = ps.found if first else st.found
                premise = z3.And(L.acceptable(sc, con, "b", y, found), whole(y).le(st.hit))
                goal = z3.Implies(premise, whole(y).le(ps.hit))
            facts += L.sorted_facts(sc)
            parts.append(Part(facts + [z3.Not(sc.eagle)] + con.facts(), goal))
            unkeyed.append(Part(facts + con.facts(), goal))
    return Obligation(f"T5 no EAGLE: {step}", parts, unkeyed)


def eagle_finding(n: int = 6) -> list:
    found = R.eagle_monotonicity_counterexample(n)
    if found is None:
        return ["T5 with EAGLE: no counterexample within the bound"]
    less, more, small, big = found
    lines = [f"T5 with EAGLE is refuted: adding cache entries shrinks the hit ({small} -> {big} in the encoding)"]
    lines += R.replay("  smaller cache", less)
    lines += R.replay("  larger cache", more)
    return lines


def simple_exit_finding(n: int = 8) -> list:
    found = R.simple_exit_counterexample(n)
    if found is None:
        return []
    lookup, hit, after = found
    return [f"T4 finding: with a one-token window the `simple` exit returns {hit}; one more pass would give {after}"] + \
        R.replay("  simple exit", lookup)
