"""The write side for issue 15's kinds (spec/caching.py holds the classic five): what a computed
chunk of each kind leaves in the prefix cache, each rule naming its vLLM symbol.

* R-SWA, sink full attention and the hidden-state cache publish as full attention does
  (FullAttentionManager.cache_blocks, which RSWAManager and SinkFullAttentionManager inherit
  and HiddenStateCacheSpec's FullAttentionManager runs). RSWAManager.remove_skipped_blocks only
  frees the decode-time gap blocks: a freed block keeps its keys until it is evicted.
* A circular buffer and the HiSparse hot and resident groups publish nothing
  (CircularBufferManager.cache_blocks and _HiSparseAuxiliaryManager.cache_blocks return): their
  blocks are per-request scratch. CircularBufferManager frees nothing early either
  (remove_skipped_blocks returns, get_num_skipped_tokens is 0).
* Cross attention is never published: its model runs without prefix caching
  (ModelConfig.is_prefix_caching_supported), and CrossAttentionManager.cache_blocks raises if
  called. Encoder-only layers keep no KV (spec/hits.py).
* HiSparse's groups (its host source and its hot and resident groups) never reach a
  KVCacheManager scheduled without a KV connector, the path the rules here and spec/caching.py
  describe (``admitted_without_a_connector``): their managers allocate, publish and free only
  through the HiSparseCoordinator (HiSparseSourceManager and _HiSparseAuxiliaryManager assert
  ``self.coordinator``), which only HiSparseConnector binds
  (vllm.v1.hisparse.coordinator:get_hisparse_coordinator), and 0.34 refuses HiSparse without
  that connector (VllmConfig: "HiSparse requires a KV transfer config with HiSparseConnector").
  What HiSparse leaves cached is the connector's residency protocol (host copies, spills,
  imports with the worker), which kvspec does not state.

A safety rule the token-keyed cache must also meet for R-SWA: a block may serve a later prompt
only if its KV is what that prompt would compute. During decode an R-SWA layer sees the prompt
and the last ``rswa_window`` generated tokens (RSWASpec; the attention backends' rswa mask of
``rswa_prefix_lens``); in a prompt every earlier token is visible. A generated position ``p``
first misses a token at ``p >= P + rswa_window`` (``P`` the prompt length), and from there the
difference reaches every later position through the layers above. So a column of generated
tokens is a function of its token prefix only while it ends at or before ``P + rswa_window``
(``rswa_column_is_prefix_determined``). vLLM 0.30 to 0.34 publish the rest too
(spec/releases.py:RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS).
"""

from __future__ import annotations

from kvspec.spec.layers import HISPARSE_AUXILIARY_KINDS, NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind

# Kinds whose manager never publishes a block (their cache_blocks returns or raises).
NEVER_PUBLISHED_KINDS = NOT_PREFIX_CACHEABLE_KINDS | {Kind.CROSS_ATTENTION, Kind.ENCODER_ONLY}
# Kinds published as full attention publishes (FullAttentionManager.cache_blocks).
PUBLISHED_LIKE_FULL_KINDS = frozenset({Kind.RSWA, Kind.SINK_FULL, Kind.HIDDEN_STATE})


def admitted_without_a_connector(groups: tuple[CacheGroup, ...]) -> bool:
    """Whether a KVCacheManager scheduled with no KV connector can admit a request over these
    groups: not when one is HiSparse's (see the module docstring)."""
    return not any(g.hisparse_source or g.kind in HISPARSE_AUXILIARY_KINDS for g in groups)


def publishes(group: CacheGroup) -> bool:
    """Whether the group's manager ever publishes a block under a prefix key."""
    return group.kind not in NEVER_PUBLISHED_KINDS


def rswa_column_is_prefix_determined(group: CacheGroup, column: int, num_prompt_tokens: int) -> bool:
    """Whether R-SWA column ``column`` of a request with ``num_prompt_tokens`` prompt tokens
    holds the KV any prompt starting with its tokens would compute (module docstring)."""
    assert group.kind == Kind.RSWA
    return (column + 1) * group.block_size <= num_prompt_tokens + group.rswa_window


def rswa_safe_reuse_limit(group: CacheGroup, num_prompt_tokens: int) -> int:
    """The longest prefix of an R-SWA request's tokens a later prompt may reuse from its
    blocks: whole blocks ending at or before ``num_prompt_tokens + rswa_window``."""
    return (num_prompt_tokens + group.rswa_window) // group.block_size * group.block_size
