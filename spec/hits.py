"""The prefix-cache hit-length rules: which reused prefix lengths are SAFE, as plain functions.

A lookup asks: of the ``M`` tokens a request may take from the cache, how many ``H`` can it
reuse? This module says which ``H`` are safe; it does not say which one vLLM picks (that is
reference/lookup.py). Safety is about what the reused KV must contain, group by group:

* full attention reads every token before ``H``;
* a sliding window of ``W`` reads the ``W - 1`` tokens before ``H``;
* chunked local attention reads from the start of ``H``'s chunk up to ``H``;
* a Mamba group reads one recurrent state: the one after exactly ``H`` tokens;
* R-SWA, sink full attention and the hidden-state cache read every token before ``H``, as full
  attention does: their specs subclass FullAttentionSpec and their managers keep
  FullAttentionManager.find_longest_cache_hit (RSWAManager frees decode-time gap blocks only in
  remove_skipped_blocks, after the prompt; SinkFullAttentionManager only asserts its sink length);
* a group that takes no part in prefix caching (circular buffer, the HiSparse hot and resident
  groups: KVCacheSpec.prefix_cacheable False) is never read from the cache: the coordinators skip
  it (HybridKVCacheCoordinator.verify_and_split_kv_cache_groups,
  MooncakeStoreCoordinator._verify_and_split_kv_cache_groups) and its manager answers 0
  (CircularBufferManager / _HiSparseAuxiliaryManager.find_longest_cache_hit), so a hit claims
  nothing from it (a circular buffer holds the raw keys of the token group still being
  compressed, CircularBufferSpec); with no prefix-cacheable group at all, no hit but 0 is safe;
* HiSparse's host source (CacheGroup.hisparse_source) reads every token before ``H``, as full
  attention: HiSparseSourceManager subclasses FullAttentionManager. Unlike full attention, the
  core coordinator leaves its blocks untrimmed at ``H`` (retains_longer_hit: the host tier keeps
  prefixes the GPU groups have lost), so its answer holds the blocks of its own longer hit, which
  KVCacheManager.allocate_slots keeps only up to the local plus external hit. The safety of ``H``
  is judged on every group as ever. The Mooncake store picks a manager by spec alone
  (KVCacheSpecRegistry.get_manager_class, no role), so there the source is plain MLA;
* an EAGLE drafter's KV at position ``p`` depends on token ``p + 1``, which the entry keyed by
  the prefix ``[0, p + 1)`` does not cover. So a group that may hold the drafter's layers must
  also prove the token at ``H``: one more cached unit past ``H``. Mamba holds no drafter layers
  and never needs it.

Two tiers. The target's KV and state (the first four) decide the output: a hit without them is
UNSAFE and always fails the gate. The drafter's proof (the last) decides only how many drafts
are accepted, since the target verifies every draft (vLLM #52735): a hit without it is
DRAFTER-UNPROVEN, recorded like a divergence (kvspec/divergences/known.py) and failing when new, or
always with ``--strict-drafter``. ``unsafe_reason`` and ``max_safe_hit`` demand both tiers.

Cache entries are ``(group_id, hash_index)``: the chained hash of the first
``(hash_index + 1) * hash_block_size`` tokens is cached for that group. A group's block of
``k * hash_block_size`` tokens at block index ``i`` is keyed by hash index ``(i + 1) * k - 1``
(vllm.v1.core.kv_cache_utils:BlockHashListWithBlockSize); an entry between two block ends is a
partial block (full attention's prompt tail, or a fine-grained Mamba state).

Never in a lookup (preconditions, ``lookup_preconditions_hold``): cross attention, whose model is
encoder-decoder and runs without prefix caching (vllm.config.model:ModelConfig
.is_prefix_caching_supported; CrossAttentionManager.find_longest_cache_hit raises if asked);
encoder-only attention, whose spec the worker keeps to itself and never hands the scheduler
(vllm.v1.worker.gpu.model_states.encoder_only); a hybrid with no prefix-cacheable group
(HybridKVCacheCoordinator.verify_and_split_kv_cache_groups asserts one). One group outside prefix
caching is looked up alone (UnitaryKVCacheCoordinator; the engine sizes blocks without it,
vllm.v1.engine.core, and nothing refuses it): its manager answers 0. HiSparse's groups
come only as its layout lays them out (``hisparse_layout_holds``). Sink full attention
never reaches a lookup on vLLM 0.30-0.34 either: no coordinator can build its manager
(spec/releases.py:SINK_MANAGER_REFUSES_THE_ZEROING_FLAG); its rule above is what
FullAttentionManager would do once it can.

The data (LookupSetting, CacheState, Hit) is spec/setting.py; the sizes and alignment vLLM
resolves are spec/resolution.py; which groups may hold the drafter is spec/drafter.py.
"""

