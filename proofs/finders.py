"""Layer A: the per-type finders' contracts, proved by bounded model checking over every cache of
``N`` hash units, every block size in BLOCK_UNITS and every alignment a coordinator can push.
proofs/loop.py proves the hybrid loop from these contracts alone, for unbounded integers."""

from __future__ import annotations

import z3

from kvspec.proofs.core import Mutant, Obligation, Part
from kvspec.proofs.encoding import (
    ALIGNMENTS,
    BLOCK_UNITS,
    FULL,
    KIND_NAMES,
    MAMBA,
    SW,
    VLLM,
    Group,
    Len,
    Rules,
    Scenario,
    eagle_margin,
    find,
    fine_grained,
    zmin,
)


def contexts(kind: int, inside: bool = True):
    """Every (block units k, alignment a, partial hits) a coordinator can push to this finder:
    the lcm of block sizes (a multiple of k), or the hash unit with partial hits, which no sliding
    window longer than a unit allows. ``inside=False``: every other combination."""
    for k in BLOCK_UNITS:
        for a in ALIGNMENTS:
            for partial in (False, True):
                ok = (a % k == 0) if not partial else (a == 1 and (kind != SW or k == 1))
                if ok == inside:
                    yield k, a, partial


class Case:
    """One finder of a given kind, block size and alignment over a symbolic window and cache."""

    def __init__(self, tag: str, kind: int, n: int, k: int, a: int, partial: bool):
        self.kind, self.n, self.k, self.a, self.partial = kind, n, k, a, partial
        self.tag = f"{tag}{k}_{a}_{int(partial)}_"
        self.need, self.nh = z3.Int(f"{self.tag}need"), z3.Int(f"{self.tag}nh")
        self.bits = self.cache("")

    def cache(self, suffix: str) -> tuple:
        return tuple(z3.Bool(f"{self.tag}{suffix}c{j}") for j in range(self.n))

    def group(self, bits=None) -> Group:
        return Group(self.kind, self.k, self.need, z3.BoolVal(False), bits or self.bits)

    def scenario(self, bits=None) -> Scenario:
        m = Len(z3.IntVal(0), z3.BoolVal(False))
        return Scenario(self.n, (self.group(bits),), self.nh, m, z3.BoolVal(True), z3.BoolVal(self.partial))

    def find(self, reach, drop, rules: Rules = VLLM, bits=None):
        return find(self.scenario(bits), self.group(bits), reach, drop, self.a, rules)

    def margin(self, rules: Rules = VLLM):
        return eagle_margin(self.scenario(), self.group(), rules, z3.BoolVal(self.partial))

    def facts(self, *caches) -> list:
        facts = [self.need >= 0, self.nh >= 0, self.nh <= self.n]
        if self.kind != SW:
            facts.append(self.need == 0)
        for bits in (self.bits, *caches):
            facts += [z3.Implies(j >= self.nh, z3.Not(b)) for j, b in enumerate(bits)]
        return facts

    def describe(self, model) -> str:
        ev = lambda t: model.eval(t, model_completion=True)  # noqa: E731
        cached = [j for j, b in enumerate(self.bits) if z3.is_true(ev(b))]
        return (
            f"{KIND_NAMES[self.kind]} block={self.k} units, alignment={self.a}, partial={self.partial}, "
            f"need={ev(self.need)}, units={ev(self.nh)}, cached={cached}"
        )


def _text(case: Case, extra):
    def on_model(model):
        values = ", ".join(f"{name}={model.eval(t, model_completion=True)}" for name, t in extra)
        return [f"finder counterexample: {case.describe(model)}; {values}"]

    on_model.case, on_model.cap = case, extra[0][1] if extra else None  # for replays
    on_model.drop = next((t for name, t in extra if name == "drop"), z3.BoolVal(extra[0][0] == "candidate"))
    return on_model


def family(name: str, kind: int, n: int, build, key=None, key_is_context: bool = False) -> Obligation:
    """One obligation over every context; ``build(case) -> (facts, goal, on_model)``. The key
    premise is ``key(case)`` (dropped in ``unkeyed``) or, with ``key_is_context``, the context
    itself (``unkeyed`` then holds the combinations no coordinator pushes)."""
    parts, unkeyed = [], []
    for k, a, partial in contexts(kind):
        facts, goal, on_model = build(Case(name[:3], kind, n, k, a, partial))
        extra = key(Case(name[:3], kind, n, k, a, partial)) if key else []
        parts.append(Part(facts + extra, goal, on_model))
        if key:
            unkeyed.append(Part(facts, goal, on_model))
    if key_is_context:
        for k, a, partial in contexts(kind, inside=False):
            facts, goal, on_model = build(Case(name[:3], kind, n, k, a, partial))
            unkeyed.append(Part(facts, goal, on_model))
    return Obligation(name, parts, unkeyed)


def range_and_alignment(kind: int, n: int, rules: Rules = VLLM) -> list[Obligation]:
    """F1, F2: 0 <= hit <= min(max_length, units) and hit % alignment == 0 (every finder in
    vllm.v1.core.single_type_kv_cache_manager)."""
    x, drop = z3.Int("ra_x"), z3.Bool("ra_drop")

    def build(case):
        hit = case.find(x, drop, rules)
        on_model = _text(case, [("max_length", x), ("drop", drop), ("hit", hit)])
        return case.facts() + [x >= 0], z3.And(hit >= 0, hit <= x, hit <= case.nh), on_model

    def build_aligned(case):
        facts, _, on_model = build(case)
        return facts, case.find(x, drop, rules) % case.a == 0, on_model

    name = KIND_NAMES[kind]
    # Full attention and sliding windows round down to any alignment; Mamba needs the context.
    def build_both(case):
        facts, bounded, on_model = build(case)
        return facts[:-1], z3.And(bounded, build_aligned(case)[1]), on_model

    obligations = [
        family(f"F1-2 {name}: 0 <= hit <= min(max_length, units), aligned", kind, n, build_both,
               key=lambda case: [x >= 0]),
    ]
    if kind == MAMBA:  # the only finder whose alignment rests on what the coordinator pushes
        obligations.append(family(f"F2 {name}: aligned in context", kind, n, build_aligned, key_is_context=True))
    return obligations


