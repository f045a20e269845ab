"""Deliberately broken connector-scheduled lookups, to prove that the check 'connector-scheduled
core lookups' (kvspec/gate/connector_hits.py) bites. Each wraps, in memory, the one vLLM
function it breaks (never a copy of its code) and returns the undo; impl/broken.py registers
them as BrokenVariants with the fields below.
"""

from __future__ import annotations

from kvspec.gate.names import Check
from kvspec.impl.patching import Undo, install
from kvspec.impl.vllm_symbols import CONNECTOR_COMPUTED_BLOCKS, HYBRID_FIND_PER_GROUP, SIMPLE_CPU_OFFLOAD_MATCHED, raw

CAUGHT_BY = (Check.CONNECTOR_HITS,)

FLAG_NAME = "connector-hit-never-diverges"
FLAG_UPSTREAM = "none reported: a plausible bug, the divergence flag of #46453 lost on the way to the scheduler"
FLAG_WRONG_BEHAVIOUR = "get_computed_blocks_for_connector reports the full-attention hit unflagged while Mamba lags"
FLAG_INVARIANT = "an unflagged connector hit is safe for every group (spec/connector_hits.py:an_unflagged_hit_is_safe)"

CLAMP_NAME = "per-group-hits-clamped-to-full-attention"
CLAMP_UPSTREAM = "none reported: a plausible bug, a group past full attention reported at full attention's hit"
CLAMP_WRONG_BEHAVIOUR = ("find_longest_cache_hit_per_group caps every group's hit at full attention's, so the "
                         "fallback to the reconciled hit never runs")
CLAMP_INVARIANT = ("every per-group hit is safe for its group, and a group past full attention falls back to the "
                   "core's hit (spec/connector_hits.py, reference/connector_hits.py)")


def flag_never_set(adapter) -> Undo:
    """KVCacheManager.get_computed_blocks_for_connector answers as vLLM does, hit_diverged always False."""
    original = raw(CONNECTOR_COMPUTED_BLOCKS)

    def get_computed_blocks_for_connector(self, request, *args, **kwargs):
        blocks, num_local, boundary, _diverged = original(self, request, *args, **kwargs)
        return blocks, num_local, boundary, False

    return install(CONNECTOR_COMPUTED_BLOCKS, get_computed_blocks_for_connector)


def hits_clamped_to_full_attention(adapter) -> Undo:
    """HybridKVCacheCoordinator.find_longest_cache_hit_per_group answers as vLLM does, every
    group's hit then capped at the full-attention group's."""
    original = raw(HYBRID_FIND_PER_GROUP)

    def find_longest_cache_hit_per_group(self, block_hashes, max_cache_hit_length):
        blocks, hits = original(self, block_hashes, max_cache_hit_length)
        if self.full_attention_group_id is None:
            return blocks, hits
        full = hits[self.full_attention_group_id]
        return blocks, tuple(min(hit, full) for hit in hits)

    return install(HYBRID_FIND_PER_GROUP, find_longest_cache_hit_per_group)


SIMPLE_NAME = "simple-offload-counts-the-local-prefix"
SIMPLE_UPSTREAM = "none reported: a plausible bug, the CPU hit reported from the request's start, not past its local prefix"
SIMPLE_WRONG_BEHAVIOUR = "SimpleCPUOffload's get_num_new_matched_tokens adds the local prefix to the tokens it matched"
SIMPLE_INVARIANT = ("the external tokens past the local prefix are safe and equal the reference's "
                    "(spec/simple_offload.py, reference/simple_offload.py)")
SIMPLE_CAUGHT_BY = (Check.SIMPLE_OFFLOAD,)


def matched_counts_the_local_prefix(adapter) -> Undo:
    """SimpleCPUOffloadScheduler.get_num_new_matched_tokens answers as vLLM does, then adds the
    local prefix to a non-zero match."""
    original = raw(SIMPLE_CPU_OFFLOAD_MATCHED)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        matched, load_async = original(self, request, num_computed_tokens)
        return (matched + num_computed_tokens if matched else matched), load_async

    return install(SIMPLE_CPU_OFFLOAD_MATCHED, get_num_new_matched_tokens)
