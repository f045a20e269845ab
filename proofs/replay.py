"""Counterexamples as concrete lookups, found by searching the encoding, for the runner to replay
on the reference model and on real vLLM (kvspec/gate/proof_replays.py), clean and with
impl/broken.py's variant re-introducing a bug."""

from __future__ import annotations

import math
from dataclasses import replace

import z3

from kvspec.proofs.concrete import KINDS, UNIT, Lookup, tokens
from kvspec.proofs.coordinators import reconcile
from kvspec.proofs.core import check
from kvspec.proofs.counterexamples import LookupReplay
from kvspec.proofs.encoding import FULL, MAMBA, SW, Group, Len, Rules, Scenario
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting

SEED_M = 64  # tokens: the seed's max_length (PR #48361)


def replay(title: str, lookup: Lookup, variant: str | None = None, note: str = "", loop_exits: bool = False) -> list:
    """The lookup as a counterexample for the runner to replay (proofs/counterexamples.py)."""
    return [LookupReplay(title, lookup, variant, note, loop_exits)]


# ----------------------------------------------------------------------------- concrete searches
def pinned(tag: str, n: int, kinds, ks, needs=None, tags_bits=("",)) -> tuple[Scenario, list]:
    """A scenario with fixed kinds and block sizes, symbolic cache, cap and units."""
    needs = needs or [0] * len(kinds)
    caches = []
    for t in tags_bits:
        caches.append(tuple(
            Group(kind, k, z3.IntVal(need), z3.BoolVal(False), tuple(z3.Bool(f"{tag}{t}c{i}_{j}") for j in range(n)))
            for i, (kind, k, need) in enumerate(zip(kinds, ks, needs))
        ))
    m, nh = Len(z3.Int(f"{tag}m"), z3.BoolVal(False)), z3.Int(f"{tag}nh")
    scs = [Scenario(n, groups, nh, m, z3.BoolVal(True), z3.BoolVal(False)) for groups in caches]
    facts = [nh >= 0, nh <= n, m.units >= 0]
    for sc in scs:
        facts += [z3.Implies(j >= nh, z3.Not(b)) for g in sc.groups for j, b in enumerate(g.bits)]
    return scs, facts


def lookup_from(model, sc: Scenario, path: str = "hybrid") -> Lookup:
    groups = []
    for g in sc.groups:
        block = g.k * UNIT
        window = g.need.as_long() * block + 1 if g.kind == SW else None
        groups.append(CacheGroup(KINDS[g.kind], block, window=window))
    setting = LookupSetting(tuple(groups), UNIT, True, False)
    cached = frozenset(
        (gid, j) for gid, g in enumerate(sc.groups) for j, b in enumerate(g.bits)
        if z3.is_true(model.eval(b, model_completion=True))
    )
    nh = model.eval(sc.nh, model_completion=True).as_long()
    return Lookup(path, setting, CacheState(nh, cached), tokens(model, sc.m))


def seed_counterexample(n: int = 16):
    """The Mamba-margin mutant's counterexample with the seed's groups (full 16 + Mamba 16, hash
    16, EAGLE, nothing annotated) and cap 64: the mutant adopts a Mamba state past the
    full-attention verified prefix while the rule's own answer is 48."""
    (sc,), facts = pinned("seed", n, (FULL, MAMBA), (1, 1))
    clean, bad = reconcile(sc, 1), reconcile(sc, 1, Rules(mamba_margin=True))
    full_verified = bad.steps[0].result
    facts += [sc.m.units == SEED_M // UNIT, sc.nh == SEED_M // UNIT, clean.hit.units == 3]
    facts += [bad.hit.units > full_verified]
    outcome = check(facts)
    if outcome.status != "sat":
        return None
    m = outcome.model
    return lookup_from(m, sc), tokens(m, clean.hit), tokens(m, bad.hit)


def eagle_monotonicity_counterexample(n: int = 6):
    """Two caches, one a superset of the other, where the EAGLE hybrid hit shrinks (window of
    one block + Mamba, both dropping)."""
    (less, more), facts = pinned("mono", n, (SW, MAMBA), (1, 1), needs=(1, 0), tags_bits=("a", "b"))
    for g, h in zip(less.groups, more.groups):
        facts += [z3.Implies(x, y) for x, y in zip(g.bits, h.bits)]
    passes = n + 2  # T4's bound: floor(min(M, units) / A) + 2 passes, A = 1 here
    small, big = reconcile(less, passes), reconcile(more, passes)
    facts += [small.hit.units > big.hit.units, small.stopped, big.stopped]
    outcome = check(facts)
    if outcome.status != "sat":
        return None
    m = outcome.model
    return lookup_from(m, less), lookup_from(m, more), tokens(m, small.hit), tokens(m, big.hit)


def simple_exit_counterexample(n: int = 8):
    """Full attention + a one-token window, EAGLE: the `simple` exit returns a hit that one more
    pass would shorten (the window group's dropped hit is not confirmed without the drop)."""
    (sc,), facts = pinned("simple", n, (FULL, SW), (1, 1), needs=(0, 0))
    run = reconcile(sc, 1)
    facts += [run.stopped, run.after.units < run.hit.units]
    outcome = check(facts)
    if outcome.status != "sat":
        return None
    m = outcome.model
    return lookup_from(m, sc), tokens(m, run.hit), tokens(m, run.after)


def embed_finder(case, model, cap, drop=None) -> Lookup:
    """A finder-level counterexample as a lookup: the finder's group first (annotated, so it alone
    drops), and a fully cached Mamba companion chosen to give the same alignment."""
    kind, k, a, partial = case.kind, case.k, case.a, case.partial
    ev = lambda t: model.eval(t, model_completion=True)  # noqa: E731
    companions = [c for c in (2, 3, 4, 1) if partial or math.lcm(k, c) == a]
    comp = next((c for c in companions if not (kind == MAMBA and c == k) and (not partial or c > 1)), 4)
    block = k * UNIT
    window = ev(case.need).as_long() * block + 1 if kind == SW else None
    groups = (CacheGroup(KINDS[kind], block, window=window, is_eagle_group=True), CacheGroup(Kind.MAMBA, comp * UNIT))
    nh = ev(case.nh).as_long()
    cached = {(0, j) for j, b in enumerate(case.bits) if z3.is_true(ev(b))} | {(1, j) for j in range(nh)}
    eagle = drop is None or z3.is_true(ev(drop))
    groups = (replace(groups[0], is_eagle_group=eagle), groups[1])
    setting = LookupSetting(groups, UNIT, eagle, partial)
    return Lookup("hybrid", setting, CacheState(nh, frozenset(cached)), ev(cap).as_long() * UNIT)
