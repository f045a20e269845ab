"""Replays the known divergence 'mooncake-eagle-drop-and-realign'
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
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec


def test_mooncake_eagle_drop_and_realign():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=4, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
            is_eagle_group=True,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            FullAttentionSpec(
                block_size=4, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(3)]
    # (group id, hash index) entries present
    cached = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=4,
        hash_block_size=2,
        use_eagle=True,
        enable_partial_hash_hits=False,
    )
    pool = ExternalCachedBlockPool(2, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 5, pool)
    # 4 is the longest safe hit; vLLM returns 0
    assert hit == 4