from __future__ import annotations

from kvspec.spec.drafter import DrafterPolicy, drafter_kv_groups
from kvspec.spec.layers import (
    HISPARSE_AUXILIARY_KINDS,
    NEVER_HIT_KINDS,
    NOT_PREFIX_CACHEABLE_KINDS,
    CacheGroup,
    Kind,
)
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import LookupSetting


def units_per_block(setting: LookupSetting, group: CacheGroup) -> int:
    """Hash units in one of the group's blocks (kv_cache_utils:BlockHashListWithBlockSize.scale_factor)."""
    return group.block_size // setting.hash_block_size


def block_key(setting: LookupSetting, group: CacheGroup, block_index: int) -> int:
    """The hash index a whole block is cached under: the unit that ends it
    (vllm.v1.core.kv_cache_utils:BlockHashListWithBlockSize)."""
    return (block_index + 1) * units_per_block(setting, group) - 1


def lookup_preconditions_hold(groups: tuple[CacheGroup, ...]) -> bool:
    """vLLM lets these groups reach a prefix-cache lookup: none is cross or encoder-only
    attention, one group alone or some prefix-cacheable group, and HiSparse's groups as its
    layout makes them (see the module docstring)."""
    return (
        not any(g.kind in NEVER_HIT_KINDS for g in groups)
        and (len(groups) == 1 or any(g.kind not in NOT_PREFIX_CACHEABLE_KINDS for g in groups))
        and hisparse_layout_holds(groups)
    )


def hisparse_layout_holds(groups: tuple[CacheGroup, ...]) -> bool:
    """HiSparse's groups are as its layout makes them (vllm.v1.hisparse.layout
    :_lay_out_hisparse_groups): hot and resident groups only beside exactly one host source that
    precedes them, all at one block size, and a source only with them (HiSparseCoordinator
    refuses a second source, a source after a resident group, and other block sizes)."""
    sources = [gid for gid, g in enumerate(groups) if g.hisparse_source]
    auxiliary = [gid for gid, g in enumerate(groups) if g.kind in HISPARSE_AUXILIARY_KINDS]
    if not sources:
        return not auxiliary
    (source, *others) = sources
    return not others and bool(auxiliary) and all(
        source < gid and groups[gid].block_size == groups[source].block_size for gid in auxiliary
    )


def window_start(group: CacheGroup, hit: int) -> int:
    """The first token the next token (at position ``hit``) attends to, for an attention group
    (single_type_kv_cache_manager:SlidingWindowManager / ChunkedLocalAttentionManager
    .get_num_skipped_tokens)."""
    if group.kind == Kind.SLIDING_WINDOW:
        return max(0, hit - group.window + 1)
    if group.kind == Kind.CHUNKED_LOCAL:
        return hit // group.chunk * group.chunk
    return 0


