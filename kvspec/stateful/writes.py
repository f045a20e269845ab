"""The write-side judge of the stateful check: after every step, the stepped request's block
table must publish exactly what reference/published.py predicts from spec/caching.py (the keys
each column's block carries, the columns a window has freed). A key vLLM publishes that the
spec does not is a write the rules never make; a key the spec publishes that vLLM does not is
a hit lost for every later request. Both fail the check (STATEFUL_WRITES) with the request's
facts and the column, so a finding reads as the write it is.

A block shared by a hit carries what each of its holders publishes on it: a request that hit
a block whole still publishes its own prompt's partial entry on it
(FullAttentionManager._cache_partial_tail_block takes ``req_to_blocks[...][block_idx]``
whatever its origin, and BlockPool.cache_partial_block adds the entry beside a longer primary
key; vllm/v1/core/single_type_kv_cache_manager.py:866-901 and block_pool.py:459-530 in 0.34.0).
So a column's extra keys are judged against its own prediction and the keys the block's other
holders were predicted to publish on it since it was last allocated, never against its own
earlier ones.
"""

from __future__ import annotations

from kvspec.oracles.invariants import STATEFUL_WRITES, fail
from kvspec.reference.published import GroupPrediction, RequestFacts, predict
from kvspec.spec.caching import (
    cacheable_tokens,
    hashed_units,
    mamba_checkpoint_position,
    mamba_chunk_stops_where_a_state_is_kept,
)
from kvspec.spec.layers import Kind
from kvspec.stateful.shadow import NULL_BLOCK


