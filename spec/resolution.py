"""How vLLM resolves the sizes a prefix-cache lookup runs on: the scheduler block, the hash unit,
whether hits may land inside blocks, the hit alignment, and the EAGLE proof margin.

These are vLLM's choices, read from its code; they are not safety rules (spec/hits.py says which
hits are safe at the sizes resolved here). Every rule takes the decode-context-parallel size
from the setting (``setting.dcp``: 1 for a LookupSetting, the ranks of a spec/dcp.py:DcpSetting),
so one function serves both; at DCP > 1 an attention block spans ``dcp`` per-rank blocks.
"""

from __future__ import annotations

import math
from functools import reduce

from kvspec.spec.dcp import DcpSetting, sharded_block_size
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind
from kvspec.spec.releases import (
    NEWEST_RULES,
    ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT,
    ONE_GROUP_SHARDS_ONLY_A_SHARDED_SPEC,
)
from kvspec.spec.setting import LookupSetting, remembered

# Managers that can probe hash boundaries inside their blocks
# (vllm.v1.core.single_type_kv_cache_manager:*.supports_fine_grained_hash_lookup: True on
# FullAttentionManager, which RSWAManager and SinkFullAttentionManager inherit and
# HiddenStateCacheSpec uses, and on MambaManager; CircularBufferManager turns it off).
FINE_GRAINED_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.RSWA, Kind.SINK_FULL, Kind.HIDDEN_STATE, Kind.MAMBA})


@remembered
def scheduler_block_size(setting: LookupSetting | DcpSetting) -> int:
    """The lcm of the group block sizes, attention blocks sharded over the DCP ranks
    (vllm.v1.core.kv_cache_utils:resolve_kv_cache_block_sizes)."""
    return reduce(math.lcm, (sharded_block_size(g, setting.dcp) for g in setting.groups))


def resolved_hash_block_size(block_sizes: list[int], prefix_match_unit: int | None = None, *,
                             one_group_refuses: bool = True) -> int:
    """The hash unit the engine resolves with prefix caching on: one group's block size (any
    other prefix-match unit is refused, or on a release without
    spec/releases.py:ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT ignored), else the prefix-match
    unit if set, else the gcd of the block sizes, which must all be multiples of it
    (vllm.v1.core.kv_cache_utils:resolve_kv_cache_block_sizes)."""
    if len(block_sizes) == 1:
        if one_group_refuses and prefix_match_unit not in (None, block_sizes[0]):
            raise ValueError("with one group, hits land on its block size")
        return block_sizes[0]
    return _several_groups_hash_unit(block_sizes, prefix_match_unit)


def groups_hash_unit(groups: list[CacheGroup], prefix_match_unit: int | None = None, *, dcp: int = 1,
                     one_group_refuses: bool = True) -> int:
    """resolved_hash_block_size for these groups: one group's rule by the number of groups, and
    for several the unit must divide only the prefix-cacheable groups' blocks (hashing_sizes),
    so a group beside a circular buffer takes any unit its own block is a multiple of."""
    if len(groups) == 1:
        return resolved_hash_block_size([sharded_block_size(groups[0], dcp)], prefix_match_unit,
                                        one_group_refuses=one_group_refuses)
    return _several_groups_hash_unit(hashing_sizes(groups, dcp), prefix_match_unit)


def _several_groups_hash_unit(sizes: list[int], prefix_match_unit: int | None) -> int:
    unit = prefix_match_unit or reduce(math.gcd, sizes)
    if any(size % unit for size in sizes):
        raise ValueError("every prefix-cacheable group's block size must be a multiple of the prefix-match unit")
    return unit


def hashing_sizes(groups: list[CacheGroup], dcp: int = 1) -> list[int]:
    """The (sharded) block sizes the hash unit must divide: the prefix-cacheable groups', or
    every group's when none is (vllm.v1.core.kv_cache_utils:resolve_kv_cache_block_sizes,
    hashing_sizes)."""
    sizes = [sharded_block_size(g, dcp) for g in groups if g.kind not in NOT_PREFIX_CACHEABLE_KINDS]
    return sizes or [sharded_block_size(g, dcp) for g in groups]


