"""Theorems 6-7: the unannotated-EAGLE warning gate and the grouping arithmetic, for unbounded
integers (layer counts, page sizes) and every speculative method kvspec knows."""

from __future__ import annotations

import z3

from kvspec.proofs.core import Mutant, Obligation, single
from kvspec.proofs.counterexamples import WarningReplay
from kvspec.proofs.replay_more import BYTES_PER_HEAD_TOKEN, page_replay, partition_replay
from kvspec.spec.layers import BLOCK_DROP_METHODS, EAGLE_FAMILY, SPEC_METHODS, Kind, LayerSpec, SpecDecode

MAX_GROUPS = 4


# ------------------------------------------------------------------------------------------ 6
def _gate_vars(tag: str):
    method, disable = z3.Int(f"{tag}method"), z3.Bool(f"{tag}disable")
    draft = [z3.Bool(f"{tag}draft{g}") for g in range(MAX_GROUPS)]
    mamba = [z3.Bool(f"{tag}mamba{g}") for g in range(MAX_GROUPS)]
    present = [z3.Bool(f"{tag}present{g}") for g in range(MAX_GROUPS)]
    annotated = [z3.Bool(f"{tag}annotated{g}") for g in range(MAX_GROUPS)]
    return method, disable, draft, mamba, present, annotated


def _is(method, names) -> z3.BoolRef:
    return z3.Or([method == i for i, m in enumerate(SPEC_METHODS) if m in names] or [z3.BoolVal(False)])


def vllm_gate(tag: str, variant: str | None = None):
    """get_global_kv_cache_groups then _warn_if_unannotated_eagle_mamba, step by step: the
    config exists, use_eagle() and needs_eagle_block_drop() and not disabled, annotation from draft
    layers, early returns on an annotated group and on no Mamba group."""
    method, disable, draft, mamba, present, annotated = _gate_vars(tag)
    spec_config = method != SPEC_METHODS.index(None)
    use_eagle = _is(method, EAGLE_FAMILY)
    needs_drop = z3.And(use_eagle, z3.Not(_is(method, {"dflash", "dspark"})))
    use_drop = z3.And(needs_drop, z3.Not(disable))
    any_annotated = z3.Or([z3.And(p, a) for p, a in zip(present, annotated)])
    any_mamba = z3.Or([z3.And(p, m) for p, m in zip(present, mamba)])
    mamba_gate = z3.BoolVal(True) if variant == "warning-without-mamba-gate" else any_mamba
    fires = z3.And(spec_config, use_drop, z3.Not(any_annotated), mamba_gate)
    if variant == "warning-silent-with-mamba":
        fires = z3.BoolVal(False)
    annotation = [a == z3.And(use_drop, d) for a, d in zip(annotated, draft)]
    return fires, annotation, (method, disable, draft, mamba, present)


def spec_gate(method, disable, draft, mamba, present):
    """spec/grouping.py:warns_unannotated_eagle: drop in effect, no annotated group, a Mamba group."""
    in_effect = z3.And(_is(method, BLOCK_DROP_METHODS), z3.Not(disable))
    return z3.And(in_effect, z3.Not(z3.Or([z3.And(p, d) for p, d in zip(present, draft)])),
                  z3.Or([z3.And(p, m) for p, m in zip(present, mamba)]))


def warning_gate(n: int = 16):
    """The unannotated-EAGLE warning fires exactly when the block drop is in effect, no group
    holds a draft layer and some group holds Mamba (kv_cache_planning:_warn_if_unannotated_eagle_mamba)."""

    def obligation(tag, variant=None):
        fires, annotation, inputs = vllm_gate(tag, variant)
        method, disable, draft, mamba, present = inputs
        domain = [method >= 0, method < len(SPEC_METHODS), present[0]]
        on_model = _gate_replay(inputs, variant, fires)
        return single(f"T6 gate{'' if not variant else ' ' + variant}", domain, fires == spec_gate(*inputs),
                      key=annotation, on_model=on_model)

    mutants = [Mutant(v, obligation(f"m{i}", v)) for i, v in
               enumerate(("warning-without-mamba-gate", "warning-silent-with-mamba"))]
    return [obligation("g")], mutants


def _gate_replay(inputs, variant, fires):
    def on_model(model):
        method, disable, draft, mamba, present = inputs
        ev = lambda t: z3.is_true(model.eval(t, model_completion=True))  # noqa: E731
        name = SPEC_METHODS[model.eval(method, model_completion=True).as_long()]
        groups = [g for g in range(MAX_GROUPS) if ev(present[g])]
        any_mamba = any(ev(mamba[g]) for g in groups)
        draft_full = any(ev(draft[g]) and not ev(mamba[g]) for g in groups)
        draft_mamba = any(ev(draft[g]) and ev(mamba[g]) for g in groups)
        layers = {"layers.0": LayerSpec(Kind.FULL, 16, head_size=64, is_draft=draft_full)}
        if any_mamba:
            layers["layers.1"] = LayerSpec(Kind.MAMBA, 16, state_bytes=4096, is_draft=draft_mamba)
        spec = SpecDecode(name, ev(disable))
        line = f"gate counterexample: method={name} disable={ev(disable)} mamba={any_mamba} " \
               f"draft={draft_full or draft_mamba}; mutant warns={ev(fires)}"
        return [WarningReplay(line, layers, spec, variant)]

    return on_model


