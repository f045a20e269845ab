"""Known KV-cache grouping bugs, put back into real vLLM in memory (impl/patching.py): the
unannotated-EAGLE warning's gate and the group-size rule, edited in vLLM's own functions of
vllm.v1.core.kv_cache_planning."""

from __future__ import annotations

from kvspec.impl.patching import Undo, edit_function, patch

WARNING = "_warn_if_unannotated_eagle_mamba"
GROUPS = "_get_kv_cache_groups_uniform_page_size"


def warn_without_mamba_gate(adapter) -> Undo:
    """The unannotated-eagle warning fires whenever no group is annotated, Mamba or not."""
    return edit_function(adapter._planning, WARNING, [("    if not mamba_groups:\n        return\n", "")])


def warning_gate_inverted(adapter) -> Undo:
    """The Mamba gate reads the wrong way round: silent with a Mamba group, warning without."""
    return edit_function(adapter._planning, WARNING, [("if not mamba_groups:", "if mamba_groups:")])


def never_warn(adapter) -> Undo:
    """The unannotated-eagle warning never fires, Mamba or not."""
    return patch(adapter._planning, WARNING, lambda spec_config, groups: None)


def always_smallest_bucket(adapter) -> Undo:
    """The group-size rule loses its 1.5x exception: the group size is always the smallest
    bucket's (vLLM's strided split and padding warning otherwise kept)."""
    return edit_function(adapter._planning, GROUPS, [("if max_num_layers < min_num_layers * 1.5:", "if False:")])


def one_layer_per_group(adapter) -> Undo:
    """The group size collapses to one layer, so every layer of a hybrid model gets a group of
    its own (what #51742 reports for a one-layer bucket, here for every model)."""
    return edit_function(
        adapter._planning,
        GROUPS,
        [("min_num_layers = min([len(layers) for layers in layer_buckets])", "min_num_layers = 1")],
    )
