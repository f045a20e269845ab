"""Symbolic mirror of reference/lookup.py's finders and hybrid loop, as z3 terms over a bounded
cache of ``N`` hash units (bounded model checking).

Lengths are counted in hash units: every divisor in a lookup is a multiple of the hash unit
``u`` and every amount added to a length is one too, so a lookup over tokens is ``u`` times the
lookup over units, except for the cap ``M`` itself, which need not be a multiple of ``u``. A
length is therefore a pair (whole units, "plus a fraction of a unit"), and only ``M`` carries the
fraction (proofs/hits.py proves the scaling arithmetic for unbounded integers).

Block sizes are ``k`` units with ``k`` in BLOCK_UNITS. Products and quotients by ``k`` or by the
alignment are If-chains over their few possible values, so every term stays linear; every
divisor is positive, where z3's Euclidean division and Python's floor division agree.

``Rules`` switches a rule to a weakened variant (a proof mutant); the default is vLLM's.
proofs/finders.py proves the finders' contracts over these terms; proofs/loop.py reuses
``one_pass`` with the finders abstracted; ``reconcile`` (unrolled) is what counterexample
searches and tests/test_proofs.py's agreement check with reference/lookup.py run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import z3

from kvspec.spec.drafter import DrafterPolicy

FULL, SW, MAMBA = 0, 1, 2
KIND_NAMES = {FULL: "full", SW: "sliding_window", MAMBA: "mamba"}
BLOCK_UNITS = (1, 2, 3, 4)
ALIGNMENTS = tuple(sorted({math.lcm(*c) for r in range(1, 5) for c in combinations(BLOCK_UNITS, r)}))


@dataclass(frozen=True)
class Rules:
    """vLLM's rules (all False) or one weakened rule per mutant."""

    mamba_margin: bool = False  # #43559: Mamba gets the EAGLE peek margin
    whole_block_margin: bool = False  # eagle_proof_margin ignores fine-grained lookups
    double_margin: bool = False  # the peek margin is two units wide
    sw_ignores_drop: bool = False  # SlidingWindowManager neither wants nor pops the peek block
    skip_round_down: bool = False  # FullAttentionManager skips `hit -= hit % alignment`
    mamba_unaligned: bool = False  # coarse MambaManager skips the alignment of the state
    ignore_cap: bool = False  # FullAttentionManager scans past max_length
    simple_any_order: bool = False  # `simple` exit without checking that full attention is first
    simple_any_count: bool = False  # `simple` exit whenever full attention is first
    stop_strict: bool = False  # the loop stops only when the candidate grows
    mamba_leftmost: bool = False  # MambaManager takes the leftmost state, not the rightmost
    probe_low_first: bool = False  # fine-grained probe inside a block from low to high


VLLM = Rules()


def cases(term, values, f):
    """``f(v)`` for the value ``v`` that ``term`` takes among ``values``."""
    if isinstance(term, int):
        return f(term)
    values = list(values)
    out = f(values[-1])
    for v in reversed(values[:-1]):
        out = z3.If(term == v, f(v), out)
    return out


def zmin(a, b):
    return z3.If(a <= b, a, b)


@dataclass(frozen=True)
class Len:
    """A length: ``units`` whole hash units, plus part of one more if ``frac`` (only ``M``)."""

    units: z3.ArithRef
    frac: z3.BoolRef

    def ge(self, other: "Len"):
        return z3.Or(self.units > other.units, z3.And(self.units == other.units, z3.Or(self.frac, z3.Not(other.frac))))

    def lt(self, other: "Len"):
        return z3.Not(self.ge(other))

    def le(self, other: "Len"):
        return other.ge(self)


def whole(units) -> Len:
    return Len(units, z3.BoolVal(False))


def pick(cond, a: Len, b: Len) -> Len:
    return Len(z3.If(cond, a.units, b.units), z3.If(cond, a.frac, b.frac))


@dataclass(frozen=True)
class Group:
    """One spec group: equal vLLM groups merged, so ``bits`` is the AND of the members' cache."""

    kind: z3.ArithRef
    k: z3.ArithRef  # block size in hash units
    need: z3.ArithRef  # sliding window: ceil((window - 1) / block_size)
    annotated: z3.BoolRef
    bits: tuple  # bits[j]: hash unit j is cached for the group


@dataclass(frozen=True)
class Scenario:
    n: int  # hash units modelled
    groups: tuple[Group, ...]
    nh: z3.ArithRef  # hash units in the request (len(block_hashes))
    m: Len  # the cap M
    eagle: z3.BoolRef  # use_eagle_block_drop, no lookahead hashes
    allow_partial: z3.BoolRef


