"""The write side of the prefix cache: what a request's computed tokens leave cached, per group
kind, as plain functions. spec/hits.py says which hits a cache state makes safe; this module
says which cache state vLLM must produce, since a hit is only as long as what was stored.

A request's block table holds, per group, one block per ``block_size`` tokens (column ``i``
covers tokens ``[i * bs, (i + 1) * bs)``); column ``i``'s *full key* is the chained hash of
tokens ``[0, (i + 1) * bs)`` with the group id (hash index ``(i + 1) * bs / hash_bs - 1``).
When the request's computed tokens advance to ``n``:

* only the *cacheable* prefix of ``n`` is published: the hybrid coordinator rounds it down to
  the hit alignment, and a group that drops for EAGLE publishes one block more, the block a
  later EAGLE lookup peeks at before dropping; only finalized KV is, so with one group, and in
  a group that drops, the last ``prefill_lookahead - 1`` computed tokens wait, since
  multi-module MTP may re-prefill them (``cacheable_tokens``, ``reprefillable_tokens``);
* a column is published only if it is whole within that prefix and it can serve a hit
  (``keeps_block``): full attention, MLA and chunked local attention keep every block; a
  sliding window keeps the ``need`` blocks that end at each boundary a later hit may land on
  (every aligned boundary by default; under a retention interval the segment ends, the replay
  boundaries and the shared-prefix junction); Mamba keeps the state ending on each of those
  boundaries (every state by default);
* full attention also publishes the prompt's last hash boundary inside a block as a partial
  entry, at every step once it is within the cacheable prefix (``partial_tail_entry``), on
  the block its table holds there even when a hit shares it, so a shared block carries each
  holder's entry (FullAttentionManager._cache_partial_tail_block, single_type_kv_cache_manager.py:866-901
  in 0.34.0);
* Mamba also publishes the state at the prompt's checkpoint, the position a replay resumes
  at, when a step publishes exactly up to it (``mamba_checkpoint_entry``); the scheduler cuts
  prefill chunks so that they end only where a state is kept
  (``mamba_chunk_stops_where_a_state_is_kept``);
* blocks the window no longer reads are freed, but for the re-prefillable tail's: the table's
  column is the null block (``skipped_tokens``); a freed block keeps its keys until it is evicted;
* only hashed tokens are published: one chained hash per whole hash unit, with lookahead hashes
  only once the tokens after the unit exist (``hashed_units``).

Freeing, preemption and eviction never change what a block holds or the keys it carries, only
where it stands in the free queue; an allocation evicts every key of the block it reuses, and a
reset drops every key (reference/cache_model.py holds those pool rules).

Each rule names the vLLM symbol it models. A column vLLM publishes that these rules do not, or
one they publish that vLLM does not, is a write-side finding: the first may be unsafe (the
shadow judges what the block holds), the second loses hits.
"""

from __future__ import annotations

from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.layers import HITS_LIKE_FULL_KINDS, NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind
from kvspec.spec.releases import (
    EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION,
    MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP,
    MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY,
    NEWEST_RULES,
    PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN,
)
from kvspec.spec.resolution import cache_hit_alignment, scheduler_block_size
from kvspec.spec.setting import LookupSetting, remembered


def same_spec(a: CacheGroup, b: CacheGroup) -> bool:
    """Groups vLLM's hybrid coordinator merges into one spec group (is_eagle_group ignored)."""
    return (a.kind, a.block_size, a.window, a.chunk) == (b.kind, b.block_size, b.window, b.chunk)


@remembered
def publishing_eagle_groups(setting: LookupSetting) -> frozenset[int]:
    """Groups whose manager has ``use_eagle``: with one group, that group if it drops
    (UnitaryKVCacheCoordinator); with several, every member of a spec group with a dropping
    member (HybridKVCacheCoordinator.verify_and_split_kv_cache_groups)."""
    drops = drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE)
    if len(setting.groups) == 1:
        return drops
    return frozenset(gid for gid, group in enumerate(setting.groups)
                     if any(same_spec(group, setting.groups[d]) for d in drops))


