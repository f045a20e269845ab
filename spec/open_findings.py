"""The vLLM bugs every release kvspec reads still has, each a release rule (spec/release_rule.py)
with its report under docs/findings/ (tests/test_findings.py runs the report's plain-vLLM tests:
they fail on every release the rule holds for). kvspec's draws leave out what would end every
draw that meets one (a crash, a stalled prefill), each rule naming where; a release that fixes
one is drawn there again once its rule says it no longer holds.
"""

from __future__ import annotations

from kvspec.spec.release_rule import READ_RELEASES, ReleaseRule

SINK_MANAGER_REFUSES_THE_ZEROING_FLAG = ReleaseRule(
    name="no coordinator can build a sink full-attention manager",
    holds_for=READ_RELEASES,
    source="vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__; "
    "vllm/v1/core/single_type_kv_cache_manager.py:SinkFullAttentionManager.__init__",
    description=(
        "The coordinator builds every manager with needs_kv_cache_zeroing, which "
        "SinkFullAttentionManager.__init__ (fixed parameters, no **kwargs) does not take: a "
        "TypeError at start-up for any model whose group spec is SinkFullAttentionSpec (openPangu "
        "with attention sinks), so no sink group reaches a lookup and the draws leave it out "
        "(docs/findings/sink-full-attention-manager-cannot-be-built.md). A release without it "
        "builds sink groups: draw them in kvspec/draws/lookups.py:NEW_KINDS."
    ),
)

SLIDING_WINDOW_MLA_MERGE_IGNORES_ATTENTION_FIELDS = ReleaseRule(
    name="sliding-window MLA layers merge whatever their block size, heads and dtype",
    holds_for=READ_RELEASES,
    source="vllm/v1/kv_cache_interface.py:SlidingWindowMLASpec.merge",
    description=(
        "An open finding (docs/findings/sliding-window-mla-merge-ignores-attention-fields.md): unlike "
        "MLAAttentionSpec.merge, SlidingWindowMLASpec.merge never compares the AttentionSpec fields, so "
        "two layers of one window but other block sizes or heads are one spec with the first's pages. "
        "The grouping draws give a model's sliding-window MLA layers one format while it holds "
        "(kvspec/draws/models.py:one_sliding_window_mla_format)."
    ),
)

RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS = ReleaseRule(
    name="R-SWA decode blocks are published under token-prefix keys",
    holds_for=READ_RELEASES,
    source="vllm/v1/core/single_type_kv_cache_manager.py:RSWAManager (FullAttentionManager.cache_blocks, "
    "find_longest_cache_hit)",
    description=(
        "An open, latent finding (docs/findings/rswa-decode-blocks-published-under-token-keys.md): "
        "RSWAManager keys every full block as full attention does, decode blocks past prompt + "
        "rswa_window included, whose KV was computed under the decode window; a later prompt of those "
        "tokens hits them (spec/kind_writes.py:rswa_safe_reuse_limit). Unlimited-OCR, the one model "
        "with R-SWA layers, turns prefix caching off (models/config.py:UnlimitedOCRForCausalLMConfig)."
    ),
)

MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD = ReleaseRule(
    name="the prefill-lookahead reserve can undo the Mamba split and stall a prefill",
    holds_for=READ_RELEASES,
    source="Scheduler._mamba_block_aligned_split; Scheduler._reserve_prefill_lookahead",
    description=(
        "An open, latent finding (docs/findings/mamba-prefill-stalls-under-multi-module-mtp.md): in "
        "Mamba align mode with a multi-module MTP chain, the reserve cuts a chunk the Mamba split "
        "ended on a block boundary to end inside the block, and from there every chunk is split back "
        "and cut to nothing. The stateful draws leave the chain beside Mamba out "
        "(kvspec/stateful/config.py:_mtp_left_out)."
    ),
)

LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES = ReleaseRule(
    name="a lookup under a hash lookahead of two or more tokens reads past the request's hashes",
    holds_for=("0.33.0", "0.34.0"),
    source="SlidingWindowManager, ChunkedLocalAttentionManager, MambaManager: find_longest_cache_hit",
    description=(
        "An open, latent finding (docs/findings/lookup-reads-past-the-lookahead-hashes.md): a "
        "multi-module MTP chain of k modules hashes k tokens ahead, so an n-token request carries "
        "(n - k) // unit hashes while its lookup is capped at n - 1, and these finders index "
        "block_hashes past the end: IndexError. The stateful draws leave the chain under lookahead "
        "hashes beside those groups out (kvspec/stateful/config.py:_mtp_left_out)."
    ),
)

OPEN_FINDING_RULES = (SINK_MANAGER_REFUSES_THE_ZEROING_FLAG, SLIDING_WINDOW_MLA_MERGE_IGNORES_ATTENTION_FIELDS,
                      RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS, MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD,
                      LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES)
