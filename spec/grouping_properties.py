"""What every grouping of a model must satisfy, whoever computed it (vLLM or the reference).

Each property is a predicate over the model (its layers, speculative settings, hybrid-manager
flag) and a grouping: anything with ``groups`` (each with the fields of spec/grouping.py:Group)
and ``warnings``. It returns the ways the grouping breaks it, empty when it holds, so a failure
names what went wrong. They restate the rules as invariants; they do not rebuild the groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import ceil

from kvspec.spec.draft_annotation import eagle_flags, unannotated_eagle_warning, warns_unannotated_eagle
from kvspec.spec.grouping import (
    UNIFORM_TYPE_CLASS,
    CacheFormat,
    Refusal,
    format_of,
    format_page_bytes,
    group_size,
    merge_failure,
    model_route,
    one_uniform_type,
    promote_local_layers,
    spec_buckets,
    unify_page_sizes,
)
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode
from kvspec.spec.releases import NEWEST_RULES, ReleaseRule


@dataclass(frozen=True)
class Model:
    """What a grouping is computed from: the layers in registration order, and the rules of the
    release that groups them (spec/releases.py)."""

    layers: dict[str, LayerSpec]
    spec_decode: SpecDecode = SpecDecode()
    hybrid_manager: bool = True
    # The release's, not the model's: never encoded as data (kvspec/draws/codec.py).
    rules: frozenset[ReleaseRule] = field(default=NEWEST_RULES, repr=False, metadata={"of_the_target": True})

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        """How Hypothesis prints a failing model: without the release's rules, whose frozenset
        iterates in an order that varies by process (string hashing), so that one seed's report
        reads the same from one process or two (Hypothesis's printer ignores repr=False)."""
        printer.repr_call("Model", (), {"layers": self.layers, "spec_decode": self.spec_decode,
                                        "hybrid_manager": self.hybrid_manager})


def _view(model: Model) -> dict[str, CacheFormat] | None:
    """The per-layer specs a regular (not uniform-type) group is formed from: promoted when the
    hybrid manager is off, then page-unified; None when the pages cannot be unified."""
    formats = {name: format_of(layer) for name, layer in model.layers.items()}
    if not model.hybrid_manager:
        formats = promote_local_layers(formats)
        if isinstance(formats, Refusal):
            return None
    unified = unify_page_sizes(formats)
    return None if isinstance(unified, Refusal) else unified


def every_layer_in_exactly_one_group(model: Model, grouping) -> list[str]:
    """The groups partition the model's layers; no group is empty."""
    seen = [name for g in grouping.groups for name in g.layer_names]
    problems = [f"{name} is in {seen.count(name)} groups" for name in set(seen) if seen.count(name) > 1]
    problems += [f"{name} is in no group" for name in model.layers if name not in seen]
    problems += [f"{name} is not a layer of the model" for name in seen if name not in model.layers]
    problems += [f"group {i} is empty" for i, g in enumerate(grouping.groups) if not g.layer_names]
    return problems


def layers_of_one_spec_keep_model_order(model: Model, grouping) -> list[str]:
    """Inside a group, the layers of one spec appear in the model's order.

    Only per spec: where specs merge (an R-SWA or sink layer into full attention), vLLM lists a
    bucket as the first spec's layers, then each merged spec's, before it deals the bucket out
    to groups (vllm/v1/core/kv_cache_planning.py:_get_kv_cache_groups_uniform_page_size), so a
    group may hold full.6 before rswa.5. Nothing reads meaning into that order; the exact order
    is the reference's to check (reference/grouping.py)."""
    position = {name: i for i, name in enumerate(model.layers)}
    problems = []
    for i, g in enumerate(grouping.groups):
        for spec in {model.layers[n] for n in g.layer_names if n in model.layers}:
            run = [position[n] for n in g.layer_names if model.layers.get(n) == spec]
            if run != sorted(run):
                problems.append(f"group {i} lists layers of one spec out of model order: {g.layer_names}")
                break
    return problems


def group_shares_one_spec_or_one_type(model: Model, grouping) -> list[str]:
    """A uniform-type group's layers are of one type (after promotion to full attention where
    vLLM promotes); any other group's layers share one spec after page unification, and the
    group reports that spec's kind, block size and page size."""
    problems = []
    view = _view(model)
    for i, g in enumerate(grouping.groups):
        formats = [format_of(model.layers[n]) for n in g.layer_names if n in model.layers]
        if not formats:
            continue
        if g.spec_class == UNIFORM_TYPE_CLASS:
            promotable = not isinstance(promote_local_layers(dict(enumerate(formats))), Refusal)
            if not (one_uniform_type(formats) or promotable):
                problems.append(f"uniform-type group {i} mixes types: {g.layer_names}")
            if len(g.kinds) != len(g.layer_names):
                problems.append(f"uniform-type group {i} has {len(g.kinds)} kinds, {len(g.layer_names)} layers")
            continue
        if view is None:
            problems.append(f"group {i} is a one-spec group but the pages cannot be unified")
            continue
        specs = [view[n] for n in g.layer_names]
        if merge_failure(specs) is not None:
            problems.append(f"group {i} holds layers of different specs: {g.layer_names}")
            continue
        reported = (g.kinds, g.block_size, g.page_size_bytes)
        spec = ((specs[0].kind,), specs[0].block_size, format_page_bytes(specs[0]))
        if reported != spec:
            problems.append(f"group {i} reports (kinds, block, page) {reported}; its spec has {spec}")
    return problems


def several_groups_share_one_page_size(model: Model, grouping) -> list[str]:
    """With more than one group, every group is a one-spec group and all pages are equal (the
    memory pool is one array of equal blocks)."""
    if len(grouping.groups) < 2:
        return []
    problems = [
        f"group {i} is uniform-type among several groups"
        for i, g in enumerate(grouping.groups)
        if g.spec_class == UNIFORM_TYPE_CLASS
    ]
    pages = {g.page_size_bytes for g in grouping.groups}
    if len(pages) > 1:
        problems.append(f"groups have different page sizes {sorted(pages)}")
    return problems


def no_group_exceeds_the_group_size(model: Model, grouping) -> list[str]:
    """With several groups, no group holds more layers than the group-size rule allows, and each
    bucket of one spec is cut into ceil(len/size) groups whose sizes differ by at most one."""
    view = _view(model)
    if len(grouping.groups) < 2 or view is None:
        return []
    buckets = spec_buckets(view)
    size = group_size([len(b) for b in buckets])
    problems = [
        f"group {i} has {len(g.layer_names)} > {size} layers"
        for i, g in enumerate(grouping.groups)
        if len(g.layer_names) > size
    ]
    group_of = {n: i for i, g in enumerate(grouping.groups) for n in g.layer_names}
    for bucket in buckets:
        bucket_groups = dict.fromkeys(group_of[n] for n in bucket if n in group_of)
        lengths = [len(grouping.groups[i].layer_names) for i in bucket_groups]
        if len(lengths) != ceil(len(bucket) / size) or (lengths and max(lengths) - min(lengths) > 1):
            problems.append(f"bucket {bucket[:3]}... ({len(bucket)} layers) is cut into groups of {lengths}")
    return problems


def block_sizes_grow_by_whole_ratios(model: Model, grouping) -> list[str]:
    """With the hybrid manager on, a one-spec group's block size is a whole multiple of each
    attention layer's own, and a Mamba layer's block size never changes. (A uniform-type group
    may hold sliding-window layers allocated at the full layers' block size.)"""
    if not model.hybrid_manager:
        return []
    problems = []
    for i, g in enumerate(grouping.groups):
        if g.spec_class == UNIFORM_TYPE_CLASS:
            continue
        for name in g.layer_names:
            layer = model.layers.get(name)
            if layer is None:
                continue
            if layer.kind == Kind.MAMBA and g.block_size != layer.block_size:
                problems.append(f"Mamba layer {name} block {layer.block_size} became {g.block_size}")
            if layer.kind != Kind.MAMBA and g.block_size % layer.block_size:
                problems.append(f"{name} block {layer.block_size} does not divide group {i}'s {g.block_size}")
    return problems


def annotated_where_the_release_finds_the_drafter(model: Model, grouping) -> list[str]:
    """With EAGLE's block drop in effect, a group is annotated iff the release's rule finds the
    drafter in it (spec/draft_annotation.py): a draft-flagged layer inside, or, for MTP on a
    release without the flag, the last registered layer; otherwise no group is annotated."""
    route = model_route(model.layers, model.hybrid_manager, model.rules)
    if isinstance(route, Refusal):
        return []
    names = [g.layer_names for g in grouping.groups]
    should = eagle_flags(names, model.layers, model.spec_decode, route, model.rules)
    return [f"group {i} annotated={g.is_eagle_group}, the release's rule finds the drafter there: {flag}"
            for i, (g, flag) in enumerate(zip(grouping.groups, should)) if g.is_eagle_group != flag]


def warns_iff_unannotated_eagle_meets_mamba(model: Model, grouping) -> list[str]:
    """The unannotated-EAGLE warning is logged once iff the release's gate is open (the block
    drop, or on older releases the EAGLE family on the unified-page path), no group is annotated
    and some group holds a Mamba layer, in vLLM's words."""
    route = model_route(model.layers, model.hybrid_manager, model.rules)
    should = not isinstance(route, Refusal) and warns_unannotated_eagle(
        model.spec_decode, list(grouping.groups), route, model.rules)
    count = sum(1 for w in grouping.warnings if "could be identified as the draft model's" in w)
    problems = []
    if count != int(should):
        problems.append(f"unannotated-EAGLE warning logged {count} times, expected {int(should)}")
    if should and count and unannotated_eagle_warning(model.spec_decode) not in grouping.warnings:
        problems.append("unannotated-EAGLE warning text differs from vLLM's")
    return problems


PROPERTIES: tuple[Callable[[Model, object], list[str]], ...] = (
    every_layer_in_exactly_one_group,
    layers_of_one_spec_keep_model_order,
    group_shares_one_spec_or_one_type,
    several_groups_share_one_page_size,
    no_group_exceeds_the_group_size,
    block_sizes_grow_by_whole_ratios,
    annotated_where_the_release_finds_the_drafter,
    warns_iff_unannotated_eagle_meets_mamba,
)


def property_violations(model: Model, grouping) -> list[str]:
    """Every property's complaints about ``grouping``, each prefixed by the property's name."""
    return [f"{prop.__name__}: {problem}" for prop in PROPERTIES for problem in prop(model, grouping)]