def reprefillable_tokens(prefill_lookahead: int) -> int:
    """The trailing computed tokens whose KV is not final yet: multi-module MTP's drafter reads
    ``prefill_lookahead`` (num_speculative_tokens) prompt tokens past a chunk, and may re-prefill
    the chunk's last ``prefill_lookahead - 1`` tokens (KVCacheCoordinator.__init__:
    num_reprefillable_tokens; the engine's lookahead is VllmConfig.num_prefill_lookahead_tokens,
    1 for any other EAGLE drafter, so nothing waits)."""
    return max(0, prefill_lookahead - 1)


def cacheable_tokens(setting: LookupSetting, gid: int, num_computed: int, prefill_lookahead: int = 0) -> int:
    """The prefix of ``num_computed`` group ``gid`` publishes; ``finalized`` is ``num_computed``
    less the re-prefillable tail (``reprefillable_tokens``), never below 0.

    * One group: the finalized tokens (KVCacheCoordinator.get_num_cacheable_tokens).
    * Several: ``num_computed`` rounded down to the scheduler block, unless hits may land inside
      blocks (HybridKVCacheCoordinator._align_cacheable); the tail is not held back.
    * Several, a group that drops for EAGLE, once that rounded prefix is above 0: the finalized
      tokens rounded the same way plus one block, within the finalized tokens
      (HybridKVCacheCoordinator.get_num_cacheable_tokens)."""
    finalized = max(0, num_computed - reprefillable_tokens(prefill_lookahead))
    if len(setting.groups) == 1:
        return finalized
    sched = scheduler_block_size(setting)
    partial = cache_hit_alignment(setting) < sched

    def aligned(tokens: int) -> int:
        return tokens if partial else tokens // sched * sched

    if gid in publishing_eagle_groups(setting) and aligned(num_computed) > 0:
        return min(finalized, aligned(finalized) + setting.groups[gid].block_size)
    return aligned(num_computed)


def replay_boundaries(setting: LookupSetting, num_prompt_tokens: int) -> tuple[int, ...]:
    """Positions a later request replaying this prompt resumes at: a resend is capped at the
    prompt less one token; under the EAGLE drop, the scheduler block below the resend's and
    below the longer sibling's aligned end (kv_cache_coordinator:replay_boundaries)."""
    if not drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE):
        return (num_prompt_tokens - 1,)
    block = scheduler_block_size(setting)
    resend = (num_prompt_tokens - 1) // block * block
    extension = num_prompt_tokens // block * block
    return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))


def reachable_boundaries(setting: LookupSetting, gid: int, num_prompt_tokens: int,
                         shared_prefix_boundary: int, rules=NEWEST_RULES) -> tuple[int, ...]:
    """The boundaries a sparse-retention group keeps a tail at besides its segments: the replay
    boundaries, the shared-prefix junction the lookup found and, for an EAGLE group on a release
    with EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION, one block below it
    (SingleTypeKVCacheManager.cache_blocks)."""
    boundaries = list(replay_boundaries(setting, num_prompt_tokens))
    if shared_prefix_boundary:
        boundaries.append(shared_prefix_boundary)
        if EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION in rules and gid in publishing_eagle_groups(setting):
            boundaries.append(shared_prefix_boundary - setting.groups[gid].block_size)
    return tuple(boundaries)


