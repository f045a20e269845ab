"""Replays the known divergence
'core-vs-mooncake-hisparse-source-fine-probe'
(known-divergences.toml) on plain vLLM.

It asserts what the Mooncake store's coordinator answers for the same prompt and
cache: it picks managers by spec alone, so HiSparse's host source and its equal-spec
indexer are one spec group carrying the indexer's EAGLE drop, whose peek reads the
whole cached block 1 and pops to 14. The engine core picks the source's manager by
its role (HiSparseSourceManager), a spec group of its own without the drop: its
unit-by-unit probe of block 1 stops at the missing entry at unit 6, so it answers
12, and this test FAILS on vLLM by design: kvspec's tests/test_divergences.py runs
it and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheConfig,
    KVCacheGroupRole,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
)


def test_kvspec_core_vs_mooncake_hisparse_source_fine_probe():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            MLAAttentionSpec(
                block_size=8, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            role=KVCacheGroupRole.HISPARSE_SOURCE,
            host_resident=True,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            MLAAttentionSpec(
                block_size=8, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            is_eagle_group=True,
        ),
        KVCacheGroupSpec(
            ["layers.2"], HiSparseResidentSpec(block_size=8, page_size=4096)
        ),
        KVCacheGroupSpec(
            ["layers.3"], HiSparseResidentSpec(block_size=8, page_size=4096)
        ),
        KVCacheGroupSpec(
            ["layers.4"],
            HiSparseHotSpec(block_size=8, page_size=4096, blocks_per_request=1),
        ),
        KVCacheGroupSpec(
            ["layers.5"],
            HiSparseHotSpec(block_size=8, page_size=4096, blocks_per_request=1),
        ),
        KVCacheGroupSpec(
            ["layers.6"],
            MambaSpec(
                block_size=8,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(10)]
    # (group id, hash index) entries present
    cached = [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (0, 5),
        (0, 7),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 8),
        (1, 9),
        (6, 0),
        (6, 1),
        (6, 2),
        (6, 3),
        (6, 4),
        (6, 5),
        (6, 6),
        (6, 7),
        (6, 8),
    ]
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=28, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=21,
        max_in_flight_tokens=15,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=8,
        hash_block_size=2,
        allow_partial_hash_hits=True,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 14)
    # mooncake answers 14 for the same prompt; core 12
    assert hit == 14
