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
    """What a layer keeps per token, which decides how a cache hit is checked."""

    FULL = "full"  # full attention: every token's KV (vllm FullAttentionSpec)
    MLA = "mla"  # full attention, latent KV, no V head (vllm MLAAttentionSpec)
    SLIDING_WINDOW = "sliding_window"  # the last `window` tokens (vllm SlidingWindowSpec)
    CHUNKED_LOCAL = "chunked_local"  # tokens of the current chunk (ChunkedLocalAttentionSpec)
    MAMBA = "mamba"  # one recurrent state per sequence (vllm MambaSpec, align mode)


ATTENTION_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL})
FULL_ATTENTION_KINDS = frozenset({Kind.FULL, Kind.MLA})


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
    window: int | None = None  # SLIDING_WINDOW only
    chunk: int | None = None  # CHUNKED_LOCAL only
    state_bytes: int | None = None  # MAMBA only: bytes of one sequence's state
    is_draft: bool = False

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        needs = {Kind.SLIDING_WINDOW: "window", Kind.CHUNKED_LOCAL: "chunk", Kind.MAMBA: "state_bytes"}
        for kind, field_name in needs.items():
            if (self.kind == kind) != (getattr(self, field_name) is not None):
                raise ValueError(f"{field_name} is set exactly for {kind} layers")
        if self.kind == Kind.MAMBA and self.state_bytes % self.dtype_bytes:
            raise ValueError("state_bytes must be a whole number of dtype elements")


class PageShape(Protocol):
    """What a page's size depends on: a LayerSpec, or a spec/grouping.py:CacheFormat."""

    kind: Kind
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype_bytes: int
    state_bytes: int | None


def page_size_bytes(layer: PageShape) -> int:
    """Bytes of one block of one layer, before any padding: kvspec's one page-size formula
    (vllm.v1.kv_cache_interface:AttentionSpec.page_size_bytes, MambaSpec.page_size_bytes).

    Attention stores K and V heads per token (MLA stores the latent only); a Mamba page holds
    one state, whatever the block size.
    """
    if layer.kind == Kind.MAMBA:
        return layer.state_bytes
    per_token_heads = layer.head_size if layer.kind == Kind.MLA else 2 * layer.head_size
    return layer.num_kv_heads * layer.block_size * per_token_heads * layer.dtype_bytes


@dataclass(frozen=True)
class CacheGroup:
    """One KV-cache group as the prefix cache sees it: the layers share one block table.

    ``is_eagle_group`` marks the group holding the draft's layers
    (vllm.v1.kv_cache_interface:KVCacheGroupSpec.is_eagle_group).
    """

    kind: Kind
    block_size: int
    window: int | None = None
    chunk: int | None = None
    is_eagle_group: bool = False


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
