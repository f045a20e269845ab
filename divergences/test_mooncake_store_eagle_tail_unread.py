"""Replays the known divergence 'mooncake-store-eagle-tail-unread'
(known-divergences.toml) on plain vLLM.

It asserts what the spec wants stored; vLLM stores otherwise, so this test FAILS on vLLM
by design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator import (
    ExternalCachedBlockPool,
    MooncakeStoreCoordinator,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import KVCacheGroupSpec, SlidingWindowSpec


def test_mooncake_store_eagle_tail_unread():
    def window(block_size, size):
        return SlidingWindowSpec(
            block_size=block_size,
            num_kv_heads=1,
            head_size=64,
            dtype=torch.float16,
            sliding_window=size,
        )

    groups = [
        KVCacheGroupSpec(["layers.0"], window(4, 14)),
        KVCacheGroupSpec(["layers.1"], window(8, 10)),
    ]
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(16)]
    coordinator = MooncakeStoreCoordinator(
        groups, scheduler_block_size=8, hash_block_size=1, use_eagle=True
    )
    # Every block of both groups up to 16 tokens stored: after EAGLE's drop and the
    # round-down to
    # 8 the store's own lookup still returns 0, at the boundary 8 or past it.
    store = ExternalCachedBlockPool(
        1,
        {(0, bytes(hashes[i])) for i in (3, 7, 11, 15)}
        | {(1, bytes(hashes[i])) for i in (7, 15)},
    )
    assert [
        coordinator.find_longest_cache_hit(hashes, cap, store)[1] for cap in (8, 16)
    ] == [0, 0]
    # The request that computed tokens [0, 8) saves them: no lookup reads them; vLLM
    # puts them all.
    masks = coordinator.store_mask(8, 0, num_prompt_tokens=9)
    assert masks[1] is not None and not any(masks[1])
