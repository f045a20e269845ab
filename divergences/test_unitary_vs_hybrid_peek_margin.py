"""Replays the known divergence 'unitary-vs-hybrid-peek-margin' (known-divergences.toml)
on plain vLLM.

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


def test_unitary_vs_hybrid_peek_margin():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=2, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            is_eagle_group=True,
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(2)]
    cached = [(0, 0), (0, 1)]  # (group id, hash index) entries present
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=4, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=5,
        max_in_flight_tokens=3,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=2,
        hash_block_size=2,
        allow_partial_hash_hits=False,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 2)
    # hybrid answers 2 for the same prompt; core 0
    assert hit == 2
