"""Replays the known divergence 'core-vs-mooncake-one-token-window-eagle'
(known-divergences.toml) on plain vLLM.

It asserts what the Mooncake store's coordinator answers for the same prompt and cache
(its single spec group is looked up once, with the EAGLE drop); the core's hybrid loop
looks the group up again without the drop, where the one-token window wants a cached
block at the end of the run, and returns less, so this test FAILS on vLLM by design:
kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)


def test_kvspec_core_vs_mooncake_one_token_window_eagle():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=4,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
            is_eagle_group=True,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            SlidingWindowSpec(
                block_size=4,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
            is_eagle_group=True,
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 4 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(6)]
    # (group id, hash index) entries present
    cached = [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 1), (1, 3)]
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=11, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=25,
        max_in_flight_tokens=25,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=4,
        hash_block_size=4,
        allow_partial_hash_hits=True,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 24)
    # mooncake answers 12 for the same prompt; core 4
    assert hit == 12