class WriteJudge:
    def __init__(self, config, live, stats):
        self.config, self.live, self.stats = config, live, stats
        self.setting = config.setting
        self.lookahead_tokens = config.hash_lookahead_tokens
        self.step_ends: dict[str, list[int]] = {}  # per request, since its latest admission
        self.judged_write: tuple | None = None  # the column that failed, for a replay
        # block -> request -> the keys that request's prediction put on it, since the block's allocation
        self.published_on: dict[int, dict[str, set[bytes]]] = {}

    def reallocated(self, block_ids) -> None:
        """Blocks handed out afresh (their old keys evicted): what their earlier holders published is gone."""
        for block_id in block_ids:
            self.published_on.pop(block_id, None)

    def judge(self, step) -> None:
        """What the request stepped in ``step`` publishes and frees, against the prediction."""
        scheduled = self.live.requests[step.request_id]
        request = scheduled.request
        if step.hit is not None:
            self.step_ends[step.request_id] = []
        self.step_ends[step.request_id].append(step.end)
        num_hashes = hashed_units(request.num_tokens, self.setting.hash_block_size, self.lookahead_tokens)
        if num_hashes != len(request.block_hashes):
            fail(STATEFUL_WRITES, f"{step.request_id}: {request.num_tokens} tokens carry {len(request.block_hashes)} "
                                  f"chained hashes, spec/caching.py:hashed_units says {num_hashes}")
        facts = RequestFacts(
            num_prompt_tokens=request.num_prompt_tokens,
            num_hashes=num_hashes,
            num_computed=request.num_computed_tokens,
            hit=scheduled.hit_length,
            freed_at=step.start,
            shared_prefix_boundary=request.shared_prefix_boundary or 0,
            step_ends=tuple(self.step_ends[step.request_id]),
            lookahead_tokens=self.lookahead_tokens,
            prefill_lookahead=self.config.prefill_lookahead,
        )
        if facts.shared_prefix_boundary:
            self.stats["steps after a shared-prefix junction"] += 1
        if any(cacheable_tokens(self.setting, gid, facts.num_computed, facts.prefill_lookahead)
               < cacheable_tokens(self.setting, gid, facts.num_computed) for gid in range(len(step.tables))):
            self.stats["steps holding back a re-prefillable tail"] += 1
        self._judge_mamba_chunk(step, request)
        for gid, table in enumerate(step.tables):
            nulls = frozenset(c for c, block in enumerate(table) if block == NULL_BLOCK)
            prediction = predict(self.setting, gid, facts, len(table), nulls, self.config.retention_interval,
                                 self.live.rules)
            self._judge_group(step.request_id, gid, request.block_hashes, table, nulls, prediction, facts)

    def _judge_mamba_chunk(self, step, request) -> None:
        """Where the scheduler's split ended this step, for each Mamba group."""
        tokens_before = request.num_tokens - (step.sampled is not None)
        prefill_end = max(request.num_prompt_tokens, tokens_before - 1)
        for gid, group in enumerate(self.config.groups):
            if group.kind != Kind.MAMBA:
                continue
            checkpoint = mamba_checkpoint_position(self.setting, gid, request.num_prompt_tokens, self.lookahead_tokens,
                                                   self.live.rules)
            if not mamba_chunk_stops_where_a_state_is_kept(self.setting, gid, step.start, step.end, prefill_end,
                                                           checkpoint):
                unit = self.setting.hash_block_size
                if step.end % unit == 0:  # the replay asserts the state the chunk stopped at is kept
                    self.judged_write = (step.request_id, gid, (step.end - 1) // group.block_size,
                                         [step.end // unit - 1], [])
                fail(STATEFUL_WRITES, f"{step.request_id}: the chunk [{step.start}, {step.end}) of a {prefill_end}-token "
                                      f"prefill stops inside Mamba group {gid}'s block of {group.block_size}, not at "
                                      f"the checkpoint {checkpoint} (spec/caching.py)")

    def _judge_group(self, who, gid, hashes, table, nulls, prediction: GroupPrediction, facts) -> None:
        if prediction.null_columns is not None and nulls != frozenset(range(prediction.null_columns)):
            fail(STATEFUL_WRITES, f"{who}: group {gid} ({self.config.groups[gid].kind}) holds the null block at columns "
                                  f"{sorted(nulls)}, spec/caching.py frees exactly columns "
                                  f"0..{prediction.null_columns - 1} ({_facts(facts)})")
        group = self.config.groups[gid]
        for column, expected in prediction.columns.items():
            block = table[column]
            carried = self.live.keys_on(block)
            indices = expected.hash_indices
            wanted = {self.live.cache_key(hashes[j], gid) for j in indices if 0 <= j < len(hashes)}
            missing = wanted - carried
            holders = self.published_on.setdefault(block, {})
            by_others = set().union(*(keys for holder, keys in holders.items() if holder != who))
            extra = set() if expected.at_least else carried - wanted - by_others
            if missing or extra:
                # For the replay of the whole run (kvspec/gate/stateful.py): which of this
                # request's keys the column's block must and must not carry.
                index_of = {self.live.cache_key(block_hash, gid): j for j, block_hash in enumerate(hashes)}
                self.judged_write = (who, gid, column, sorted(index_of[k] for k in missing),
                                     sorted(index_of[k] for k in extra if k in index_of))
                fail(STATEFUL_WRITES, f"{who}: group {gid} ({group.kind}, block {group.block_size}) column {column} "
                                      f"(block {table[column]}) carries hash indices {_indices(carried, index_of)}, "
                                      f"spec/caching.py publishes {sorted(indices)}"
                                      f"{' at least' if expected.at_least else ''} ({_facts(facts)})")
            holders.setdefault(who, set()).update(wanted)
            if wanted:
                self.stats[f"blocks published, {group.kind}"] += 1


def _indices(keys, index_of) -> str:
    known = sorted(index_of[k] for k in keys if k in index_of)
    foreign = sum(k not in index_of for k in keys)
    return f"{known}" + (f" and {foreign} key(s) of another prefix" if foreign else "")


def _facts(facts: RequestFacts) -> str:
    return (f"prompt {facts.num_prompt_tokens}, computed {facts.num_computed}, hit {facts.hit}, "
            f"step from {facts.freed_at}, {facts.num_hashes} hashes, junction {facts.shared_prefix_boundary}")
