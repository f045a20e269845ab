"""Where the vLLM releases kvspec reads differ, each difference a named rule with the releases
it holds for and the vLLM code it was read from. The harness never tests a version number: it
asks which rules its target has (``rules_of``), and a rule says why the answer differs.

A target whose version is none of the releases read (a checkout of vLLM's main, say) is taken
to follow the newest release read: a checkout is vLLM past its last release. When kvspec
supports a new release, every rule here is read again in it (tests/test_spec_rules.py fails
until the release is listed in READ_RELEASES).
"""

from __future__ import annotations

# The open findings are rules too; their names are importable from here as well.
from kvspec.spec.open_findings import (  # noqa: F401
    LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES,
    MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD,
    OPEN_FINDING_RULES,
    RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS,
    SINK_MANAGER_REFUSES_THE_ZEROING_FLAG,
    SLIDING_WINDOW_MLA_MERGE_IGNORES_ATTENTION_FIELDS,
)
from kvspec.spec.release_rule import READ_RELEASES, ReleaseRule

OFFLOADING_TRIMS_WINDOW_BEFORE_CAP = ReleaseRule(
    name="offloading trims the windowed last token before the cap",
    holds_for=("0.34.0",),
    source="vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:"
    "OffloadingConnectorScheduler._lookup_complete_chunks",
    description=(
        "With a windowed group the connector's hit must leave the last token to recompute. 0.34 "
        "takes it off the request (num_tokens - 1) before capping the load at max_num_new_tokens, "
        "so a tighter cap is already a boundary; 0.33 takes it off the capped bound, one token less "
        "whenever the cap is below the prompt (reference/offloading.py:initial_cap)."
    ),
)

DRAFT_LAYERS_FLAGGED_ON_SPEC = ReleaseRule(
    name="draft layers are flagged on their KV-cache spec",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/kv_cache_interface.py:KVCacheSpec.is_draft; "
    "vllm/v1/core/kv_cache_planning.py:get_global_kv_cache_groups",
    description=(
        "A drafter's layer carries is_draft on its spec, and under the EAGLE drop a group is the "
        "drafter's iff it holds such a layer. 0.32 and earlier have no such flag: "
        "kv_cache_utils:_annotate_eagle_groups decides from an MLA spec's "
        "non_causal_multi_token_decode or, for MTP, from the last registered layer "
        "(docs/older-releases.md)."
    ),
)

LOOKAHEAD_BLOCK_HASHES = ReleaseRule(
    name="block hashes can take the next tokens in (EAGLE lookahead hashes)",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_utils.py:get_request_block_hasher; "
    "vllm/v1/core/kv_cache_manager.py:KVCacheManager.__init__ (num_hash_lookahead_tokens)",
    description=(
        "With EAGLE, a block's hash may cover the tokens after it, so a cached block proves the "
        "drafter saw the next token. 0.32 and earlier hash a block's own tokens only: the legacy "
        "last-block drop is the only EAGLE mode there."
    ),
)

GROUPS_PLANNED_BEFORE_SIZING = ReleaseRule(
    name="the workers' layers are grouped by a function of their own, before memory is sized",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_planning.py:get_global_kv_cache_groups",
    description=(
        "0.33 merges the workers' specs and groups them in get_global_kv_cache_groups. 0.32 does "
        "the same steps (merge, registry check, sliding-window tag, get_kv_cache_groups) as the "
        "first half of kv_cache_utils:get_kv_cache_configs, which then sizes memory: kvspec takes "
        "the groups at that function's call to get_kv_cache_groups (impl/grouping_entry.py)."
    ),
)

MTP_DRAFT_IS_THE_TRAILING_LAYER = ReleaseRule(
    name="under MTP the group holding the last registered layer is the drafter's",
    holds_for=("0.31.0", "0.32.0"),
    source="vllm/v1/core/kv_cache_utils.py:_annotate_eagle_groups, _uses_trailing_mtp_layers, "
    "_groups_partition_layers_exactly",
    description=(
        "With no draft flag on the specs, 0.31 and 0.32 find an MTP drafter by position: its layers "
        "register after the target's, so under the EAGLE drop the group holding the last "
        "registered layer is flagged, when the groups partition the layers exactly. Only the "
        "unified-page path (and the packed one, which a layer-outer layout never takes) "
        "annotates; the one-spec, one-type and full-allocation paths return unannotated. 0.30 "
        "places only a DeepSeek-V4 drafter so, on the packed path alone: nothing kvspec builds."
    ),
)

