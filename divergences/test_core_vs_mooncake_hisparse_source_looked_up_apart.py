"""Replays the known divergence
'core-vs-mooncake-hisparse-source-looked-up-apart'
(known-divergences.toml) on plain vLLM.

It asserts what the Mooncake store's coordinator answers for the same prompt and
cache: it picks managers by spec alone, so HiSparse's host source and its equal-spec
indexer are one spec group, looked up together: a unit counts only where both groups
hold it, and the only such unit is 0. The engine core picks the source's manager by
its role (HiSparseSourceManager) and looks the two up apart (source 34, indexer 28),
so it answers 28, and this test FAILS on vLLM by design: kvspec's
tests/test_divergences.py runs it and expects that failure."""

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


def test_kvspec_core_vs_mooncake_hisparse_source_looked_up_apart():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            MLAAttentionSpec(
                block_size=32, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            role=KVCacheGroupRole.HISPARSE_SOURCE,
            host_resident=True,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            MLAAttentionSpec(
                block_size=32, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
        KVCacheGroupSpec(
            ["layers.2"], HiSparseResidentSpec(block_size=32, page_size=4096)
        ),
        KVCacheGroupSpec(
            ["layers.3"], HiSparseResidentSpec(block_size=32, page_size=4096)
        ),
        KVCacheGroupSpec(
            ["layers.4"],
            HiSparseHotSpec(block_size=32, page_size=4096, blocks_per_request=1),
        ),
        KVCacheGroupSpec(
            ["layers.5"],
            HiSparseHotSpec(block_size=32, page_size=4096, blocks_per_request=1),
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
        KVCacheGroupSpec(
            ["layers.7"],
            MambaSpec(
                block_size=16,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(40)]
    # (group id, hash index) entries present
    cached = [
        (0, 0),
        (0, 15),
        (0, 16),
        (0, 20),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 4),
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 9),
        (1, 10),
        (1, 11),
        (1, 12),
        (1, 13),
        (1, 32),
        (1, 33),
        (6, 0),
        (6, 1),
        (6, 2),
        (6, 3),
        (6, 4),
        (6, 5),
        (6, 6),
        (6, 7),
        (6, 8),
        (6, 9),
        (6, 10),
        (6, 11),
        (6, 12),
        (6, 13),
        (6, 14),
        (6, 15),
        (6, 16),
        (6, 17),
        (6, 18),
        (6, 19),
        (6, 20),
        (6, 21),
        (6, 22),
        (6, 23),
        (6, 24),
        (6, 25),
        (6, 26),
        (6, 27),
        (6, 28),
        (6, 29),
        (6, 30),
        (6, 31),
        (6, 32),
        (6, 33),
        (6, 34),
        (6, 35),
        (6, 36),
        (6, 37),
        (6, 38),
        (6, 39),
        (7, 0),
        (7, 1),
        (7, 2),
        (7, 3),
        (7, 4),
        (7, 5),
        (7, 6),
        (7, 7),
        (7, 8),
        (7, 9),
        (7, 10),
        (7, 11),
        (7, 12),
        (7, 13),
        (7, 14),
        (7, 15),
        (7, 16),
        (7, 17),
        (7, 18),
        (7, 19),
        (7, 20),
        (7, 21),
        (7, 22),
        (7, 23),
        (7, 24),
        (7, 25),
        (7, 26),
        (7, 27),
        (7, 28),
        (7, 29),
        (7, 30),
        (7, 31),
        (7, 32),
        (7, 33),
        (7, 34),
        (7, 35),
        (7, 36),
        (7, 37),
        (7, 38),
        (7, 39),
    ]
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=100, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=81,
        max_in_flight_tokens=37,
        use_eagle=False,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=32,
        hash_block_size=2,
        allow_partial_hash_hits=True,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 36)
    # mooncake answers 2 for the same prompt; core 28
    assert hit == 2