def partial_hash_hits_enabled(setting: LookupSetting | DcpSetting) -> bool:
    """Hits may land inside blocks iff some Mamba block is longer than the hash unit (at DCP > 1
    one equal to it is enough: the sharded attention block is the longer one) and every other
    group either probes inside its blocks or has (sharded) blocks of one hash unit
    (vllm.v1.core.kv_cache_utils:partial_hash_hits_enabled, with the coordinator's opt-out)."""
    hash_bs, dcp = setting.hash_block_size, setting.dcp
    if not setting.allow_partial_hash_hits or not mamba_partial_hits_possible(setting):
        return False
    # A group that takes no part in prefix caching is not asked (KVCacheSpec.prefix_cacheable).
    return all(g.kind in FINE_GRAINED_KINDS or g.kind in NOT_PREFIX_CACHEABLE_KINDS
               or sharded_block_size(g, dcp) == hash_bs for g in setting.groups)


def mamba_partial_hits_possible(setting: LookupSetting | DcpSetting) -> bool:
    """Some Mamba block is longer than the hash unit (at DCP > 1, or equal to it): the first half
    of partial_hash_hits_enabled, and all of it for a Mooncake store that decides partial hits
    itself (spec/releases.py:MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE; 0.31's
    mooncake/store/coordinator.py:partial_hash_hits_enabled)."""
    hash_bs, dcp = setting.hash_block_size, setting.dcp
    return any(g.kind == Kind.MAMBA and (g.block_size > hash_bs or (dcp > 1 and g.block_size >= hash_bs))
               for g in setting.groups)


@remembered
def cache_hit_alignment(setting: LookupSetting | DcpSetting) -> int:
    """Every hit is a multiple of this: the hash unit with partial hits, else the scheduler block
    (vllm.v1.core.kv_cache_coordinator:HybridKVCacheCoordinator._cache_hit_alignment_tokens).
    For one group vLLM's resolve_cache_hit_alignment_tokens answers the scheduler block; under
    DCP a single group hashes at its sharded block (UnitaryKVCacheCoordinator asserts it), where
    the two answers agree, and resolved_block_sizes takes the one-group path itself."""
    if partial_hash_hits_enabled(setting):
        return setting.hash_block_size
    return scheduler_block_size(setting)


def eagle_proof_margin(block_size: int, hash_block_size: int, fine_grained: bool) -> int:
    """How far an EAGLE group looks past a candidate before dropping: one hash unit when it
    probes inside blocks, else one block (vllm.v1.core.kv_cache_utils:eagle_proof_margin)."""
    return hash_block_size if fine_grained and block_size > hash_block_size else block_size


def resolved_block_sizes(
    groups: list[CacheGroup], prefix_match_unit: int | None = None, *, dcp: int = 1, prefix_caching: bool = True,
    rules=NEWEST_RULES,
) -> tuple[int, int, int]:
    """(scheduler block, hash unit, hit alignment) the engine resolves with no KV connector:
    one group's sharded block size for all three; for several, the lcm of the sharded sizes,
    and with prefix caching off that lcm for all three (the hash unit is not even checked),
    else the prefix-match unit or the gcd (resolved_hash_block_size's refusals) and the
    alignment above. Raises ValueError where vLLM refuses
    (kv_cache_utils:resolve_kv_cache_block_sizes, resolve_cache_hit_alignment_tokens), on a
    release with ``rules``: without ONE_GROUP_SHARDS_ONLY_A_SHARDED_SPEC one group's block is
    stretched over the DCP ranks whatever its spec, and without
    ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT its prefix-match unit is ignored."""
    sizes = [sharded_block_size(g, dcp) for g in groups]
    if len(groups) == 1:
        if ONE_GROUP_SHARDS_ONLY_A_SHARDED_SPEC not in rules:
            sizes = [groups[0].block_size * dcp]
        if prefix_caching:
            resolved_hash_block_size(sizes, prefix_match_unit,
                                     one_group_refuses=ONE_GROUP_REFUSES_ANOTHER_PREFIX_MATCH_UNIT in rules)
        return sizes[0], sizes[0], sizes[0]
    scheduler = reduce(math.lcm, sizes)
    if not prefix_caching:
        return scheduler, scheduler, scheduler
    unit = groups_hash_unit(groups, prefix_match_unit, dcp=dcp)
    return scheduler, unit, cache_hit_alignment(DcpSetting(tuple(groups), unit, dcp))
