"""Layer B: the hybrid fixed-point loop (HybridKVCacheCoordinator.find_longest_cache_hit, and the
Mooncake store's copy of it) proved over *contracts* of the finders instead of their bits.

Each finder call becomes a fresh integer constrained only by what proofs/finders.py proves of
every finder at bound N (F1-F5). Properties of one pass are proved from an arbitrary state
satisfying an inductive invariant, so they hold for any number of passes and, since no cache
bit appears, for any number of hash units: only the finder lemmas are bounded.
"""

from __future__ import annotations

from itertools import combinations

import z3

from kvspec.proofs.coordinators import LoopState, initial_state, one_pass, symbolic_state
from kvspec.proofs.encoding import FULL, MAMBA, SW, VLLM, Len, Rules, Scenario, scenario, well_formed, whole, zmin


class Contracts:
    """Abstract finders: every call is recorded; ``facts()`` instantiates the finder lemmas at
    every call and every pair of calls to one spec group (sound: only used points matter)."""

    def __init__(self, sc: Scenario, a: int, confirm: bool = True):
        # The loop only needs one positive alignment shared by all finders; which one is the
        # finders' business (proofs/finders.py), so the loop is proved for each one vLLM uses.
        self.sc, self.calls, self.confirm, self.a = sc, [], confirm, a

    def finder(self, run: str = "b"):
        def call(idx, g, reach, drop, cand, margin):
            r = z3.Int(f"{run}_r{len(self.calls)}")
            self.calls.append((run, idx, g, reach, drop, r, cand, margin))
            return r

        return call

    def at(self, run: str, idx: int, reach):
        """One more call, without the drop (for fixed-point arguments)."""
        g = self.sc.groups[idx]
        return self.finder(run)(idx, g, reach, z3.BoolVal(False), None, None)

    def facts(self, peek: bool = True, ranges: bool = True, relational: bool = True) -> list:
        nh, facts = self.sc.nh, []
        for _, _, g, reach, drop, r, cand, margin in self.calls:
            if ranges:  # F1, F2
                facts += [r >= 0, r <= nh, r % self.a == 0, z3.Implies(reach >= 0, r <= reach)]
            if peek and cand is not None:  # F3, at the vLLM margin only
                exact = reach == zmin(cand.units + margin, nh)
                facts.append(z3.Implies(z3.And(drop, g.kind != MAMBA, exact), r <= cand.units))
        if relational:
            facts += self._pairs()
        return facts

    def _pairs(self) -> list:
        facts = []
        for one, two in combinations(self.calls, 2):
            for (run1, i1, g, x1, d1, r1, *_), (run2, i2, _, x2, d2, r2, *_) in ((one, two), (two, one)):
                if i1 != i2:
                    continue
                plain = z3.And(z3.Not(d1), z3.Not(d2))
                if run1 == run2 or run1 < run2:  # F4; across runs only from the smaller cache
                    facts.append(z3.Implies(z3.And(plain, x1 <= x2), r1 <= r2))
                if run1 == run2:
                    facts.append(z3.Implies(z3.And(d1 == d2, x1 == x2), r1 == r2))
                    if self.confirm:  # F5: Mamba; windows wider than one block, or no drop first
                        confirmed = z3.Or(g.kind == MAMBA, z3.And(g.kind == SW, z3.Or(g.need >= 1, z3.Not(d1))))
                        facts.append(z3.Implies(z3.And(confirmed, z3.Not(d2), x2 == r1), r2 >= r1))
        return facts


def invariant(sc: Scenario, st: LoopState, a) -> z3.BoolRef:
    """After the first pass: the carried hit is within the cap, the units and every full
    attention group's verified hit, and aligned."""
    hit = st.hit
    full = [z3.Implies(g.kind == FULL, z3.And(hit.units <= f, f >= 0, f % a == 0)) for g, f in zip(sc.groups, st.found)]
    return z3.And(hit.units >= 0, z3.Not(hit.frac), hit.le(sc.m), hit.units <= sc.nh, hit.units % a == 0, *full)


def sorted_facts(sc: Scenario) -> list:
    return [z3.Implies(a.kind != FULL, b.kind != FULL) for a, b in zip(sc.groups, sc.groups[1:])]


def setup(num: int, tag: str, first: bool, a: int, rules: Rules = VLLM, confirm: bool = True, cap_nonneg=True):
    """A scenario, an abstract pass from the initial state (``first``) or from any invariant
    state, and its contracts; returns (sc, state, pass, contracts, assumptions)."""
    sc = scenario(tag, num, 0)
    con = Contracts(sc, a, confirm)
    st = initial_state(sc) if first else symbolic_state(sc, tag)
    ps = one_pass(sc, st, rules, finder=con.finder())
    facts = well_formed(sc, sorted_full_first=False, bounded=False, cap_nonneg=cap_nonneg)
    if not first:
        facts.append(invariant(sc, st, con.a))
    return sc, st, ps, con, facts


def verified_prefix(sc: Scenario, found) -> Len:
    """The attention-verified prefix: the cap, cut by every full-attention group's hit."""
    out = sc.m
    for g, f in zip(sc.groups, found):
        shorter = z3.And(g.kind == FULL, whole(f).lt(out))
        out = Len(z3.If(shorter, f, out.units), z3.If(shorter, False, out.frac))
    return out


def acceptable(sc: Scenario, con: Contracts, run: str, y, found) -> z3.BoolRef:
    """``y`` is a fixed point of the no-EAGLE loop: within the attention-verified prefix, and
    every other group's finder keeps it."""
    keeps = [z3.Implies(g.kind != FULL, con.at(run, i, y) >= y) for i, g in enumerate(sc.groups)]
    return z3.And(y >= 0, whole(y).le(verified_prefix(sc, found)), *keeps)
