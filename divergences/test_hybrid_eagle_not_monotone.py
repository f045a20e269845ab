"""Replays the known divergence 'hybrid-eagle-not-monotone' (known-divergences.toml) on
plain vLLM.

It asserts what the spec allows; vLLM returns less, so this test FAILS on vLLM by
design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)


def test_hybrid_eagle_not_monotone():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=16,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=17,
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            MambaSpec(
                block_size=16,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 16 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(6)]
    # (group id, hash index) entries present
    cached = [(0, 1), (0, 4), (0, 5), (1, 1), (1, 2), (1, 5)]
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=97,
        max_in_flight_tokens=97,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=16,
        hash_block_size=16,
        allow_partial_hash_hits=False,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 96)
    # this cache holds every entry of one whose hit is 32; vLLM returns 0
    assert hit == 32
