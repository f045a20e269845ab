"""Known KV-cache grouping bugs, put back into real vLLM in memory (impl/patching.py): the
unannotated-EAGLE warning's gate and the group-size rule, edited in vLLM's own functions of
vllm.v1.core.kv_cache_planning; and plausible merge and uniform-type bugs of the issue-15
kinds, edited in vllm.v1.kv_cache_interface."""

from __future__ import annotations

from kvspec.impl.patching import Undo, edit, replace
from kvspec.impl.vllm_symbols import GROUPS_UNIFORM_PAGE_SIZE as GROUPS
from kvspec.impl.vllm_symbols import WARN_UNANNOTATED_EAGLE as WARNING
from kvspec.impl.vllm_symbols import Symbol


def warn_without_mamba_gate(adapter) -> Undo:
    """The unannotated-eagle warning fires whenever no group is annotated, Mamba or not."""
    return edit(WARNING, [("    if not mamba_groups:\n        return\n", "")])


def warning_gate_inverted(adapter) -> Undo:
    """The Mamba gate reads the wrong way round: silent with a Mamba group, warning without."""
    return edit(WARNING, [("if not mamba_groups:", "if mamba_groups:")])


def never_warn(adapter) -> Undo:
    """The unannotated-eagle warning never fires, Mamba or not."""
    return replace(WARNING, lambda spec_config, groups: None)


def always_smallest_bucket(adapter) -> Undo:
    """The group-size rule loses its 1.5x exception: the group size is always the smallest
    bucket's (vLLM's strided split and padding warning otherwise kept)."""
    return edit(GROUPS, [("if max_num_layers < min_num_layers * 1.5:", "if False:")])


def one_layer_per_group(adapter) -> Undo:
    """The group size collapses to one layer, so every layer of a hybrid model gets a group of
    its own (what #51742 reports for a one-layer bucket, here for every model)."""
    return edit(
        GROUPS,
        [("min_num_layers = min([len(layers) for layers in layer_buckets])", "min_num_layers = 1")],
    )


_INTERFACE = "vllm.v1.kv_cache_interface"
RSWA_MERGE = Symbol(_INTERFACE, "RSWASpec.merge")
FULL_MERGE = Symbol(_INTERFACE, "FullAttentionSpec.merge")
CIRCULAR_BUFFER_UNIFORM = Symbol(_INTERFACE, "CircularBufferSpec.is_uniform_with_collection")


def rswa_merges_any_window(adapter) -> Undo:
    """RSWASpec.merge forgets to compare windows: R-SWA layers of different rswa_window become
    one spec, so some keep fewer generated tokens than their attention reads."""
    return edit(RSWA_MERGE, [("assert len(rswa_windows) == 1,", "assert True,")])


def full_merge_refuses_subclasses(adapter) -> Undo:
    """FullAttentionSpec.merge takes only plain FullAttentionSpecs, so a full layer beside an
    R-SWA or sink layer is no longer one spec (it becomes a uniform-type group)."""
    return edit(FULL_MERGE, [("assert all(isinstance(spec, FullAttentionSpec) for spec in specs)",
                              "assert all(type(spec) is FullAttentionSpec for spec in specs)")])


def circular_buffer_uniform_with_any_attention(adapter) -> Undo:
    """A circular-buffer layer counts as one type with any attention layer, so a model with a
    ring and full attention gets one uniform-type group instead of a ring group of its own."""
    return edit(CIRCULAR_BUFFER_UNIFORM, [("isinstance(spec, CircularBufferSpec)", "isinstance(spec, AttentionSpec)")])


PARTIAL_HITS_ENABLED = Symbol("vllm.v1.core.kv_cache_utils", "partial_hash_hits_enabled")


def cross_attention_probes_inside_blocks(adapter) -> Undo:
    """The engine takes cross attention for a manager that probes inside its blocks, so a
    Mamba model with cross-attention layers in longer blocks gets hits inside them."""
    return edit(PARTIAL_HITS_ENABLED, [
        ("and not manager_cls.supports_fine_grained_hash_lookup",
         "and not (manager_cls.supports_fine_grained_hash_lookup or manager_cls.__name__ == 'CrossAttentionManager')"),
    ])
