"""The vocabulary the rules speak: kinds of layers, one layer's KV-cache format, a cache group,
and the speculative-decoding settings. Plain frozen data; every rule is a function over it.

Sizes are in tokens unless a name ends in ``_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from kvspec.spec.releases import DFLASH_NEEDS_NO_BLOCK_DROP


class Kind(StrEnum):
    """What a layer keeps per token, which decides how a cache hit is checked. Each names the
    vLLM spec class it stands for (vllm.v1.kv_cache_interface) and, through KIND_MANAGER, the
    manager vLLM's registry gives it (single_type_kv_cache_manager:register_all_kvcache_specs)."""

    FULL = "full"  # full attention: every token's KV (vllm FullAttentionSpec)
    MLA = "mla"  # full attention, latent KV, no V head (vllm MLAAttentionSpec)
    SLIDING_WINDOW = "sliding_window"  # the last `window` tokens (vllm SlidingWindowSpec)
    CHUNKED_LOCAL = "chunked_local"  # tokens of the current chunk (ChunkedLocalAttentionSpec)
    MAMBA = "mamba"  # one recurrent state per sequence (vllm MambaSpec, align mode)
    # The kinds of issue 15: every other concrete spec class of vLLM 0.30-0.34.
    SLIDING_WINDOW_MLA = "sliding_window_mla"  # a window of latent KV (SlidingWindowMLASpec)
    RSWA = "rswa"  # the whole prompt, then the last `rswa_window` generated tokens (RSWASpec)
    SINK_FULL = "sink_full"  # full attention with `sink_len` sink tokens (SinkFullAttentionSpec)
    CIRCULAR_BUFFER = "circular_buffer"  # one ring block per request (CircularBufferSpec)
    CROSS_ATTENTION = "cross_attention"  # the encoder's KV, read by the decoder (CrossAttentionSpec)
    ENCODER_ONLY = "encoder_only"  # no KV kept at all (EncoderOnlyAttentionSpec)
    HIDDEN_STATE = "hidden_state"  # hidden states kept as latent KV (HiddenStateCacheSpec)
    HISPARSE_HOT = "hisparse_hot"  # a request's ephemeral HiSparse hot pages (HiSparseHotSpec)
    HISPARSE_RESIDENT = "hisparse_resident"  # reclaimable HiSparse pages (HiSparseResidentSpec)


# The five kinds kvspec drew before issue 15; the checks built on them draw only these.
CLASSIC_KINDS = (Kind.FULL, Kind.MLA, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL, Kind.MAMBA)
ATTENTION_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL})
FULL_ATTENTION_KINDS = frozenset({Kind.FULL, Kind.MLA})

