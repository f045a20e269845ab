"""Inputs and answers in a few readable lines, for reports read by someone who never used
kvspec: a lookup's groups, cache and cap; a model's layers; a grouping vLLM returned."""

from __future__ import annotations

from kvspec.draws import codec
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import CacheState, LookupSetting

PATHS = {"core": "the engine core's coordinator", "mooncake": "the Mooncake store connector's coordinator"}


def ranges(indices) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(out) or "none"


def describe_group(group: CacheGroup) -> str:
    text = f"{group.kind.value} {group.block_size}"
    if group.window is not None:
        text += f" (window {group.window})"
    if group.chunk is not None:
        text += f" (chunk {group.chunk})"
    text += " [HiSparse source]" if group.hisparse_source else ""
    return text + (" [EAGLE group]" if group.is_eagle_group else "")


def describe_lookup(path: str, setting: LookupSetting, state: CacheState, max_length: int) -> str:
    groups = ", ".join(f"{gid}: {describe_group(g)}" for gid, g in enumerate(setting.groups))
    unit = setting.hash_block_size
    cached = "; ".join(
        f"group {gid} holds units {ranges(j for g, j in state.cached if g == gid)}" for gid in range(len(setting.groups))
    )
    flags = [
        "EAGLE on" if setting.use_eagle else "EAGLE off",
        "partial hits on" if partial_hash_hits_enabled(setting) else "partial hits off",
    ]
    return (
        f"{PATHS[path]}; groups [{groups}]; hash unit {unit} tokens; {', '.join(flags)}; "
        f"prompt of {state.num_hashes} units ({state.num_hashes * unit} tokens): {cached}; "
        f"cap M = {max_length}"
    )


def describe_layer(layer: LayerSpec) -> str:
    if layer.kind == Kind.MAMBA:
        text = f"mamba bs {layer.block_size} state {layer.state_bytes} B"
    else:
        text = f"{layer.kind.value} bs {layer.block_size} {layer.num_kv_heads}x{layer.head_size}"
        text += f" window {layer.window}" if layer.window else ""
        text += f" chunk {layer.chunk}" if layer.chunk else ""
    return text + f" {8 * layer.dtype_bytes}-bit" + (" draft" if layer.is_draft else "")


def describe_model(model: Model) -> str:
    """Layers as formats A, B, ... and their order, then the speculative settings."""
    letters: dict[LayerSpec, str] = {}
    order = []
    for layer in model.layers.values():
        letters.setdefault(layer, chr(ord("A") + len(letters)))
        order.append(letters[layer])
    formats = "; ".join(f"{letter} = {describe_layer(layer)} (x{order.count(letter)})" for layer, letter in letters.items())
    sequence = "".join(order) if len(order) <= 64 else "".join(order[:64]) + "..."
    spec = model.spec_decode
    decode = f"speculative {spec.method}" + (", block drop disabled" if spec.disable_eagle_block_drop else "") if spec.method else "no speculative decoding"
    manager = "hybrid manager on" if model.hybrid_manager else "hybrid manager off"
    return f"{len(order)} layers: {formats}; order {sequence}; {decode}; {manager}"


def describe_grouping(answer: dict) -> str:
    """A worker's grouping answer: the refusal, or each group's spec and size."""
    if "refused" in answer:
        return f"refused ({answer['refused']}: {answer.get('message', '')[:120]})"
    grouping = codec.decode(answer["grouping"])
    groups = "; ".join(
        f"{g.spec_class} bs {g.block_size} x{len(g.layer_names)} layers, page {g.page_size_bytes} B"
        + (" [EAGLE group]" if g.is_eagle_group else "")
        for g in grouping.groups
    )
    warned = f"; warned: {' | '.join(w[:100] for w in grouping.warnings)}" if grouping.warnings else ""
    return f"{len(grouping.groups)} groups: {groups}{warned}"
