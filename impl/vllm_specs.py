"""kvspec's layer formats as vLLM's KV-cache spec objects, and back: the spec-building half of
the adapter (impl/vllm_adapter.py), one place per spec class of vllm.v1.kv_cache_interface.

It builds each spec with vLLM's own constructor, so vLLM's own validation (``__post_init__``)
and its own page-size properties decide; it computes nothing vLLM computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_symbols import Symbol, resolve
from kvspec.spec.layers import VLLM_SPEC_CLASS, CacheGroup, Kind, LayerSpec
from kvspec.spec.releases import DRAFT_LAYERS_FLAGGED_ON_SPEC

_INTERFACE = "vllm.v1.kv_cache_interface"
_DRAFT_FLAG = ((DRAFT_LAYERS_FLAGGED_ON_SPEC, 0, ("is_draft",)),)


def _spec_class(qualname: str, *keywords: str) -> Symbol:
    return Symbol(_INTERFACE, qualname, takes=(0, keywords), takes_under=_DRAFT_FLAG)


_ATTENTION = S._ATTENTION_SPEC_KEYWORDS
# The spec classes of issue 15's kinds, present in every supported release (0.30-0.34).
SPEC_SYMBOLS: dict[Kind, Symbol] = {
    Kind.FULL: S.FULL_ATTENTION_SPEC,
    Kind.MLA: S.MLA_ATTENTION_SPEC,
    Kind.SLIDING_WINDOW: S.SLIDING_WINDOW_SPEC,
    Kind.CHUNKED_LOCAL: S.CHUNKED_LOCAL_ATTENTION_SPEC,
    Kind.MAMBA: S.MAMBA_SPEC,
    Kind.SLIDING_WINDOW_MLA: _spec_class("SlidingWindowMLASpec", *_ATTENTION, "sliding_window"),
    Kind.RSWA: _spec_class("RSWASpec", *_ATTENTION, "rswa_window"),
    Kind.SINK_FULL: _spec_class("SinkFullAttentionSpec", *_ATTENTION, "sink_len"),
    Kind.CIRCULAR_BUFFER: _spec_class("CircularBufferSpec", *_ATTENTION),
    Kind.CROSS_ATTENTION: _spec_class("CrossAttentionSpec", *_ATTENTION),
    Kind.ENCODER_ONLY: _spec_class("EncoderOnlyAttentionSpec", *_ATTENTION),
    Kind.HIDDEN_STATE: _spec_class("HiddenStateCacheSpec", *_ATTENTION),
    Kind.HISPARSE_HOT: _spec_class("HiSparseHotSpec", "block_size", "page_size", "blocks_per_request"),
    Kind.HISPARSE_RESIDENT: _spec_class("HiSparseResidentSpec", "block_size", "page_size"),
}
assert all(symbol.name == VLLM_SPEC_CLASS[kind] for kind, symbol in SPEC_SYMBOLS.items())

# The spec classes' own grouping functions (merges, page size), mutated by kvspec mutate
# (kvspec/tools/mutation_targets.py) and driven by the grouping check. Not RSWASpec.merge,
# CircularBufferSpec.is_uniform_with_collection, UniformTypeKVCacheSpecs.is_uniform_type:
# kvspec mutate --list enumerates no mutant of them (a target must have one).
SPEC_GROUPING_FUNCTIONS = tuple(Symbol(_INTERFACE, qualname) for qualname in (
    "FullAttentionSpec.merge", "SinkFullAttentionSpec.merge", "MLAAttentionSpec.merge",
    "AttentionSpec.unpadded_page_size_bytes"))

# What a group of a kind that carries no layer format of its own is given: a HiSparse page of
# a 16-token, 1-head, 64-wide fp16 block, one hot block per request; a Mamba state of 64 bytes.
GROUP_HISPARSE_PAGE_BYTES = 4096
GROUP_HISPARSE_BLOCKS_PER_REQUEST = 1
GROUP_MAMBA_STATE_BYTES = 64


def with_the_drafters_margins(spec, num_speculative_tokens: int, num_prefill_lookahead: int):
    """``spec`` as the engine sets it beside a drafter:

    * a Mamba spec holds one speculative state block per draft slot
      (vllm.model_executor.layers.mamba.abstract:MambaBase.get_kv_cache_spec);
    * a sliding window retains the blocks of the tokens multi-module MTP may re-prefill, all but
      one of the prefill lookahead (kv_cache_planning:get_global_kv_cache_groups sets
      SlidingWindowSpec.extra_retained_tokens; kv_cache_utils on 0.30-0.32)."""
    classes = {cls.__name__ for cls in type(spec).__mro__}
    if "MambaSpec" in classes and num_speculative_tokens:
        return dataclasses.replace(spec, num_speculative_blocks=num_speculative_tokens)
    if "SlidingWindowSpec" in classes and num_prefill_lookahead > 1:
        return dataclasses.replace(spec, extra_retained_tokens=num_prefill_lookahead - 1)
    return spec


class SpecTranslator:
    """kvspec LayerSpecs and CacheGroups to vLLM specs and KVCacheGroupSpecs, and vLLM specs to kinds."""

    def __init__(self, dtypes: dict, draft_flagged: Callable[[], bool]):
        self._dtypes = dtypes  # torch dtype by element bytes
        # Asked at each build, so that the adapter's release rules stay the one source (a test narrows them).
        self._draft_flagged = draft_flagged

    def vllm_layer_spec(self, layer: LayerSpec):
        spec_class = resolve(SPEC_SYMBOLS[layer.kind])
        dtype = self._dtypes[layer.dtype_bytes]
        draft = self._draft_flag(layer)
        if layer.kind == Kind.MAMBA:
            return spec_class(
                block_size=layer.block_size,
                shapes=((layer.state_bytes // layer.dtype_bytes,),),
                dtypes=(dtype,),
                mamba_cache_mode="align",  # the only mode with prefix caching
                **({"tp_replicated": True} if layer.tp_replicated else {}),
                **draft,
            )
        if layer.kind == Kind.HISPARSE_HOT:
            return spec_class(block_size=layer.block_size, page_size=layer.page_bytes,
                              blocks_per_request=layer.blocks_per_request, **draft)
        if layer.kind == Kind.HISPARSE_RESIDENT:
            return spec_class(block_size=layer.block_size, page_size=layer.page_bytes, **draft)
        own = {
            Kind.SLIDING_WINDOW: {"sliding_window": layer.window},
            Kind.SLIDING_WINDOW_MLA: {"sliding_window": layer.window},
            Kind.CHUNKED_LOCAL: {"attention_chunk_size": layer.chunk},
            Kind.RSWA: {"rswa_window": layer.rswa_window},
            Kind.SINK_FULL: {"sink_len": layer.sink_len},
        }.get(layer.kind, {})
        # Passed only when compressed, so the classic kinds build exactly as before issue 15.
        compressed = {"tokens_per_state": layer.tokens_per_state} if layer.tokens_per_state != 1 else {}
        return spec_class(
            block_size=layer.block_size,
            num_kv_heads=layer.num_kv_heads,
            head_size=layer.head_size,
            dtype=dtype,
            **own,
            **compressed,
            **self._sparse_fields(layer),
            **draft,
        )

    @staticmethod
    def _sparse_fields(layer: LayerSpec) -> dict:
        """An MLA layer's sparse-attention fields, passed only when set, so that a release
        without one (0.31-0.32 have no topk_buffer_width) still builds every other layer."""
        fields = {}
        if layer.indexer:
            fields["cache_role"] = resolve(S.SPARSE_CACHE_ROLE_INDEXER)
        if layer.index_leader:
            fields["is_index_group_leader"] = True
        if layer.topk_width is not None:
            fields["topk_buffer_width"] = layer.topk_width
        if layer.model_version is not None:
            fields["model_version"] = layer.model_version
        return fields

    def _draft_flag(self, layer: LayerSpec) -> dict:
        """The spec's draft flag, on a release that has one (spec/releases.py)."""
        return {"is_draft": layer.is_draft} if self._draft_flagged() else {}

    def kind_of(self, vllm_spec) -> Kind:
        """The kind of vLLM's own spec class nearest ``vllm_spec``'s type (a subclass that
        vLLM or a platform adds counts as the class it extends)."""
        classes = {resolve(symbol): kind for kind, symbol in SPEC_SYMBOLS.items()}
        for cls in type(vllm_spec).__mro__:
            if cls in classes:
                return classes[cls]
        raise TypeError(f"kvspec has no kind for {type(vllm_spec).__name__}")

    def group_layer(self, group: CacheGroup) -> LayerSpec:
        """The one layer kvspec gives a group it hands to vLLM."""
        hisparse = group.kind in (Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT)
        return LayerSpec(
            kind=group.kind,
            block_size=group.block_size,
            window=group.window,
            chunk=group.chunk,
            state_bytes=GROUP_MAMBA_STATE_BYTES if group.kind == Kind.MAMBA else None,
            rswa_window=group.rswa_window,
            sink_len=group.sink_len,
            page_bytes=GROUP_HISPARSE_PAGE_BYTES if hisparse else None,
            blocks_per_request=GROUP_HISPARSE_BLOCKS_PER_REQUEST if group.kind == Kind.HISPARSE_HOT else None,
        )

    def group_spec(self, gid: int, group: CacheGroup):
        layers, spec = [f"layers.{gid}"], self.vllm_layer_spec(self.group_layer(group))
        if group.hisparse_source:
            return resolve(S.HISPARSE_SOURCE_GROUP_SPEC)(
                layers, spec, is_eagle_group=group.is_eagle_group, role=resolve(S.HISPARSE_SOURCE_ROLE),
                host_resident=True,
            )
        return resolve(S.KV_CACHE_GROUP_SPEC)(layers, spec, is_eagle_group=group.is_eagle_group)

    def vllm_groups(self, groups) -> list:
        """vLLM's KVCacheGroupSpecs for kvspec groups, one layer each, in order."""
        return [self.group_spec(gid, g) for gid, g in enumerate(groups)]
