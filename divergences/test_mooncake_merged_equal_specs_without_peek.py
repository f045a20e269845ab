"""Replays the known divergence 'mooncake-merged-equal-specs-without-peek'
(known-divergences.toml) on plain vLLM.

It asserts what the spec allows; vLLM returns less, so this test FAILS on vLLM by
design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)


def test_mooncake_merged_equal_specs_without_peek():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=1, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            is_eagle_group=True,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            FullAttentionSpec(
                block_size=1, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(2)]
    cached = [(0, 0), (0, 1), (1, 0), (1, 1)]  # (group id, hash index) entries present
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=6, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=3,
        max_in_flight_tokens=2,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=1,
        hash_block_size=1,
        allow_partial_hash_hits=True,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 1)
    # mooncake answers 0 for the same prompt; core 1
    assert hit == 0