VLLM_SPEC_CLASS = {
    Kind.FULL: "FullAttentionSpec",
    Kind.MLA: "MLAAttentionSpec",
    Kind.SLIDING_WINDOW: "SlidingWindowSpec",
    Kind.CHUNKED_LOCAL: "ChunkedLocalAttentionSpec",
    Kind.MAMBA: "MambaSpec",
    Kind.SLIDING_WINDOW_MLA: "SlidingWindowMLASpec",
    Kind.RSWA: "RSWASpec",
    Kind.SINK_FULL: "SinkFullAttentionSpec",
    Kind.CIRCULAR_BUFFER: "CircularBufferSpec",
    Kind.CROSS_ATTENTION: "CrossAttentionSpec",
    Kind.ENCODER_ONLY: "EncoderOnlyAttentionSpec",
    Kind.HIDDEN_STATE: "HiddenStateCacheSpec",
    Kind.HISPARSE_HOT: "HiSparseHotSpec",
    Kind.HISPARSE_RESIDENT: "HiSparseResidentSpec",
}
# The manager vLLM's registry maps each spec class to (single_type_kv_cache_manager:
# register_all_kvcache_specs); EncoderOnlyAttentionSpec has none: its layers keep no KV and
# never reach a manager. HybridKVCacheCoordinator.verify_and_split_kv_cache_groups compares these.
KIND_MANAGER = {
    Kind.FULL: "FullAttentionManager",
    Kind.MLA: "FullAttentionManager",
    Kind.HIDDEN_STATE: "FullAttentionManager",
    Kind.SLIDING_WINDOW: "SlidingWindowManager",
    Kind.SLIDING_WINDOW_MLA: "SlidingWindowManager",
    Kind.CHUNKED_LOCAL: "ChunkedLocalAttentionManager",
    Kind.MAMBA: "MambaManager",
    Kind.RSWA: "RSWAManager",
    Kind.SINK_FULL: "SinkFullAttentionManager",
    Kind.CIRCULAR_BUFFER: "CircularBufferManager",
    Kind.CROSS_ATTENTION: "CrossAttentionManager",
    Kind.HISPARSE_HOT: "HiSparseHotManager",
    Kind.HISPARSE_RESIDENT: "HiSparseResidentManager",
}
# Kinds whose spec stores a latent only, no V head (head_size_v = 0: MLAAttentionSpec and its
# subclass HiddenStateCacheSpec, SlidingWindowMLASpec).
LATENT_KINDS = frozenset({Kind.MLA, Kind.HIDDEN_STATE, Kind.SLIDING_WINDOW_MLA})
# Kinds whose page size is declared, not computed (HiSparseHotSpec.page_size, HiSparseResidentSpec.page_size).
DECLARED_PAGE_KINDS = frozenset({Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT})
# HiSparse's per-request GPU groups, which come only beside its host source (CacheGroup.hisparse_source).
HISPARSE_AUXILIARY_KINDS = frozenset({Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT})
# Kinds whose spec is an AttentionSpec (heads, head size, dtype, tokens per state).
ATTENTION_SPEC_KINDS = frozenset(Kind) - DECLARED_PAGE_KINDS - {Kind.MAMBA}
# Kinds whose spec says it takes no part in prefix caching (KVCacheSpec.prefix_cacheable False:
# CircularBufferSpec, HiSparseHotSpec, HiSparseResidentSpec; a bounded-replay SlidingWindowMLASpec
# too, which kvspec does not draw). KVCacheConfig.prefix_cacheable_group_ids leaves them out.
NOT_PREFIX_CACHEABLE_KINDS = frozenset({Kind.CIRCULAR_BUFFER, Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT})
PREFIX_CACHEABLE_KINDS = frozenset(Kind) - NOT_PREFIX_CACHEABLE_KINDS
# Kinds whose manager finds a hit as full attention does (FullAttentionManager.find_longest_cache_hit,
# not overridden by RSWAManager, SinkFullAttentionManager or for HiddenStateCacheSpec).
HITS_LIKE_FULL_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.HIDDEN_STATE, Kind.RSWA, Kind.SINK_FULL})
# Kinds whose manager never gives a hit: CrossAttentionManager.find_longest_cache_hit raises
# (encoder-decoder models run without prefix caching); an encoder-only layer keeps no KV.
NEVER_HIT_KINDS = frozenset({Kind.CROSS_ATTENTION, Kind.ENCODER_ONLY})


@dataclass(frozen=True)
class LayerSpec:
    """The KV-cache format of one layer, as a model runner reports it to the scheduler.

    ``is_draft`` tags a speculative-decoding draft layer; it never changes which group a layer
    lands in (vllm.v1.kv_cache_interface:KVCacheSpec.is_draft is ``compare=False``).
    """

    kind: Kind
    block_size: int
    num_kv_heads: int = 1
    head_size: int = 64
    dtype_bytes: int = 2
    window: int | None = None  # SLIDING_WINDOW and SLIDING_WINDOW_MLA only
    chunk: int | None = None  # CHUNKED_LOCAL only
    state_bytes: int | None = None  # MAMBA only: bytes of one sequence's state
    rswa_window: int | None = None  # RSWA only: generated tokens kept (RSWASpec.rswa_window)
    sink_len: int | None = None  # SINK_FULL only (SinkFullAttentionSpec.sink_len)
    page_bytes: int | None = None  # HISPARSE_* only: the declared page size (HiSparse*Spec.page_size)
    blocks_per_request: int | None = None  # HISPARSE_HOT only (HiSparseHotSpec.blocks_per_request)
    # Attention kinds: tokens compressed into one stored state (AttentionSpec.tokens_per_state;
    # > 1 in DeepSeek-V4's compressed sparse MLA).
    tokens_per_state: int = 1
    tp_replicated: bool = False  # MAMBA only: every TP rank holds the whole state (MambaSpec.tp_replicated)
    # MLA only, read by HiSparse's layout alone (spec/hisparse_grouping.py); the ordinary grouping
    # rules never see them, so the grouping draws leave them at their defaults.
    indexer: bool = False  # the sparse indexer's cache (MLAAttentionSpec.cache_role INDEXER, else SPARSE)
    index_leader: bool = False  # computes the top-k its index group shares (MLAAttentionSpec.is_index_group_leader)
    topk_width: int | None = None  # the model's top-k buffer width (MLAAttentionSpec.topk_buffer_width)
    model_version: str | None = None  # "deepseek_v4" for DeepSeek-V4's layers (MLAAttentionSpec.model_version)
    is_draft: bool = False

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        needs = {
            "window": {Kind.SLIDING_WINDOW, Kind.SLIDING_WINDOW_MLA},
            "chunk": {Kind.CHUNKED_LOCAL},
            "state_bytes": {Kind.MAMBA},
            "rswa_window": {Kind.RSWA},
            "sink_len": {Kind.SINK_FULL},
            "page_bytes": DECLARED_PAGE_KINDS,
            "blocks_per_request": {Kind.HISPARSE_HOT},
        }
        for field_name, kinds in needs.items():
            if (self.kind in kinds) != (getattr(self, field_name) is not None):
                raise ValueError(f"{field_name} is set exactly for {', '.join(sorted(kinds))} layers")
        if self.kind == Kind.MAMBA and self.state_bytes % self.dtype_bytes:
            raise ValueError("state_bytes must be a whole number of dtype elements")
        if self.tokens_per_state != 1 and self.kind not in ATTENTION_SPEC_KINDS:
            raise ValueError("tokens_per_state is set only for attention layers")
        if self.tokens_per_state <= 0 or self.block_size % self.tokens_per_state:
            raise ValueError("a block holds a whole number of states (block_size % tokens_per_state == 0)")
        if self.tp_replicated and self.kind != Kind.MAMBA:
            raise ValueError("tp_replicated is set only for MAMBA layers")
        sparse_fields = (self.indexer, self.index_leader, self.topk_width is not None, self.model_version is not None)
        if any(sparse_fields) and self.kind != Kind.MLA:
            raise ValueError("indexer, index_leader, topk_width and model_version are set only for MLA layers")
        if self.topk_width is not None and self.topk_width <= 0:
            raise ValueError(f"topk_width must be positive, got {self.topk_width}")