def scenario(tag: str, num_groups: int, n: int) -> Scenario:
    groups = tuple(
        Group(
            z3.Int(f"{tag}kind{g}"),
            z3.Int(f"{tag}k{g}"),
            z3.Int(f"{tag}need{g}"),
            z3.Bool(f"{tag}ann{g}"),
            tuple(z3.Bool(f"{tag}c{g}_{j}") for j in range(n)),
        )
        for g in range(num_groups)
    )
    m = Len(z3.Int(f"{tag}m"), z3.Bool(f"{tag}mfrac"))
    return Scenario(n, groups, z3.Int(f"{tag}nh"), m, z3.Bool(f"{tag}eagle"), z3.Bool(f"{tag}partial"))


def well_formed(sc: Scenario, sorted_full_first: bool = True, bounded: bool = True, cap_nonneg: bool = True) -> list:
    """What vLLM guarantees about a lookup's inputs: block sizes are positive multiples of the
    hash unit, the cache holds only the request's units, the cap is non-negative, groups are
    annotated only with the drop in effect, spec groups have distinct specs and full attention
    comes first (verify_and_split_kv_cache_groups)."""
    facts = [sc.nh >= 0] + ([sc.nh <= sc.n] if bounded else []) + ([sc.m.units >= 0] if cap_nonneg else [])
    for g in sc.groups:
        facts += [z3.Or([g.kind == v for v in KIND_NAMES]), z3.Or([g.k == v for v in BLOCK_UNITS]), g.need >= 0]
        facts += [z3.Implies(g.annotated, sc.eagle), z3.Implies(g.kind != SW, g.need == 0)]
        facts += [z3.Implies(j >= sc.nh, z3.Not(b)) for j, b in enumerate(g.bits)]
    for a, b in combinations(sc.groups, 2):
        facts.append(z3.Not(z3.And(a.kind == b.kind, a.k == b.k, z3.Or(a.kind != SW, a.need == 0), b.need == a.need)))
    if sorted_full_first:
        facts += [z3.Implies(a.kind != FULL, b.kind != FULL) for a, b in zip(sc.groups, sc.groups[1:])]
    return facts


# ----------------------------------------------------------------------------- block sizes
def partial_hits(sc: Scenario):
    """kv_cache_utils:partial_hash_hits_enabled, in units (hash unit = 1)."""
    some_long_mamba = z3.Or([z3.And(g.kind == MAMBA, g.k > 1) for g in sc.groups])
    all_fine = z3.And([z3.Or(g.kind != SW, g.k == 1) for g in sc.groups])
    return z3.And(sc.allow_partial, some_long_mamba, all_fine)


def alignment(sc: Scenario):
    """HybridKVCacheCoordinator._cache_hit_alignment_tokens: the hash unit or the lcm."""
    lcm, domain = sc.groups[0].k, BLOCK_UNITS
    for g in sc.groups[1:]:
        lcm_now, dom_now = lcm, domain
        lcm = cases(lcm_now, dom_now, lambda a, g=g: cases(g.k, BLOCK_UNITS, lambda b, a=a: math.lcm(a, b)))
        domain = tuple(sorted({math.lcm(a, b) for a in dom_now for b in BLOCK_UNITS}))
    return z3.If(partial_hits(sc), 1, lcm)


def mul_k(x, k):
    return cases(k, BLOCK_UNITS, lambda v: x * v)


def div(x, d, domain):
    return cases(d, domain, lambda v: x / v)


def mod(x, d, domain):
    return cases(d, domain, lambda v: x % v)


def key_bit(g: Group, i: int):
    """Block ``i`` of the group is cached under the unit that ends it (BlockHashListWithBlockSize)."""
    return cases(g.k, BLOCK_UNITS, lambda v: g.bits[(i + 1) * v - 1] if (i + 1) * v - 1 < len(g.bits) else False)


def fine_grained(k, a):
    return cases(a, ALIGNMENTS, lambda av: cases(k, BLOCK_UNITS, lambda kv: av < kv and kv % av == 0))


# ----------------------------------------------------------------------------- finders
def find_full(sc, g: Group, reach, drop, a, rules: Rules = VLLM):
    """reference/lookup.py:Lookup.find_full (FullAttentionManager.find_longest_cache_hit)."""
    n = sc.n
    cap = div(sc.nh, g.k, BLOCK_UNITS)
    if not rules.ignore_cap:
        cap = zmin(div(reach, g.k, BLOCK_UNITS), cap)
    run, blocks = z3.BoolVal(True), 0
    for i in range(n):
        run = z3.And(run, i < cap, key_bit(g, i))
        blocks = blocks + z3.If(run, 1, 0)
    hit = mul_k(blocks, g.k)
    first, last = hit, zmin(zmin(hit + g.k - 1, div(reach, a, ALIGNMENTS)), sc.nh)
    fine = fine_grained(g.k, a)
    probes = [(j, z3.And(fine, j >= first, j < last, g.bits[j])) for j in range(n)]
    for j, found in reversed(probes) if rules.probe_low_first else probes:
        hit = z3.If(found, j + 1, hit)
    hit = z3.If(z3.And(drop, hit > 0), hit - zmin(a, g.k), hit)
    return hit if rules.skip_round_down else hit - mod(hit, a, ALIGNMENTS)