# ------------------------------------------------------------------------------------------ 7
def group_size_term(sizes):
    """spec/grouping.py:group_size: the largest bucket if under 1.5x the smallest, else the smallest."""
    smallest, largest = sizes[0], sizes[0]
    for s in sizes[1:]:
        smallest, largest = z3.If(s < smallest, s, smallest), z3.If(s > largest, s, largest)
    return z3.If(2 * largest < 3 * smallest, largest, smallest)


def size_rule(num_buckets: int) -> Obligation:
    """The group size is one of the bucket sizes, hence positive."""
    sizes = z3.Ints(" ".join(f"b{i}" for i in range(num_buckets)))
    gs = group_size_term(sizes)
    return single(f"T7 group size is a bucket size ({num_buckets} buckets)", [],
                  z3.And(gs >= 1, z3.Or([gs == s for s in sizes])), key=[s >= 1 for s in sizes])


def partition(splits=None) -> Obligation:
    """A bucket of n layers splits into k = ceil(n / size) strided groups; layer j goes to group
    j mod k at position j div k: every layer lands in an existing group within the group size, and
    every (group, position < that group's size) holds a layer (so: an exact partition)."""
    n, gs, j, i, p = z3.Ints("n gs j i p")
    k = splits(n, gs) if splits else (n + gs - 1) / gs
    size_i = (n - i + k - 1) / k
    goal = z3.And(
        z3.Implies(z3.And(j >= 0, j < n), z3.And(j % k < k, j / k < gs, j / k < (n - j % k + k - 1) / k)),
        z3.Implies(z3.And(i >= 0, i < k, p >= 0, p < size_i), z3.And(i + p * k < n, size_i <= gs, size_i >= 1)),
    )
    if splits is None:
        return single("T7 strided split: exact partition, no group over the size", [n >= 1], goal, key=[gs >= 1])
    # A mutant: small enough to replay as a model whose group size is gs (n >= 1.5 gs).
    return single("T7 strided split mutant", [n >= 1, gs >= 1, 2 * n >= 3 * gs, n <= 12], goal,
                  on_model=partition_replay(n, gs))


def page_unification(num_layers: int, grow_unchecked: bool = False) -> Obligation:
    """unify_kv_cache_spec_page_size: with P the largest page, Mamba and non-MLA attention pages
    are padded to P, a page dividing P grows its block size by P/page (page = bytes per token x
    block size), and only an MLA page that does not divide P is refused: all pages end equal."""
    kinds = z3.Ints(" ".join(f"kind{i}" for i in range(num_layers)))  # 0 attention, 1 MLA, 2 Mamba
    per_token = z3.Ints(" ".join(f"tok{i}" for i in range(num_layers)))
    blocks = z3.Ints(" ".join(f"bs{i}" for i in range(num_layers)))
    state = z3.Ints(" ".join(f"st{i}" for i in range(num_layers)))
    pages = [z3.If(kd == 2, st, t * b) for kd, st, t, b in zip(kinds, state, per_token, blocks)]
    largest = pages[0]
    for q in pages[1:]:
        largest = z3.If(q > largest, q, largest)
    refused, after = [], []
    for kd, page, t, b in zip(kinds, pages, per_token, blocks):
        divides = largest % page == 0
        grow = z3.BoolVal(True) if grow_unchecked else divides
        grown = t * (b * (largest / page))
        after.append(z3.If(page == largest, page, z3.If(kd == 2, largest, z3.If(grow, grown, largest))))
        refused.append(z3.And(page != largest, kd == 1, z3.Not(divides)))
    domain = [z3.And(kd >= 0, kd <= 2) for kd in kinds]
    positive = [z3.And(t >= 1, b >= 1, st >= 1) for t, b, st in zip(per_token, blocks, state)]
    goal = z3.Implies(z3.Not(z3.Or(refused)), z3.And([a == largest for a in after]))
    if not grow_unchecked:
        return single(f"T7 page unification, {num_layers} layers", domain, goal, key=positive)
    # A mutant: attention layers of whole 64-wide heads and blocks of 16s, to replay on vLLM.
    replayable = [z3.And(kd == 0, t % BYTES_PER_HEAD_TOKEN == 0, t <= 4 * BYTES_PER_HEAD_TOKEN, b % 16 == 0, b <= 64)
                  for kd, t, b in zip(kinds, per_token, blocks)]
    return single(f"T7 page unification mutant, {num_layers} layers", domain + positive + replayable, goal,
                  on_model=page_replay(per_token, blocks))


def grouping_arithmetic(n: int = 16):
    """The group-size rule and the strided split partition each bucket exactly with no group over
    the group size, and page unification leaves one page size
    (kv_cache_planning:_get_kv_cache_groups_uniform_page_size, unify_kv_cache_spec_page_size)."""
    obligations = [size_rule(b) for b in (2, 3, 4)] + [partition()] + [page_unification(m) for m in (2, 3, 4)]
    mutants = [
        Mutant("k = floor(n / size)", partition(splits=lambda n, gs: z3.If(n / gs >= 1, n / gs, 1))),
        Mutant("block grows without divisibility", page_unification(2, grow_unchecked=True)),
    ]
    return obligations, mutants
