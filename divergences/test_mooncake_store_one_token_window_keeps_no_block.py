"""Replays the known divergence 'mooncake-store-one-token-window-keeps-no-block'
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


def test_mooncake_store_one_token_window_keeps_no_block():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=2,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
        ),
    ]
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(2)]
    coordinator = MooncakeStoreCoordinator(
        groups, scheduler_block_size=2, hash_block_size=2, use_eagle=False
    )
    # A later request capped at 2 tokens hits 2 with block 0 in the store, 0 without it.
    with_block = ExternalCachedBlockPool(2, {(0, bytes(hashes[0]))})
    assert coordinator.find_longest_cache_hit(hashes, 2, with_block)[1] == 2
    assert (
        coordinator.find_longest_cache_hit(
            hashes, 2, ExternalCachedBlockPool(2, set())
        )[1]
        == 0
    )
    # The request that computed tokens [0, 2) saves them: the spec wants block 0 put;
    # vLLM puts none.
    (mask,) = coordinator.store_mask(2, 0, num_prompt_tokens=2)
    assert mask is None or mask[0]