def window_blocks_needed(group: CacheGroup, eagle: bool) -> int:
    """Contiguous blocks a window hit needs: those holding the ``window - 1`` tokens before it,
    and for EAGLE the peek block past it (SlidingWindowManager._contiguous_blocks_for_hit)."""
    return -(-(group.window - 1) // group.block_size) + (1 if eagle else 0)


def window_tail(group: CacheGroup, boundary_tokens: int, eagle: bool) -> range:
    """The columns a window hit at an aligned ``boundary_tokens`` reads: the ``need`` blocks
    ending at the boundary, or at the block past it when EAGLE peeks there
    (SlidingWindowManager.reachable_block_mask)."""
    end = boundary_tokens // group.block_size + (1 if eagle else 0)
    return range(max(0, end - window_blocks_needed(group, eagle)), end)


def keeps_block(setting: LookupSetting, gid: int, column: int, retention: int | None,
                boundaries: tuple[int, ...]) -> bool:
    """Whether group ``gid`` publishes its whole column ``column``; ``retention`` is the
    prefix_cache_retention_interval (None: dense; 0: only the ``boundaries``; R: once per
    R-token segment, and the ``boundaries``). Full attention and chunked local attention keep
    every block (SingleTypeKVCacheManager.reachable_block_mask); sliding windows and Mamba
    keep what a hit can read (SlidingWindowManager / MambaManager.reachable_block_mask); a group
    outside prefix caching keeps none (spec/kind_writes.py)."""
    group, alignment = setting.groups[gid], cache_hit_alignment(setting)
    if group.kind in NOT_PREFIX_CACHEABLE_KINDS:
        return False
    eagle = gid in publishing_eagle_groups(setting)
    if group.kind == Kind.SLIDING_WINDOW:
        return _window_keeps(group, column, alignment, eagle, retention, boundaries)
    if group.kind == Kind.MAMBA:
        return _mamba_keeps(group, column, alignment, retention, boundaries)
    return True


def _window_keeps(group, column, alignment, eagle, retention, boundaries) -> bool:
    if alignment % group.block_size:
        return True  # the mask is block-granular: a sub-block alignment keeps every block
    need = window_blocks_needed(group, eagle)
    segment = alignment if retention is None else retention or None
    if segment is not None:
        per_segment = segment // group.block_size
        if need >= per_segment:
            return True  # every segment's tail covers the segment
        shifted = column - (1 if eagle else 0)
        if shifted >= 0 and shifted % per_segment >= per_segment - need:
            return True
    if retention is not None:
        return any(column in window_tail(group, b // alignment * alignment, eagle) for b in boundaries)
    return False


def _mamba_keeps(group, column, alignment, retention, boundaries) -> bool:
    if retention is None:
        return True
    if retention:
        per_segment = retention // group.block_size
        if per_segment <= 1 or (column + 1) % per_segment == 0:
            return True
    return any(column == b // alignment * alignment // group.block_size - 1 for b in boundaries)


def hashed_units(num_tokens: int, unit: int, lookahead_tokens: int) -> int:
    """Chained hashes a request of ``num_tokens`` tokens carries: one per whole hash unit, and
    with lookahead hashes only once the ``lookahead_tokens`` after the unit exist, since the
    hash covers them (kv_cache_utils:get_request_block_hasher)."""
    return max(0, num_tokens - lookahead_tokens) // unit


def published_columns(setting: LookupSetting, gid: int, num_cacheable: int, num_hashed: int) -> int:
    """How many leading columns are whole within the published prefix, and hashed
    (SingleTypeKVCacheManager.cache_blocks: num_full_blocks)."""
    return min(num_cacheable, num_hashed) // setting.groups[gid].block_size


def partial_tail_entry(setting: LookupSetting, gid: int, num_prompt_tokens: int, num_hashes: int,
                       num_cacheable: int, rules=NEWEST_RULES) -> tuple[int, int] | None:
    """(column, hash index) of full attention's partial entry: the prompt's last hash boundary
    a resend can hit, when it falls inside a block, once published; None otherwise. A resend
    is capped at the prompt less one token; an EAGLE lookup reads the whole prompt before
    dropping (FullAttentionManager._cache_partial_tail_block; before
    PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN, the whole prompt's last boundary)."""
    group, unit = setting.groups[gid], setting.hash_block_size
    # FullAttentionManager._cache_partial_tail_block, which its subclasses' managers inherit.
    if group.kind not in HITS_LIKE_FULL_KINDS or group.block_size == unit:
        return None
    if PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN in rules:
        limit = num_prompt_tokens if gid in publishing_eagle_groups(setting) else num_prompt_tokens - 1
        boundary = min(limit // unit, num_hashes) * unit
    else:
        boundary = num_prompt_tokens // unit * unit
    if boundary == 0 or boundary > num_cacheable or boundary % group.block_size == 0:
        return None
    return boundary // group.block_size, boundary // unit - 1


def mamba_checkpoint_position(setting: LookupSetting, gid: int, num_prompt_tokens: int, lookahead_tokens: int,
                              rules=NEWEST_RULES) -> int:
    """Where a later request replaying the prompt resumes group ``gid``'s Mamba state: the last
    hash boundary leaving the logits token (and the lookahead hash's tokens) to recompute, or
    under the EAGLE drop one unit below the whole prompt's, the unit EAGLE drops
    (vllm.v1.kv_cache_interface:get_mamba_prefill_checkpoint_position). Before
    MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY, the whole prompt's last boundary, less the
    unit under the drop; before MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP, under the group's
    own drop only."""
    unit, drop = setting.hash_block_size, setting.use_eagle
    if MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP not in rules:
        drop = gid in publishing_eagle_groups(setting)
    if MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY in rules:
        limit = num_prompt_tokens if drop else num_prompt_tokens - max(1, lookahead_tokens)
    else:
        limit = num_prompt_tokens
    return max(limit // unit * unit - (unit if drop else 0), 0)


def mamba_checkpoint_entry(setting: LookupSetting, gid: int, num_prompt_tokens: int, lookahead_tokens: int,
                           published_at: tuple[int, ...], rules=NEWEST_RULES) -> tuple[int, int] | None:
    """(column, hash index) of the Mamba state published at the prompt's checkpoint, when a
    step published exactly up to it (``published_at``: the cacheable prefix after each step):
    the state the chunk ending there left in the column (MambaManager._cache_partial_tail_block).
    Before MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY only inside a block."""
    block_size = setting.groups[gid].block_size
    position = mamba_checkpoint_position(setting, gid, num_prompt_tokens, lookahead_tokens, rules)
    if position == 0 or position not in published_at:
        return None
    if MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY not in rules and (
            block_size == setting.hash_block_size or position % block_size == 0):
        return None
    return -(-position // block_size) - 1, position // setting.hash_block_size - 1


def mamba_chunk_stops_where_a_state_is_kept(setting: LookupSetting, gid: int, start: int, end: int,
                                            prefill_end: int, checkpoint: int) -> bool:
    """A Mamba state is written only where a chunk ends, so a prefill chunk that stops short of
    the prompt's end stops on a Mamba block boundary or at the prompt's checkpoint, never in
    between (vllm.v1.core.sched.scheduler:Scheduler._mamba_block_aligned_split, align mode,
    no internal checkpoint blocks)."""
    block = setting.groups[gid].block_size
    return end >= prefill_end or end % block == 0 or end == checkpoint or start == end


def skipped_tokens(group: CacheGroup, num_computed: int, prefill_lookahead: int = 0) -> int:
    """Leading tokens whose whole blocks are freed:

    * a sliding window: those before the window, less the re-prefillable tail its blocks keep
      (SlidingWindowManager.get_num_skipped_tokens, SlidingWindowSpec.extra_retained_tokens,
      which kv_cache_planning sets to ``reprefillable_tokens``);
    * chunked local attention: those before the current chunk
      (ChunkedLocalAttentionManager.get_num_skipped_tokens);
    * full attention: none."""
    if group.kind == Kind.SLIDING_WINDOW:
        return max(0, num_computed - group.window + 1 - reprefillable_tokens(prefill_lookahead))
    if group.kind == Kind.CHUNKED_LOCAL:
        return num_computed // group.chunk * group.chunk
    return 0
