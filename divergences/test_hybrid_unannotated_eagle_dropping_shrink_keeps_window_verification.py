"""Replays the known divergence
'hybrid-unannotated-eagle-dropping-shrink-keeps-window-verification'
(known-divergences.toml) on plain vLLM.

It asserts what the spec allows (the drafter tier of kvspec spec/hits.py); vLLM
returns more, so this test FAILS on vLLM by design: kvspec's
tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)


def test_kvspec_hybrid_unannotated_eagle_dropping_shrink_keeps_window_verification():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=1,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            FullAttentionSpec(
                block_size=1, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
        KVCacheGroupSpec(
            ["layers.2"],
            SlidingWindowSpec(
                block_size=1,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=2,
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(7)]
    # (group id, hash index) entries present
    cached = [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (0, 6),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (2, 0),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (2, 5),
    ]
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=21, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=8,
        max_in_flight_tokens=8,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=1,
        hash_block_size=1,
        allow_partial_hash_hits=False,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 7)
    # 4 is the longest hit that is safe; kvspec saw 5
    assert hit == 4