class PageShape(Protocol):
    """What a page's size depends on: a LayerSpec, or a spec/grouping.py:CacheFormat."""

    kind: Kind
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    state_bytes: int | None
    tokens_per_state: int
    page_bytes: int | None


def page_size_bytes(layer: PageShape) -> int:
    """Bytes of one block of one layer, before any padding: kvspec's one page-size formula
    (vllm.v1.kv_cache_interface:AttentionSpec.page_size_bytes, MambaSpec.page_size_bytes,
    HiSparseHotSpec.page_size_bytes, HiSparseResidentSpec.page_size_bytes).

    Attention stores K and V heads per stored state (the latent kinds the latent only), one
    state per ``tokens_per_state`` tokens; a Mamba page holds one state, whatever the block
    size; a HiSparse page is the size its spec declares.
    """
    if layer.kind == Kind.MAMBA:
        return layer.state_bytes
    if layer.kind in DECLARED_PAGE_KINDS:
        return layer.page_bytes
    per_state_heads = layer.head_size if layer.kind in LATENT_KINDS else 2 * layer.head_size
    states = layer.block_size // layer.tokens_per_state
    return layer.num_kv_heads * states * per_state_heads * layer.dtype_bytes


@dataclass(frozen=True)
class CacheGroup:
    """One KV-cache group as the prefix cache sees it: the layers share one block table.

    ``is_eagle_group`` marks the group holding the draft's layers
    (vllm.v1.kv_cache_interface:KVCacheGroupSpec.is_eagle_group). ``hisparse_source`` marks
    HiSparse's host source: the sparse-MLA group whose role is KVCacheGroupRole.HISPARSE_SOURCE,
    which gives it HiSparseSourceManager (retains_longer_hit) instead of its spec's manager
    (vllm.v1.hisparse.layout:_lay_out_hisparse_groups).
    """

    kind: Kind
    block_size: int
    window: int | None = None
    chunk: int | None = None
    is_eagle_group: bool = False
    rswa_window: int | None = None  # RSWA only
    sink_len: int | None = None  # SINK_FULL only
    hisparse_source: bool = False  # MLA only

    def __post_init__(self) -> None:
        if self.hisparse_source and self.kind != Kind.MLA:
            raise ValueError("only an MLA group can be HiSparse's host source")


# Methods that use the target's hidden states (vllm.config.speculative:SpeculativeConfig.use_eagle).
EAGLE_FAMILY = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
# Of those, the drafters whose KV at a position depends on the next token.
BLOCK_DROP_METHODS = frozenset({"eagle", "eagle3", "mtp"})
SPEC_METHODS = (None, "eagle", "eagle3", "mtp", "dflash", "dspark", "ngram")


@dataclass(frozen=True)
class SpecDecode:
    """Speculative-decoding settings that the grouping and hit rules read."""

    method: str | None = None
    disable_eagle_block_drop: bool = False

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ValueError(f"unknown speculative method {self.method!r}")


def block_drop_in_effect(spec_decode: SpecDecode, rules) -> bool:
    """EAGLE's last-block drop applies iff the drafter is EAGLE, EAGLE3 or MTP (and on a release
    without spec/releases.py:DFLASH_NEEDS_NO_BLOCK_DROP, DFlash and DSpark too) and the drop is
    not disabled (vllm.config.speculative:SpeculativeConfig.use_eagle_block_drop)."""
    methods = BLOCK_DROP_METHODS if DFLASH_NEEDS_NO_BLOCK_DROP in rules else EAGLE_FAMILY
    return spec_decode.method in methods and not spec_decode.disable_eagle_block_drop
