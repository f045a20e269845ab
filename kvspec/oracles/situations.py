"""Where a violation happened: a coarse name for the input's situation, so that two vLLMs'
results can be compared (kvspec review) and a campaign's finds deduplicated (kvspec fuzz) by
(invariant, situation)."""

from __future__ import annotations

from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import block_drop_in_effect
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import LookupSetting


def lookup_situation(path: str, setting: LookupSetting) -> str:
    """The path, the group kinds, EAGLE, partial hits."""
    kinds = "+".join(sorted({g.kind.value for g in setting.groups}))
    shape = "one group" if len(setting.groups) == 1 else f"{len(setting.groups)} groups"
    flags = [f for f, on in (("EAGLE", setting.use_eagle), ("partial", partial_hash_hits_enabled(setting))) if on]
    return f"{path} {shape} {kinds}" + (f" {' '.join(flags)}" if flags else "")


def grouping_situation(model: Model) -> str:
    """The kinds of layers, whether EAGLE's block drop is in effect, the hybrid-manager flag."""
    kinds = "+".join(sorted({layer.kind.value for layer in model.layers.values()}))
    drafts = sum(layer.is_draft for layer in model.layers.values())
    flags = ["EAGLE" if block_drop_in_effect(model.spec_decode, model.rules) else f"spec {model.spec_decode.method or 'off'}"]
    if drafts:
        flags.append("draft layers")
    if not model.hybrid_manager:
        flags.append("hybrid manager off")
    return f"grouping {kinds} {' '.join(flags)}"


def stateful_situation(groups, eagle: str | None = None) -> str:
    """The group kinds and the EAGLE mode ("drop": the last-block drop; "lookahead" hashes)."""
    kinds = "+".join(sorted({g.kind.value for g in groups}))
    return f"stateful {'one group' if len(groups) == 1 else f'{len(groups)} groups'} {kinds}" + (f" EAGLE {eagle}" if eagle else "")


def _shape(groups) -> str:
    kinds = "+".join(sorted({g.kind.value for g in groups}))
    return f"{'one group' if len(groups) == 1 else f'{len(groups)} groups'} {kinds}"


def block_sizes_situation(groups, prefix_match_unit: int | None = None, dcp: int = 1, prefix_caching: bool = True) -> str:
    """The group kinds, a prefix-match unit given, DCP > 1, prefix caching off."""
    flags = [f for f, on in (("prefix-match unit", prefix_match_unit is not None), (f"DCP {dcp}", dcp > 1),
                             ("prefix caching off", not prefix_caching)) if on]
    return f"block sizes {_shape(groups)}" + (f" {' '.join(flags)}" if flags else "")


def margin_situation(case: tuple[int, int, bool]) -> str:
    """One group's EAGLE proof margin: a block of one hash unit or several, probed inside or not."""
    block_size, hash_block_size, fine = case
    return (f"EAGLE margin {'one-unit' if block_size == hash_block_size else 'multi-unit'} block"
            f"{' probed inside' if fine else ''}")


def offloading_situation(path: str, setting) -> str:
    """An OffloadingConnector path (lookup, load bound, store) over an OffloadSetting: the group
    kinds, chunks of several blocks, EAGLE and whether vLLM's grouping annotated a group."""
    flags = [f for f, on in (("multi-block chunks", setting.blocks_per_chunk > 1), ("EAGLE", setting.use_eagle),
                             ("annotated", any(g.is_eagle_group for g in setting.groups))) if on]
    return f"{path} {_shape(setting.groups)}" + (f" {' '.join(flags)}" if flags else "")


def simple_offload_situation(case) -> str:
    """A SimpleCPUOffload lookup: the lookup's situation, lazy mode, a local prefix."""
    flags = [f for f, on in (("lazy", case.lazy), ("past a local prefix", case.num_computed > 0)) if on]
    return lookup_situation("simple-offload", case.setting) + (f" {' '.join(flags)}" if flags else "")
