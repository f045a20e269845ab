"""Replays the known divergence 'mooncake-one-spec-group-eagle-drop-without-peek'
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


def test_mooncake_one_spec_group_eagle_drop_without_peek():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=1, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(2)]
    cached = [(0, 0), (0, 1)]  # (group id, hash index) entries present
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=1,
        hash_block_size=1,
        use_eagle=True,
        enable_partial_hash_hits=False,
    )
    pool = ExternalCachedBlockPool(1, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 1, pool)
    # 1 is the longest safe hit; vLLM returns 0
    assert hit == 1
