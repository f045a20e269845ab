"""The grouping vLLM should produce for a model, computed from the rules of spec/grouping.py
alone: the expected groups and warnings, or the error vLLM should raise.

The ladder follows vllm.v1.core.kv_cache_planning:get_global_kv_cache_groups and
get_kv_cache_groups: (hybrid manager off: promote local layers) -> one spec -> one uniform type
-> unify page sizes (or the full-allocation fallback) -> buckets split into equal groups ->
EAGLE annotation -> the unannotated-EAGLE warning (both spec/draft_annotation.py, by the
release's rules).
"""

from __future__ import annotations

from kvspec.spec.draft_annotation import eagle_flags, unannotated_eagle_warning, warns_unannotated_eagle
from kvspec.spec.grouping import (
    FULL_ALLOCATION_FALLBACK_WARNING,
    HYBRID_MANAGER_DISABLED_WARNING,
    SPEC_CLASS,
    UNIFORM_TYPE_CLASS,
    CacheFormat,
    Group,
    Grouping,
    Refusal,
    Route,
    format_of,
    format_page_bytes,
    full_allocation_fallback,
    group_size,
    grouping_route,
    merged_format,
    padding_warning,
    promote_local_layers,
    spec_buckets,
    strided_split,
    unify_page_sizes,
)
from kvspec.spec.layers import LayerSpec, SpecDecode
from kvspec.spec.releases import NEWEST_RULES

# A group before the EAGLE annotation: its layers and, for a uniform-type group, each member's
# format, else the group's one merged format.
_Unannotated = tuple[tuple[str, ...], CacheFormat | dict[str, CacheFormat]]


def expected_grouping(
    layers: dict[str, LayerSpec], spec_decode: SpecDecode = SpecDecode(), *, hybrid_manager: bool = True,
    rules=NEWEST_RULES,
) -> Grouping | Refusal:
    """vLLM's grouping of ``layers`` (in registration order) as the spec predicts it for a
    release with ``rules`` (spec/releases.py), or the refusal it predicts."""
    formats = {name: format_of(layer) for name, layer in layers.items()}
    warnings: list[str] = []
    if not hybrid_manager:
        promoted = promote_local_layers(formats)
        if isinstance(promoted, Refusal):
            return promoted
        if promoted != formats:
            warnings.append(HYBRID_MANAGER_DISABLED_WARNING)
        formats = promoted
    unannotated = _groups(formats, warnings, rules)
    if isinstance(unannotated, Refusal):
        return unannotated
    route = grouping_route(formats, rules)
    flags = eagle_flags([names for names, _ in unannotated], layers, spec_decode, route, rules)
    groups = [_group(names, spec, flag) for (names, spec), flag in zip(unannotated, flags)]
    if warns_unannotated_eagle(spec_decode, groups, route, rules):
        warnings.append(unannotated_eagle_warning(spec_decode))
    return Grouping(tuple(groups), tuple(warnings))


def _groups(formats: dict[str, CacheFormat], warnings: list[str], rules) -> list[_Unannotated] | Refusal:
    """The builder's groups (vllm.v1.core.kv_cache_planning:get_kv_cache_groups), logging into
    ``warnings`` as vLLM would."""
    route = grouping_route(formats, rules)
    names = tuple(formats)
    if isinstance(route, Refusal):
        return route
    if route == Route.NO_LAYERS:
        return []
    if route == Route.ONE_SPEC:
        return [(names, merged_format(list(formats.values())))]
    if route == Route.ONE_UNIFORM_TYPE:
        return [(names, dict(formats))]
    if route == Route.FULL_ALLOCATION:
        warnings.append(FULL_ALLOCATION_FALLBACK_WARNING)
        return [(names, full_allocation_fallback(formats, rules))]
    unified = unify_page_sizes(formats)
    buckets = spec_buckets(unified)
    size = group_size([len(b) for b in buckets])
    groups: list[_Unannotated] = []
    for bucket in buckets:
        if warning := padding_warning(len(bucket), size):
            warnings.append(warning)
        for group_names in strided_split(bucket, size):
            groups.append((group_names, merged_format([unified[n] for n in group_names])))
    return groups


def _group(names: tuple[str, ...], spec: CacheFormat | dict[str, CacheFormat], is_eagle_group: bool) -> Group:
    if isinstance(spec, dict):  # one uniform type: per-layer specs, pages summed
        members = [spec[n] for n in names]
        return Group(
            names,
            UNIFORM_TYPE_CLASS,
            tuple(m.kind for m in members),
            members[0].block_size,
            sum(map(format_page_bytes, members)),
            is_eagle_group,
        )
    return Group(names, SPEC_CLASS[spec.kind], (spec.kind,), spec.block_size, format_page_bytes(spec), is_eagle_group)
