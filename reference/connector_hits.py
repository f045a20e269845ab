"""An operational model of the engine core's lookup for a request scheduled with a KV
connector (vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks_for_connector);
spec/connector_hits.py says which answers are safe.

Rules, each read from vLLM:

* A request that skips prefix-cache reads (SamplingParams.skip_reading_prefix_cache) gets
  nothing (KVCacheManager.prefix_cache_lookup_enabled).
* The limit is ``num_tokens - 1``, lowered by the scheduler's cap where the release takes one
  (spec/releases.py:CONNECTOR_LOOKUP_TAKES_A_CAP).
* A model without Mamba, of one group, or whose first spec group is not full attention is
  answered as ``get_computed_blocks``: the core's reconciled hit (reference/lookup.py), never
  flagged, its shared-prefix boundary the hit plus the uncached common prefix when there is one.
* Otherwise every spec group is looked up on its own at the limit; an EAGLE
  group that is not Mamba looks one proof margin past it, up to the hashed length, where the
  release has spec/releases.py:PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE
  (kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit_per_group).
* A group that hit deeper than full attention means full attention's blocks were evicted: the
  answer falls back to the core's reconciled hit, unflagged.
* Else the hit is full attention's, each group keeps the blocks of its own hit (untrimmed),
  ``hit_diverged`` says some group hit less, and the boundary is 0.
"""

from __future__ import annotations

from kvspec.reference.lookup import Lookup, coordinator_answer, spec_groups
from kvspec.spec.connector_hits import ConnectorAnswer, max_connector_hit, takes_the_per_group_path
from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.layers import FULL_ATTENTION_KINDS, Kind
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP, NEWEST_RULES, PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE
from kvspec.spec.resolution import (
    FINE_GRAINED_KINDS,
    cache_hit_alignment,
    eagle_proof_margin,
    partial_hash_hits_enabled,
)
from kvspec.spec.setting import CacheState, Hit, LookupSetting


def per_group_hits(setting: LookupSetting, state: CacheState, max_length: int,
                   rules=NEWEST_RULES) -> tuple[tuple[int, ...], tuple[tuple[bool, ...], ...]]:
    """Each group's own hit and its blocks (real or null), every spec group looked up alone."""
    lookup = Lookup(setting, state, cache_hit_alignment(setting))
    partial = partial_hash_hits_enabled(setting)
    hashed = state.num_hashes * setting.hash_block_size
    hits, blocks = [0] * len(setting.groups), [()] * len(setting.groups)
    for sg in spec_groups(setting, drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE)):
        reach = max_length
        if sg.drops and sg.spec.kind != Kind.MAMBA and PER_GROUP_LOOKUP_PEEKS_FOR_EAGLE in rules:
            fine = partial and sg.spec.kind in FINE_GRAINED_KINDS
            reach = min(max_length + eagle_proof_margin(sg.spec.block_size, setting.hash_block_size, fine), hashed)
        hit, mask = lookup.find(sg, reach, sg.drops)
        for gid in sg.group_ids:
            hits[gid], blocks[gid] = hit, tuple(mask)
    return tuple(hits), tuple(blocks)


def full_attention_group(setting: LookupSetting) -> int:
    """The first member of the first full-attention spec group: the lowest full-attention group id
    (HybridKVCacheCoordinator.full_attention_group_id)."""
    return next(gid for gid, g in enumerate(setting.groups) if g.kind in FULL_ATTENTION_KINDS)


def connector_lookup(setting: LookupSetting, state: CacheState, num_tokens: int, cap: int | None = None,
                     skip_reads: bool = False, rules=NEWEST_RULES) -> tuple[Hit, ConnectorAnswer]:
    """The blocks (as a Hit) and the connector-facing numbers for a ``num_tokens`` request."""
    if skip_reads:
        return Hit(0, tuple(() for _ in setting.groups)), ConnectorAnswer(0, False, None)
    limit = max_connector_hit(num_tokens, cap if CONNECTOR_LOOKUP_TAKES_A_CAP in rules else None)
    if not takes_the_per_group_path(setting):
        return _core(setting, state, limit, rules, None)
    hits, blocks = per_group_hits(setting, state, limit, rules)
    full = hits[full_attention_group(setting)]
    if any(hit > full for hit in hits):
        return _core(setting, state, limit, rules, hits)
    return Hit(full, blocks), ConnectorAnswer(full, min(hits) < full, hits)


def _core(setting, state, limit, rules, hits) -> tuple[Hit, ConnectorAnswer]:
    """get_computed_blocks' answer (KVCacheManager.get_computed_blocks: the boundary)."""
    hit, uncached = coordinator_answer(setting, state, limit, rules)
    return hit, ConnectorAnswer(hit.length, False, hits, hit.length + uncached if uncached else 0)