def proves_tokens(setting: LookupSetting, state, gid: int, start: int, end: int) -> bool:
    """Every token in ``[start, end)`` is in the group's cached KV: each block touching the range
    has an entry reaching ``end`` or its own end, whichever comes first. KV is append-only, so an
    entry proves its block up to where it ends (vllm.v1.core.block_pool:cache_partial_block)."""
    group, unit = setting.groups[gid], setting.hash_block_size
    per_block = units_per_block(setting, group)
    for block in range(start // group.block_size, -(-end // group.block_size)):
        must_reach = min(end, (block + 1) * group.block_size)
        entries = range(block * per_block, (block + 1) * per_block)
        if not any((gid, j) in state.cached and (j + 1) * unit >= must_reach for j in entries):
            return False
    return True


def group_unsafe_reason(
    setting: LookupSetting, state, gid: int, hit: int, policy: DrafterPolicy = DrafterPolicy.CORE
) -> str | None:
    """Why group ``gid`` cannot resume at ``hit``, either tier (None if it can); ``policy``
    decides which groups may hold the drafter (spec/drafter.py)."""
    return group_target_unsafe_reason(setting, state, gid, hit) or group_drafter_unproven_reason(
        setting, state, gid, hit, policy
    )


def group_target_unsafe_reason(setting: LookupSetting, state, gid: int, hit: int) -> str | None:
    """Why group ``gid``'s target KV or state is not there to resume at ``hit``: its window's KV,
    or for Mamba the state at exactly ``hit`` (single_type_kv_cache_manager:*.find_longest_cache_hit).
    A hit of 0 reuses nothing."""
    group, unit = setting.groups[gid], setting.hash_block_size
    if hit == 0 or group.kind in NOT_PREFIX_CACHEABLE_KINDS:  # nothing reused from the cache
        return None
    if group.kind == Kind.MAMBA:
        # The state after exactly `hit` tokens, never one before or after it.
        if hit % unit or (gid, hit // unit - 1) not in state.cached:
            return f"group {gid} (mamba) has no state cached at exactly {hit}"
        return None
    start = window_start(group, hit)
    if not proves_tokens(setting, state, gid, start, hit):
        return f"group {gid} ({group.kind}) lacks KV for tokens [{start}, {hit})"
    return None


def group_drafter_unproven_reason(
    setting: LookupSetting, state, gid: int, hit: int, policy: DrafterPolicy = DrafterPolicy.CORE
) -> str | None:
    """Why group ``gid``, which may hold the drafter under ``policy`` (spec/drafter.py:
    drafter_kv_groups, never Mamba), has nothing proving the token at ``hit`` that its drafter
    KV at ``hit - 1`` was computed with (the drop of
    single_type_kv_cache_manager:FullAttentionManager.find_longest_cache_hit and
    SlidingWindowManager._contiguous_blocks_for_hit, the peek of eagle_proof_margin)."""
    if hit == 0 or gid not in drafter_kv_groups(setting.groups, setting.use_eagle, policy):
        return None
    if setting.groups[gid].kind in NOT_PREFIX_CACHEABLE_KINDS:  # its KV is never reused
        return None
    if not proves_tokens(setting, state, gid, hit, hit + 1):
        return f"group {gid} ({setting.groups[gid].kind}) may hold the drafter but nothing proves token {hit}"
    return None


def blocks_read(setting: LookupSetting, gid: int, hit: int) -> range:
    """The block indices group ``gid`` reads when resuming at ``hit``, so a lookup must hand it a
    real (non-null) block at each: the attention window's blocks, or the block holding the
    Mamba state (single_type_kv_cache_manager:*.get_num_skipped_tokens and the null-block
    placeholders of find_longest_cache_hit)."""
    group = setting.groups[gid]
    if hit == 0 or group.kind in NOT_PREFIX_CACHEABLE_KINDS:
        return range(0)
    if group.kind == Kind.MAMBA:
        return range((hit - 1) // group.block_size, (hit - 1) // group.block_size + 1)
    return range(window_start(group, hit) // group.block_size, -(-hit // group.block_size))


def unsafe_reason(setting: LookupSetting, state, hit: int, max_length: int) -> str | None:
    """Why ``hit`` is not a safe answer to a lookup capped at ``max_length``, either tier (None
    if it is): the target's (target_unsafe_reason), then the drafter's proof
    (drafter_unproven_reason)."""
    return target_unsafe_reason(setting, state, hit, max_length) or drafter_unproven_reason(setting, state, hit)


def target_unsafe_reason(setting: LookupSetting, state, hit: int, max_length: int) -> str | None:
    """Why ``hit`` claims target KV or state that is not there (None if it does not). Safe means:
    within the cap, on the alignment, and safe for every group at the same length, so a Mamba
    state is never adopted past what the attention groups verified
    (vllm.v1.core.kv_cache_coordinator:HybridKVCacheCoordinator.find_longest_cache_hit)."""
    if not 0 <= hit <= max_length:
        return f"hit {hit} outside [0, {max_length}]"
    alignment = cache_hit_alignment(setting)
    if hit % alignment:
        return f"hit {hit} is not a multiple of the alignment {alignment}"
    if hit and all(g.kind in NOT_PREFIX_CACHEABLE_KINDS for g in setting.groups):
        # A circular buffer holds only the keys of the group still being compressed, which a
        # compressed group beside it bounds; alone, nothing cached vouches for any token.
        return f"hit {hit} with no prefix-cacheable group to hold it"
    for gid in range(len(setting.groups)):
        if reason := group_target_unsafe_reason(setting, state, gid, hit):
            return reason
    return None


def drafter_unproven_reason(setting: LookupSetting, state, hit: int) -> str | None:
    """Why a group that may hold the drafter has nothing proving the token at ``hit`` (None if
    every such group has it): the drafter tier of the module docstring."""
    for gid in range(len(setting.groups)):
        if reason := group_drafter_unproven_reason(setting, state, gid, hit):
            return reason
    return None


def is_safe_hit(setting: LookupSetting, state, hit: int, max_length: int) -> bool:
    """``hit`` tokens can be reused by every group (see unsafe_reason)."""
    return unsafe_reason(setting, state, hit, max_length) is None


def max_safe_hit(setting: LookupSetting, state, max_length: int) -> int:
    """The longest safe hit, by trying every aligned length (safety is not monotone: a Mamba
    state exists at some lengths and not at shorter ones)."""
    alignment = cache_hit_alignment(setting)
    return max(h for h in range(0, max_length + 1, alignment) if is_safe_hit(setting, state, h, max_length))
