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