def _align_blocks(length, k, a):
    """Largest l <= length with l*k a multiple of the alignment (SlidingWindowManager's pops)."""
    if isinstance(k, int) and isinstance(a, int):
        step = a // math.gcd(a, k)
        return length if step == 1 else length - length % step
    step = cases(a, ALIGNMENTS, lambda av: cases(k, BLOCK_UNITS, lambda kv: av // math.gcd(av, kv)))
    return length - cases(step, sorted({x // math.gcd(x, y) for x in ALIGNMENTS for y in BLOCK_UNITS}), lambda s: length % s)


def find_sliding_window(sc, g: Group, reach, drop, a, rules: Rules = VLLM):
    """reference/lookup.py:Lookup.find_sliding_window (SlidingWindowManager.find_longest_cache_hit)."""
    if rules.sw_ignores_drop:
        drop = z3.BoolVal(False)
    limit = div(reach, g.k, BLOCK_UNITS)
    need = g.need + z3.If(drop, 1, 0)
    run, found, length = z3.IntVal(0), z3.BoolVal(False), z3.IntVal(0)
    for i in reversed(range(sc.n)):
        cached = z3.And(i < limit, key_bit(g, i))
        if isinstance(g.k, int) and isinstance(a, int):  # decided here, not by the solver
            off = lambda end: z3.BoolVal(g.k != a and (end * g.k) % a != 0)  # noqa: E731
            skip = z3.And(run == 0, z3.If(drop, off(i), off(i + 1)))
        else:
            run_end = mul_k(z3.If(drop, i, i + 1), g.k)
            skip = z3.And(run == 0, g.k != a, mod(run_end, a, ALIGNMENTS) != 0)
        ends = z3.And(z3.Not(found), cached, z3.Not(skip), run + 1 >= need)
        length = z3.If(ends, i + run + 1, length)
        run = z3.If(found, run, z3.If(z3.Not(cached), 0, z3.If(skip, run, run + 1)))
        found = z3.Or(found, ends)
    length = z3.If(found, length, _align_blocks(run, g.k, a))
    length = z3.If(z3.And(drop, length > 0), _align_blocks(length - 1, g.k, a), length)
    return mul_k(length, g.k)


def find_mamba(sc, g: Group, reach, drop, a, rules: Rules = VLLM):
    """reference/lookup.py:Lookup.find_mamba (MambaManager.find_longest_cache_hit); no drop."""
    fine_hit, coarse_hit = z3.IntVal(0), z3.IntVal(0)
    fine_limit = zmin(div(reach, a, ALIGNMENTS), sc.nh)
    coarse_limit = div(reach, g.k, BLOCK_UNITS)
    order = list(range(sc.n))
    for j in reversed(order) if rules.mamba_leftmost else order:
        fine_hit = z3.If(z3.And(j < fine_limit, g.bits[j]), j + 1, fine_hit)
        end = mul_k(j + 1, g.k)
        aligned = True if rules.mamba_unaligned else mod(end, a, ALIGNMENTS) == 0
        coarse_hit = z3.If(z3.And(j < coarse_limit, key_bit(g, j), aligned), end, coarse_hit)
    return z3.If(fine_grained(g.k, a), fine_hit, coarse_hit)


def find(sc, g: Group, reach, drop, a, rules: Rules = VLLM):
    if isinstance(g.kind, int):  # a concrete kind builds one finder, not three
        return {FULL: find_full, SW: find_sliding_window, MAMBA: find_mamba}[g.kind](sc, g, reach, drop, a, rules)
    return z3.If(
        g.kind == FULL,
        find_full(sc, g, reach, drop, a, rules),
        z3.If(g.kind == SW, find_sliding_window(sc, g, reach, drop, a, rules), find_mamba(sc, g, reach, drop, a, rules)),
    )


def eagle_margin(sc, g: Group, rules: Rules = VLLM, partial=None):
    """kv_cache_utils:eagle_proof_margin in units: one unit when fine-grained, else a block."""
    fine = z3.And(partial_hits(sc) if partial is None else partial, g.kind != SW)
    margin = g.k if rules.whole_block_margin else z3.If(z3.And(fine, g.k > 1), 1, g.k)
    return 2 * margin if rules.double_margin else margin


def drops(sc: Scenario, g: Group, policy: DrafterPolicy = DrafterPolicy.CORE):
    """spec/drafter.py:drafter_groups as a term (tests/test_spec_rules.py checks they agree)."""
    if policy == DrafterPolicy.OFFLOADING:  # the connector's: the annotated groups
        return g.annotated
    # The core's KVCacheCoordinator.__init__ drop_eagle_group_ids: with EAGLE, the annotated, else all.
    return z3.And(sc.eagle, z3.Or(g.annotated, z3.Not(z3.Or([h.annotated for h in sc.groups]))))


