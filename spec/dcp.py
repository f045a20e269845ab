"""Decode context parallelism (DCP): each attention block's KV is sharded over ``dcp`` ranks, so
the scheduler sees an attention block as ``dcp`` times its per-rank size; a Mamba state is not
sharded.

A ``DcpSetting`` carries the number of ranks, and the resolution rules of spec/resolution.py
read it (at ``dcp == 1`` they are the rules of a plain ``LookupSetting``; tests/test_block_sizes.py
checks it). Lookups under DCP are the ordinary lookups over the effective block sizes
(``DcpSetting.view``), on the alignment spec/resolution.py:cache_hit_alignment gives the
``DcpSetting``. vLLM refuses DCP > 1 beside sliding-window or chunked-local groups in a hybrid
coordinator, and in those managers' finders
(kv_cache_coordinator:HybridKVCacheCoordinator.__init__, single_type_kv_cache_manager).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvspec.spec.layers import ATTENTION_SPEC_KINDS, CacheGroup, Kind
from kvspec.spec.setting import LookupSetting

# The kinds a hybrid coordinator accepts with DCP > 1 (full attention, and Mamba, unsharded).
DCP_KINDS = frozenset({Kind.FULL, Kind.MLA, Kind.MAMBA})


def sharded_block_size(group: CacheGroup, dcp: int) -> int:
    """Tokens one block spans under DCP: attention specs are sharded, Mamba states are not
    (vllm.v1.core.kv_cache_utils:resolve_dcp_kv_block_size; AttentionSpec.dcp_sharded)."""
    return group.block_size * dcp if group.kind in ATTENTION_SPEC_KINDS else group.block_size


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
        FullAttentionManager.find_longest_cache_hit, which views the hashes at that size).
        Ask the resolution rules of the DcpSetting itself, not of its view: they differ at
        DCP > 1 (a Mamba block equal to the hash unit enables partial hits)."""
        groups = tuple(replace(g, block_size=sharded_block_size(g, self.dcp)) for g in self.groups)
        return LookupSetting(groups, self.hash_block_size, self.use_eagle, self.allow_partial_hash_hits)
