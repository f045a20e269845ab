"""Which KV-cache groups vLLM's grouping marks as the drafter's (``is_eagle_group``), and when it
warns that it could mark none. What a mark then costs a hit is spec/drafter.py's.

* The mark is given only under EAGLE's block drop (spec/layers.py:block_drop_in_effect).
* Where the specs carry a draft flag (spec/releases.py:DRAFT_LAYERS_FLAGGED_ON_SPEC), a group is
  the drafter's iff it holds a draft-flagged layer, on every grouping path
  (vllm.v1.core.kv_cache_planning:get_global_kv_cache_groups).
* Where they do not (MTP_DRAFT_IS_THE_TRAILING_LAYER), an MTP drafter is found by position: its
  layers register after the target's, so the group holding the last registered layer is its
  own, when the groups partition the layers exactly. Only the unified-page path marks
  (vllm/v1/core/kv_cache_utils.py:_annotate_eagle_groups); the others return unmarked.
* The warning: no group marked and some group holding Mamba. Under
  WARNS_AFTER_EVERY_GROUPING_UNDER_THE_DROP it follows every path when the drop is in effect;
  otherwise it follows the unified-page path whenever the drafter is of the EAGLE family, the
  drop disabled or not (kv_cache_utils:_warn_if_unannotated_eagle_mamba).
"""

from __future__ import annotations

from kvspec.spec.grouping import Group, Route
from kvspec.spec.layers import EAGLE_FAMILY, Kind, LayerSpec, SpecDecode, block_drop_in_effect
from kvspec.spec.releases import (
    DRAFT_LAYERS_FLAGGED_ON_SPEC,
    MTP_DRAFT_IS_THE_TRAILING_LAYER,
    WARNS_AFTER_EVERY_GROUPING_UNDER_THE_DROP,
)


def eagle_flags(
    groups: list[tuple[str, ...]], layers: dict[str, LayerSpec], spec_decode: SpecDecode, route: Route, rules
) -> tuple[bool, ...]:
    """Each group's mark, for groups formed on ``route`` from ``layers`` (in registration order)
    by a release with ``rules`` (see the module docstring)."""
    unmarked = tuple(False for _ in groups)
    if not block_drop_in_effect(spec_decode, rules):
        return unmarked
    if DRAFT_LAYERS_FLAGGED_ON_SPEC in rules:
        draft_layers = {name for name, layer in layers.items() if layer.is_draft}
        return tuple(not draft_layers.isdisjoint(names) for names in groups)
    if (
        MTP_DRAFT_IS_THE_TRAILING_LAYER in rules
        and spec_decode.method == "mtp"
        and route == Route.SPLIT_BUCKETS
        and _partition_exactly(groups, layers)
    ):
        last = next(reversed(layers))
        holder = next(i for i, names in enumerate(groups) if last in names)
        return tuple(i == holder for i in range(len(groups)))
    return unmarked


def _partition_exactly(groups: list[tuple[str, ...]], layers: dict[str, LayerSpec]) -> bool:
    names = [name for group in groups for name in group]
    return len(names) == len(layers) and set(names) == set(layers)


def warns_unannotated_eagle(spec_decode: SpecDecode, groups: list[Group], route: Route, rules) -> bool:
    """Whether vLLM logs the unannotated-EAGLE warning for ``groups`` formed on ``route``."""
    if WARNS_AFTER_EVERY_GROUPING_UNDER_THE_DROP in rules:
        gate = block_drop_in_effect(spec_decode, rules)
    else:
        gate = spec_decode.method in EAGLE_FAMILY and route == Route.SPLIT_BUCKETS
    return gate and not any(g.is_eagle_group for g in groups) and any(Kind.MAMBA in g.kinds for g in groups)


def unannotated_eagle_warning(spec_decode: SpecDecode) -> str:
    """vLLM's exact text (vllm.v1.core.kv_cache_planning:_warn_if_unannotated_eagle_mamba)."""
    return (
        f"Speculative decoding (method={spec_decode.method}) is enabled but no KV cache group "
        "could be identified as the draft model's."
    )