WARNS_AFTER_EVERY_GROUPING_UNDER_THE_DROP = ReleaseRule(
    name="the unannotated-EAGLE warning follows every grouping path, under the EAGLE drop",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_planning.py:get_global_kv_cache_groups, "
    "_warn_if_unannotated_eagle_mamba",
    description=(
        "0.33 warns after any grouping path, and only when use_eagle_block_drop() holds. 0.32 "
        "warns from kv_cache_utils:get_kv_cache_groups on the unified-page and packed paths "
        "only, whenever use_eagle() holds: also with the drop disabled."
    ),
)

DFLASH_NEEDS_NO_BLOCK_DROP = ReleaseRule(
    name="DFlash and DSpark drafters need no EAGLE block drop",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/config/speculative.py:SpeculativeConfig.needs_eagle_block_drop, use_eagle_block_drop",
    description=(
        "0.33 leaves dflash and dspark out of the block drop (needs_eagle_block_drop). In 0.32 "
        "use_eagle_block_drop() is use_eagle() and not disable_eagle_block_drop, so they drop "
        "like EAGLE."
    ),
)

HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE = ReleaseRule(
    name="the engine resolves the hit alignment, the partial-hit switch and the EAGLE margin",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_utils.py:resolve_cache_hit_alignment_tokens, partial_hash_hits_enabled, "
    "eagle_proof_margin",
    description=(
        "0.32 made three engine-level functions of what the coordinator decides. 0.31 has none of "
        "them: the hybrid coordinator aligns hits and adds the same margin inline "
        "(HybridKVCacheCoordinator._cache_hit_alignment_tokens), so the lookups keep those rules, "
        "and only the block-sizes check's parts on the functions are not in that release."
    ),
)

ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT = ReleaseRule(
    name="with one group, a prefix-match unit other than its block size is refused",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
    description=(
        "With one KV-cache group hits land on its block size. 0.32 raises ValueError for any other "
        "prefix_match_unit while block hashing is active; 0.31 ignores it and hashes at the block size."
    ),
)

EAGLE_PEEKS_PAST_THE_CAP = ReleaseRule(
    name="an EAGLE group looks past the cap for the block that proves its last token",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit; "
    "mooncake/store/coordinator.py:MooncakeStoreCoordinator._find_hit_blocks",
    description=(
        "Before dropping its last block, an EAGLE group looks one margin past the candidate hit. "
        "0.32 lets that look reach the hashed length, so a hit can reach the cap; 0.31 stops it at "
        "the cap (min(candidate + margin, max_length)), so a hit near the cap is one drop unit shorter."
    ),
)

MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE = ReleaseRule(
    name="the Mooncake store takes partial hits from the core's decision",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="mooncake/store/coordinator.py:MooncakeStoreCoordinator.__init__ (enable_partial_hash_hits), "
    "from_kv_cache_config",
    description=(
        "0.32's store is told by the core whether hits may land inside blocks (the core checks every "
        "group's manager). 0.31's decides itself, from the Mamba groups alone "
        "(partial_hash_hits_enabled(groups, hash_block_size, dcp_world_size)), so a sliding-window "
        "or chunked-local group beside Mamba gets partial hits the core would refuse."
    ),
)

