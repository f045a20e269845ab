"""An obviously-correct prediction of what one running request's block table publishes in the
prefix cache, from the scheduler-level facts alone (its prompt, its hit, how far it is
computed), by the rules of spec/caching.py:

* a column taken from the request's hit was published by whoever computed it: it carries at
  least its full key (a window's columns before the hit are the null block);
* every other column carries exactly the keys this request published on it: its full key if
  the column is whole within the cacheable prefix and kept, and full attention's partial
  entry if this is the prompt's tail column (published again at every step, beside the full
  key once the block is whole); plus, once another request's hit shares the block, what that
  holder publishes on it (kvspec/stateful/writes.py judges the union);
* the columns a sliding window or a chunked-local group no longer reads (but for a window's
  re-prefillable tail) are the null block, and only those.

A Mamba checkpoint inside a block is on the column's block only right after the step that
published it: the next step copies the state to a private block and the key stays behind on
the old one (MambaManager.allocate_new_blocks), where the pool model follows it.
The pool mechanics under these writes (eviction, reference counts, the free queue) are
reference/cache_model.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.caching import (
    cacheable_tokens,
    keeps_block,
    mamba_checkpoint_entry,
    partial_tail_entry,
    published_columns,
    reachable_boundaries,
    skipped_tokens,
)
from kvspec.spec.hits import block_key, window_start
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, Kind
from kvspec.spec.releases import NEWEST_RULES
from kvspec.spec.setting import LookupSetting


@dataclass(frozen=True)
class RequestFacts:
    """What the scheduler knows of one running request after a step."""

    num_prompt_tokens: int
    num_hashes: int  # chained hashes published so far (hash units)
    num_computed: int  # tokens computed; the last prefill_lookahead - 1 may be re-prefilled
    hit: int  # the prefix-cache hit it was admitted with
    freed_at: int  # computed tokens at its latest step's start, where the window freed blocks
    shared_prefix_boundary: int  # the junction the lookup found (0: none)
    step_ends: tuple[int, ...] = ()  # computed tokens after each step since its admission
    lookahead_tokens: int = 0  # the engine's num_hash_lookahead_tokens
    prefill_lookahead: int = 0  # the engine's num_prefill_lookahead_tokens (multi-module MTP: its k)


@dataclass(frozen=True)
class ColumnPrediction:
    """The hash indices a column's block carries, exactly, or at least (a hit's column)."""

    hash_indices: frozenset[int]
    at_least: bool = False


@dataclass(frozen=True)
class GroupPrediction:
    null_columns: int | None  # leading columns that are the null block; None: not judged (Mamba)
    columns: dict[int, ColumnPrediction]  # non-null columns judged


def predict(setting: LookupSetting, gid: int, facts: RequestFacts, table_length: int,
            null_columns: frozenset[int], retention: int | None, rules=NEWEST_RULES) -> GroupPrediction:
    """What group ``gid``'s ``table_length`` columns of this request carry; ``null_columns``
    are those vLLM's table holds as the null block (their blocks were freed or never held)."""
    group = setting.groups[gid]
    if group.kind in NOT_PREFIX_CACHEABLE_KINDS:
        # Its one ring block carries no key: a hit gives it none (the coordinators skip it) and
        # nothing publishes one (CircularBufferManager.cache_blocks returns; spec/kind_writes.py).
        return GroupPrediction(0, {column: ColumnPrediction(frozenset()) for column in range(table_length)
                                   if column not in null_columns})
    cacheable = cacheable_tokens(setting, gid, facts.num_computed, facts.prefill_lookahead)
    whole = published_columns(setting, gid, cacheable, facts.num_hashes * setting.hash_block_size)
    boundaries = reachable_boundaries(setting, gid, facts.num_prompt_tokens, facts.shared_prefix_boundary, rules)
    partial = partial_tail_entry(setting, gid, facts.num_prompt_tokens, facts.num_hashes, cacheable, rules)
    if group.kind == Kind.MAMBA:
        published_at = tuple(cacheable_tokens(setting, gid, end, facts.prefill_lookahead) for end in facts.step_ends)
        partial = mamba_checkpoint_entry(setting, gid, facts.num_prompt_tokens, facts.lookahead_tokens, published_at,
                                         rules)
        # A checkpoint inside a block stays on the block that held it only until the next step,
        # which copies the state to a private block and leaves the key behind
        # (MambaManager.allocate_new_blocks, the copy-on-write of _partial_hit_reqs).
        position = (partial[1] + 1) * setting.hash_block_size if partial else 0
        if partial and position % group.block_size and published_at[-1] != position:
            partial = None
    inherited = facts.hit // group.block_size  # whole columns of the hit
    columns: dict[int, ColumnPrediction] = {}
    for column in range(table_length):
        if column in null_columns:
            continue
        own = block_key(setting, group, column)
        tail = {partial[1]} if partial is not None and partial[0] == column else set()
        if column < inherited:
            columns[column] = ColumnPrediction(frozenset({own} | tail), at_least=True)
        elif column < whole and keeps_block(setting, gid, column, retention, boundaries):
            columns[column] = ColumnPrediction(frozenset({own} | tail))
        else:
            columns[column] = ColumnPrediction(frozenset(tail))
    if group.kind == Kind.MAMBA:
        return GroupPrediction(None, columns)
    # A step frees before it allocates, from the tokens computed before it
    # (KVCacheManager.allocate_slots, remove_skipped_blocks); the columns before the window at
    # the hit came as null placeholders (find_longest_cache_hit), even where the window retains
    # a re-prefillable tail past them.
    skipped = max(skipped_tokens(group, facts.freed_at, facts.prefill_lookahead), window_start(group, facts.hit))
    freed = min(skipped // group.block_size, table_length)
    return GroupPrediction(freed, columns)