def peek(kind: int, n: int, fine: bool | None = None, rules: Rules = VLLM) -> Obligation:
    """F3: an EAGLE lookup at ``min(candidate + eagle_proof_margin, units)`` drops back to at most
    the candidate (vllm.v1.core.kv_cache_utils:eagle_proof_margin)."""
    c, drop = z3.Int("pk_c"), z3.Bool("pk_drop")
    label = KIND_NAMES[kind] + {None: "", True: " fine-grained", False: " coarse"}[fine]

    def build(case):
        hit = case.find(zmin(c + case.margin(rules), case.nh), drop, rules)
        facts = case.facts() + [c >= 0]
        if fine is not None and fine_grained(case.k, case.a) != fine:
            facts.append(z3.BoolVal(False))
        return facts, hit <= c, _text(case, [("candidate", c), ("hit", hit)])

    ob = family(f"F3 {label}: dropped hit <= candidate", kind, n, build, key=lambda case: [drop])
    # Contexts outside the sub-case (fine or coarse) are not part of it.
    keep = [i for i, p in enumerate(ob.parts) if not any(z3.is_false(f) for f in p.facts)]
    return Obligation(ob.name, [ob.parts[i] for i in keep], [ob.unkeyed[i] for i in keep])


def monotone(kind: int, n: int, rules: Rules = VLLM) -> Obligation:
    """F4: without the drop a hit never shrinks when the cap grows or entries are added."""
    x, y, no = z3.Int("mo_x"), z3.Int("mo_y"), z3.BoolVal(False)

    def build(case):
        more = case.cache("more")
        less_hit, more_hit = case.find(x, no, rules), case.find(y, no, rules, more)
        facts = case.facts(more) + [x >= 0, x <= y] + [z3.Implies(a, b) for a, b in zip(case.bits, more)]
        return facts, less_hit <= more_hit, _text(case, [("cap", x), ("cap'", y), ("hit", less_hit), ("hit'", more_hit)])

    return family(f"F4 {KIND_NAMES[kind]}: monotone in cap and cache", kind, n, build)


def confirms(kind: int, n: int, rules: Rules = VLLM, min_need: int = 0, first_drop: bool | None = None) -> Obligation:
    """F5: a hit is confirmed at its own length without the drop (what makes the `simple` exit
    a fixed point); ``min_need``: windows of more than ``min_need`` blocks."""
    x, y, drop, again_drop = z3.Int("cf_x"), z3.Int("cf_y"), z3.Bool("cf_drop"), z3.Bool("cf_again")

    def build(case):
        first = case.find(x, drop, rules)
        again = case.find(y, again_drop, rules)
        facts = case.facts() + [x >= 0] + ([case.need >= min_need] if kind == SW else [])
        facts += [] if first_drop is None else [drop == first_drop]
        return facts, again >= first, _text(case, [("cap", x), ("drop", drop), ("hit", first), ("again", again)])

    def key(case):  # looked up again at exactly its hit, and (a window) without the drop
        return [y == case.find(x, drop, rules)] + ([] if kind == MAMBA else [z3.Not(again_drop)])

    suffix = " (windows of 2+ tokens)" if kind == SW and min_need else ""
    suffix += " (no drop first)" if first_drop is False else ""
    return family(f"F5 {KIND_NAMES[kind]}: hit confirmed at itself{suffix}", kind, n, build, key=key)


KINDS = (FULL, SW, MAMBA)


def finder_mutants(n: int) -> dict[str, Mutant]:
    """Weakened finders, each against the contract it breaks."""

    def pick(obligations, prefix):
        return next(o for o in obligations if o.name.startswith(prefix))

    return {
        "skip-round-down": Mutant(
            "full skips hit -= hit % alignment", pick(range_and_alignment(FULL, n, Rules(skip_round_down=True)), "F1-2")
        ),
        "mamba-unaligned": Mutant(
            "coarse Mamba state not aligned", pick(range_and_alignment(MAMBA, n, Rules(mamba_unaligned=True)), "F1-2")
        ),
        "ignore-cap": Mutant(
            "full scans past max_length", pick(range_and_alignment(FULL, n, Rules(ignore_cap=True)), "F1-2")
        ),
        "whole-block-margin": Mutant(
            "eagle-margin-whole-block: fine-grained peek of a whole block",
            peek(FULL, n, True, Rules(whole_block_margin=True)),
        ),
        "double-margin": Mutant("peek margin two blocks", peek(SW, n, None, Rules(double_margin=True))),
        "sw-ignores-drop": Mutant("sliding window ignores the drop", peek(SW, n, None, Rules(sw_ignores_drop=True))),
        "mamba-leftmost": Mutant("Mamba takes the leftmost state", monotone(MAMBA, n, Rules(mamba_leftmost=True))),
        "probe-low-first": Mutant("fine probe from low to high", monotone(FULL, n, Rules(probe_low_first=True))),
    }