ONE_GROUP_SHARDS_ONLY_A_SHARDED_SPEC = ReleaseRule(
    name="under DCP one group's block is stretched only if its spec is sharded",
    holds_for=("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
    description=(
        "With one KV-cache group and decode context parallelism, 0.31 multiplies the block size by "
        "the DCP ranks only for a dcp_sharded spec (attention); a Mamba group keeps its block. 0.30 "
        "multiplies it for every spec."
    ),
)

MAMBA_CHECKPOINT_IS_THE_SHARED_PREFIX_ONE = ReleaseRule(
    name="the scheduler's optional Mamba checkpoint is the shared-prefix one",
    holds_for=("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/sched/scheduler.py:Scheduler.__init__ (mamba_shared_prefix_checkpoint)",
    description=(
        "Scheduler._mamba_block_aligned_split reads whether the optional Mamba checkpoint is on: "
        "0.31 calls it mamba_shared_prefix_checkpoint (CacheConfig.enable_mamba_shared_prefix_checkpoint), "
        "0.30 mamba_fine_grained_prefix_cache. kvspec leaves it off in every release."
    ),
)

PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN = ReleaseRule(
    name="full attention's partial tail entry is the last boundary a resend can hit",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/single_type_kv_cache_manager.py:FullAttentionManager._cache_partial_tail_block",
    description=(
        "When the prompt's last hash boundary falls inside a block, full attention publishes it as a "
        "partial entry. 0.32 takes the boundary below the prompt less one token (a resend recomputes "
        "its last token; an EAGLE group reads the whole prompt before dropping), within the hashed "
        "tokens; 0.31 and 0.30 take the whole prompt's last boundary, which a resend of a prompt "
        "ending on a hash boundary can never hit (spec/caching.py:partial_tail_entry)."
    ),
)

EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION = ReleaseRule(
    name="an EAGLE group also keeps the tail one block below the shared-prefix junction",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/core/single_type_kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks",
    description=(
        "Under a retention interval a group keeps the tail ending at the shared-prefix junction its "
        "lookup found. 0.33 also keeps, for an EAGLE group, the tail one block below it: a sibling "
        "diverging right after the junction cannot peek past it, so its hit lands a block lower. "
        "0.32 and earlier keep the junction's tail alone (spec/caching.py:reachable_boundaries)."
    ),
)

MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY = ReleaseRule(
    name="Mamba publishes the prompt's checkpoint state wherever it falls",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/single_type_kv_cache_manager.py:MambaManager._cache_partial_tail_block; "
    "vllm/v1/kv_cache_interface.py:get_mamba_prefill_checkpoint_position",
    description=(
        "When a step publishes exactly up to the prompt's checkpoint, Mamba keys the state there. "
        "0.32 does it at a block end too (so a sparse-retention group keeps the replay state) and "
        "places the checkpoint below the prompt less its logits token; 0.31 and 0.30 key it only "
        "inside a block, at the whole prompt's last hash boundary (spec/caching.py:mamba_checkpoint_entry)."
    ),
)

MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP = ReleaseRule(
    name="the Mamba checkpoint drops a unit whenever the EAGLE drop is on",
    holds_for=("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__ (drop_eagle_checkpoint_block); "
    "single_type_kv_cache_manager.py:MambaManager._cache_partial_tail_block",
    description=(
        "Under the EAGLE drop the prompt's Mamba checkpoint sits one hash unit lower, matching the "
        "attention groups' replay boundary. 0.31 sets it on every Mamba manager whenever the engine "
        "drops; 0.30 reads the Mamba manager's own use_eagle, so with another group annotated as "
        "the drafter's the checkpoint stays at the prompt's last boundary "
        "(spec/caching.py:mamba_checkpoint_position)."
    ),
)

PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE = ReleaseRule(
    name="the connector's per-group lookup lets an EAGLE group look past the cap",
    holds_for=("0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
    description=(
        "The per-group lookup behind KVCacheManager.get_computed_blocks_for_connector looks each "
        "group up on its own. From 0.32 an EAGLE (non-Mamba) group looks one proof margin past the "
        "cap, up to the hashed length, before dropping its last block; 0.31 and 0.30 look it up at "
        "the cap, so its hit is one drop unit shorter (reference/connector_hits.py:per_group_hits)."
    ),
)

CONNECTOR_LOOKUP_TAKES_A_CAP = ReleaseRule(
    name="the connector-scheduled lookup takes the scheduler's cap",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks_for_connector",
    description=(
        "From 0.33 the scheduler passes its aux output connector's bound (max_cache_hit_length) to "
        "get_computed_blocks_for_connector, which looks every group up at it (0.34: the least of it, "
        "the request's prefix-cache limit and num_tokens - 1; 0.33: it, or num_tokens - 1 when None). "
        "0.32 and earlier take no cap: every lookup is at num_tokens - 1."
    ),
)

SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK = ReleaseRule(
    name="SimpleCPUOffload refuses a local prefix that ends inside a local chunk",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler.get_num_new_matched_tokens",
    description=(
        "The connector looks up the hashes past the local prefix as if they began the request. From "
        "0.33 it matches nothing when the local prefix ends inside a chunked-local group's attention "
        "chunk (suffix-relative chunks must match absolute ones); 0.32 and earlier look it up anyway "
        "(reference/simple_offload.py)."
    ),
)

SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX = ReleaseRule(
    name="SimpleCPUOffload's eager admission refreshes the CPU copy of the local prefix",
    holds_for=("0.34.0",),
    source="vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler.update_state_after_alloc",
    description=("From 0.34 an eager-mode admission moves the CPU copy of the local prefix its lookup found to "
                 "the most-recent end of the eviction order; 0.33 and earlier leave it (spec/simple_offload_pins.py)."),
)

OFFLOADING_TAKES_LOOKAHEAD_HASHES = ReleaseRule(
    name="the OffloadingConnector takes EAGLE lookahead hashes",
    holds_for=("0.34.0",),
    source="VllmConfig._resolve_num_hash_lookahead_tokens; OffloadingConnector.supports_lookahead_block_hashes",
    description=(
        "From 0.34 the OffloadingConnector takes lookahead hashes: under EAGLE a chunk's key covers "
        "the next token, so no group pops its last chunk and a chunk is stored only once that token "
        "exists. 0.33 keeps every connector on the legacy hashes, its only EAGLE mode there."
    ),
)

FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA = ReleaseRule(
    name="the full-allocation fallback takes sliding-window MLA layers",
    holds_for=("0.34.0",),
    source="vllm/v1/core/kv_cache_planning.py:_try_get_full_allocation_fallback_groups",
    description=(
        "When page sizes cannot be unified, 0.34 still makes one uniform-type group of a model of MLA "
        "and sliding-window layers, sliding-window MLA included (promoted to MLA). 0.30-0.33 give up on "
        "any model with a sliding-window MLA layer (the fallback returns None), so vLLM refuses it."
    ),
)

HISPARSE_LAID_OUT_WHEN_GROUPED = ReleaseRule(
    name="HiSparse's groups are laid out when the layers are grouped",
    holds_for=("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    source="vllm/v1/hisparse/layout.py:get_hisparse_kv_cache_groups, _lay_out_hisparse_groups",
    description=(
        "With attention_config.hisparse_config set, get_kv_cache_groups returns HiSparse's own "
        "groups: the host source, the indexer, resident and hot groups, then the regular ones "
        "(spec/hisparse_grouping.py). 0.30 returns only [every MLA layer as one uniform-type group, "
        "the regular groups], and that only when the model has a non-MLA layer; its layout is made "
        "later, when memory is sized (layout.py:create_hisparse_layout), a rule kvspec does not state."
    ),
)

HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER = ReleaseRule(
    name="HiSparse sizes its hot buffer by the widest top-k buffer of its sparse layers",
    holds_for=("0.33.0", "0.34.0"),
    source="vllm/v1/hisparse/layout.py:_lay_out_hisparse_groups; "
    "vllm/v1/kv_cache_interface.py:MLAAttentionSpec.topk_buffer_width",
    description=(
        "The top-k behind the hot buffer's default size is the largest topk_buffer_width of the "
        "sparse MLA layers, a layer without one counting the model's index_topk. 0.31 and 0.32 "
        "have no topk_buffer_width and take index_topk alone (spec/hisparse_grouping.py:model_top_k)."
    ),
)

RELEASE_RULES = (OFFLOADING_TRIMS_WINDOW_BEFORE_CAP, DRAFT_LAYERS_FLAGGED_ON_SPEC, LOOKAHEAD_BLOCK_HASHES,
                 GROUPS_PLANNED_BEFORE_SIZING, MTP_DRAFT_IS_THE_TRAILING_LAYER,
                 WARNS_AFTER_EVERY_GROUPING_UNDER_THE_DROP, DFLASH_NEEDS_NO_BLOCK_DROP,
                 HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE, ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT,
                 EAGLE_PEEKS_PAST_THE_CAP, MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE,
                 ONE_GROUP_SHARDS_ONLY_A_SHARDED_SPEC, MAMBA_CHECKPOINT_IS_THE_SHARED_PREFIX_ONE,
                 PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN, EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION,
                 MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY, MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP,
                 PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE, CONNECTOR_LOOKUP_TAKES_A_CAP,
                 SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK, SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX,
                 OFFLOADING_TAKES_LOOKAHEAD_HASHES,
                 FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA,
                 HISPARSE_LAID_OUT_WHEN_GROUPED, HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER, *OPEN_FINDING_RULES)
NEWEST_RULES = frozenset(rule for rule in RELEASE_RULES if READ_RELEASES[-1] in rule.holds_for)


def rules_of(version: str) -> frozenset[ReleaseRule]:
    """The rules a target at ``version`` has: those holding for that release, or for the newest
    release read when ``version`` is none of them (see the module docstring)."""
    release = version if version in READ_RELEASES else READ_RELEASES[-1]
    return frozenset(rule for rule in RELEASE_RULES if release in rule.holds_for)
