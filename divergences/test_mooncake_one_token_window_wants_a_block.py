"""Replays the known divergence 'mooncake-one-token-window-wants-a-block'
(known-divergences.toml) on plain vLLM.

It asserts what the spec allows; vLLM returns less, so this test FAILS on vLLM by
design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator import (
    ExternalCachedBlockPool,
    MooncakeStoreCoordinator,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import KVCacheGroupSpec, SlidingWindowSpec


def test_mooncake_one_token_window_wants_a_block():
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
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(1)]
    cached = []  # (group id, hash index) entries present
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=1,
        hash_block_size=1,
        use_eagle=False,
        enable_partial_hash_hits=False,
    )
    pool = ExternalCachedBlockPool(1, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 1, pool)
    # 1 is the longest safe hit; vLLM returns 0
    assert hit == 1
