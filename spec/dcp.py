"""Decode context parallelism (DCP): each attention block's KV is sharded over ``dcp`` ranks, so
the scheduler sees an attention block as ``dcp`` times its per-rank size; a Mamba state is not
sharded. These rules restate spec/hits.py's block-size rules at those effective sizes; at
``dcp == 1`` they are spec/hits.py's (tests/test_block_sizes.py checks it).

Lookups under DCP are the ordinary lookups over the effective block sizes (``DcpSetting.view``), with
the hit alignment of ``dcp_cache_hit_alignment``. vLLM refuses DCP > 1 beside sliding-window or
chunked-local groups in a hybrid coordinator, and in those managers' finders
(kv_cache_coordinator:HybridKVCacheCoordinator.__init__, single_type_kv_cache_manager).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import reduce

from kvspec.spec.hits import FINE_GRAINED_KINDS, LookupSetting, resolved_hash_block_size
from kvspec.spec.layers import ATTENTION_KINDS, CacheGroup, Kind

# The kinds a hybrid coordinator accepts with DCP > 1 (full attention, and Mamba, unsharded).
DCP_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.MAMBA})


def sharded_block_size(group: CacheGroup, dcp: int) -> int:
    """Tokens one block spans under DCP: attention specs are sharded, Mamba states are not
    (vllm.v1.core.kv_cache_utils:resolve_dcp_kv_block_size; AttentionSpec.dcp_sharded)."""
    return group.block_size * dcp if group.kind in ATTENTION_KINDS else group.block_size


@dataclass(frozen=True)
class DcpSetting:
    """A lookup's fixed inputs under DCP: the groups at their per-rank block sizes (what the
    model runner reports), the hash unit, and the number of DCP ranks."""

    groups: tuple[CacheGroup, ...]
    hash_block_size: int
    dcp: int
    use_eagle: bool = False
    allow_partial_hash_hits: bool = True

    def view(self) -> LookupSetting:
        """The setting as the managers see it: every block at its sharded size
        (single_type_kv_cache_manager:SingleTypeKVCacheManager.__init__, block_size; and
        FullAttentionManager.find_longest_cache_hit, which views the hashes at that size)."""
        groups = tuple(replace(g, block_size=sharded_block_size(g, self.dcp)) for g in self.groups)
        return LookupSetting(groups, self.hash_block_size, self.use_eagle, self.allow_partial_hash_hits)


def dcp_partial_hash_hits_enabled(setting: DcpSetting) -> bool:
    """Hits may land inside blocks iff some Mamba block is longer than the hash unit (at DCP > 1
    one equal to it is enough: the sharded full-attention block is the longer one) and every
    other group probes inside its blocks or has sharded blocks of one hash unit
    (vllm.v1.core.kv_cache_utils:partial_hash_hits_enabled, with the coordinator's opt-out)."""
    hash_bs, dcp = setting.hash_block_size, setting.dcp
    if not setting.allow_partial_hash_hits:
        return False
    if not any(
        g.kind == Kind.MAMBA and (g.block_size > hash_bs or (dcp > 1 and g.block_size >= hash_bs))
        for g in setting.groups
    ):
        return False
    return all(g.kind in FINE_GRAINED_KINDS or sharded_block_size(g, dcp) == hash_bs for g in setting.groups)


def dcp_scheduler_block_size(setting: DcpSetting) -> int:
    """The lcm of the sharded block sizes (kv_cache_utils:resolve_kv_cache_block_sizes)."""
    return reduce(math.lcm, (sharded_block_size(g, setting.dcp) for g in setting.groups))


def dcp_cache_hit_alignment(setting: DcpSetting) -> int:
    """The hash unit with partial hits, else the scheduler block
    (kv_cache_coordinator:HybridKVCacheCoordinator._cache_hit_alignment_tokens)."""
    if len(setting.groups) > 1 and dcp_partial_hash_hits_enabled(setting):
        return setting.hash_block_size
    return dcp_scheduler_block_size(setting)


def resolved_block_sizes(
    groups: list[CacheGroup], prefix_match_unit: int | None = None, *, dcp: int = 1, prefix_caching: bool = True
) -> tuple[int, int, int]:
    """(scheduler block, hash unit, hit alignment) the engine resolves with no KV connector:
    one group's sharded block size for all three; for several, the lcm of the sharded sizes,
    and with prefix caching off that lcm for all three (the hash unit is not even checked),
    else the prefix-match unit or the gcd (spec/hits.py:resolved_hash_block_size's refusals)
    and the alignment above. Raises ValueError where vLLM refuses
    (kv_cache_utils:resolve_kv_cache_block_sizes, resolve_cache_hit_alignment_tokens)."""
    sizes = [sharded_block_size(g, dcp) for g in groups]
    if len(groups) == 1:
        if prefix_caching:
            resolved_hash_block_size(sizes, prefix_match_unit)  # the refusal, if any
        return sizes[0], sizes[0], sizes[0]
    scheduler = reduce(math.lcm, sizes)
    if not prefix_caching:
        return scheduler, scheduler, scheduler
    unit = resolved_hash_block_size(sizes, prefix_match_unit)
    return scheduler, unit, dcp_cache_hit_alignment(DcpSetting(tuple(groups), unit, dcp))
