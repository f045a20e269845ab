"""The coordinators in Z3, over the groups' finders of proofs/encoding.py: the passes of vLLM's
hybrid coordinator to its fixed point, the unitary coordinator, and the Mooncake store's
single-group path."""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvspec.proofs.encoding import (
    FULL,
    MAMBA,
    VLLM,
    Len,
    Rules,
    Scenario,
    alignment,
    drops,
    eagle_margin,
    find,
    pick,
    whole,
    zmin,
)


@dataclass(frozen=True)
class Step:
    """One lookup the loop made: pass, spec-group index, candidate before it, result."""

    pass_no: int
    index: int
    active: z3.BoolRef
    looked_up: z3.BoolRef
    drop: z3.BoolRef
    candidate: Len
    result: z3.ArithRef


@dataclass(frozen=True)
class LoopState:
    """What the loop carries between passes: the candidate bound ``hit`` (L in vLLM), each spec
    group's last result, whether the first pass is done, and which groups have dropped."""

    hit: Len
    found: tuple
    seen: z3.BoolRef
    verified: tuple


@dataclass(frozen=True)
class Pass:
    steps: tuple[Step, ...]
    candidate: Len  # the candidate at the end of the pass
    found: tuple
    verified: tuple
    stops: z3.BoolRef  # the loop exits after this pass
    hit: Len  # the hit the loop carries on with (or returns)


def initial_state(sc: Scenario) -> LoopState:
    num = len(sc.groups)
    return LoopState(sc.m, (z3.IntVal(0),) * num, z3.BoolVal(False), (z3.BoolVal(False),) * num)


def symbolic_state(sc: Scenario, tag: str) -> LoopState:
    """An arbitrary state after the first pass, for proofs by induction over passes."""
    num = len(sc.groups)
    return LoopState(
        Len(z3.Int(f"{tag}hit"), z3.BoolVal(False)),
        tuple(z3.Int(f"{tag}found{i}") for i in range(num)),
        z3.BoolVal(True),
        tuple(z3.Bool(f"{tag}verified{i}") for i in range(num)),
    )


def simple_exit(sc: Scenario, rules: Rules = VLLM):
    """``simple``: two spec groups, full attention first: one pass is enough."""
    first_full = z3.BoolVal(True) if rules.simple_any_order else sc.groups[0].kind == FULL
    return z3.And(z3.BoolVal(len(sc.groups) == 2 or rules.simple_any_count), first_full)


def one_pass(sc: Scenario, st: LoopState, rules: Rules = VLLM, pass_no: int = 0, finder=None) -> Pass:
    """One pass of reference/lookup.py:reconcile over the spec groups in order; ``finder`` may
    replace the bit-level finders (proofs/loop.py's contracts)."""
    a, num = alignment(sc), len(sc.groups)
    cand, found, verified, steps = st.hit, list(st.found), list(st.verified), []
    for idx, g in enumerate(sc.groups):
        reuse = z3.And(g.kind == FULL, st.seen)  # full attention is looked up once
        drop = z3.And(drops(sc, g), z3.Not(verified[idx]))
        peek = drop if rules.mamba_margin else z3.And(drop, g.kind != MAMBA)
        reach = z3.If(peek, zmin(cand.units + eagle_margin(sc, g, rules), sc.nh), cand.units)
        if finder is None:
            result = find(sc, g, reach, drop, a, rules)
        else:
            result = finder(idx, g, reach, drop, cand, eagle_margin(sc, g, VLLM))
        steps.append(Step(pass_no, idx, z3.BoolVal(True), z3.Not(reuse), drop, cand, result))
        shrunk = whole(result).lt(cand)
        for j in range(num):
            kept = z3.If(z3.And(z3.Not(drop), shrunk), False, verified[j])
            verified[j] = z3.If(reuse, verified[j], z3.Or(drop, kept) if j == idx else kept)
        found[idx] = z3.If(reuse, found[idx], result)
        shorter = whole(found[idx]).lt(cand)
        cand = pick(reuse, pick(shorter, whole(found[idx]), cand), whole(result))
    stops = z3.Or(st.hit.lt(cand) if rules.stop_strict else cand.ge(st.hit), simple_exit(sc, rules))
    return Pass(tuple(steps), cand, tuple(found), tuple(verified), stops, pick(cand.ge(st.hit), st.hit, cand))


@dataclass(frozen=True)
class Run:
    hit: Len
    steps: tuple[Step, ...]
    stopped: z3.BoolRef  # the loop exited within the unrolled passes
    passes_used: z3.ArithRef
    after: Len  # the candidate one more pass would compute from the exit state


def reconcile(sc: Scenario, passes: int, rules: Rules = VLLM, finder=None) -> Run:
    """reference/lookup.py:reconcile (HybridKVCacheCoordinator.find_longest_cache_hit), unrolled
    ``passes`` times, plus one pass past the exit to test that the exit is a fixed point."""
    st, stopped, used, steps = initial_state(sc), z3.BoolVal(False), z3.IntVal(0), []
    for p in range(passes + 1):
        ps = one_pass(sc, st, rules, p, finder)
        if p == passes:
            return Run(st.hit, tuple(steps), stopped, used, ps.candidate)
        live = z3.And(z3.Not(stopped), p < passes)
        steps += [Step(s.pass_no, s.index, live, s.looked_up, s.drop, s.candidate, s.result) for s in ps.steps]
        st = LoopState(
            pick(stopped, st.hit, ps.hit),
            tuple(z3.If(stopped, o, v) for o, v in zip(st.found, ps.found)),
            z3.BoolVal(True),
            tuple(z3.If(stopped, o, v) for o, v in zip(st.verified, ps.verified)),
        )
        used = used + z3.If(stopped, 0, 1)
        stopped = z3.Or(stopped, ps.stops)
    raise AssertionError("unreachable")


def unitary(sc: Scenario, rules: Rules = VLLM) -> Len:
    """UnitaryKVCacheCoordinator: one group whose block is the hash unit (vLLM asserts it),
    aligned to its block, the drop iff EAGLE, and no peek margin."""
    g = sc.groups[0]
    return whole(find(sc, g, sc.m.units, sc.eagle, g.k, rules))


def mooncake_single(sc: Scenario, rules: Rules = VLLM) -> Len:
    """MooncakeStoreCoordinator._find_hit_blocks with one spec group: the connector's alignment
    (the hash unit with partial hits, else the block), the drop, no peek margin."""
    g = sc.groups[0]
    return whole(find(sc, g, sc.m.units, drops(sc, g), alignment(sc), rules))
