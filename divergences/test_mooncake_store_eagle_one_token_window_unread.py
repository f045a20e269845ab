"""Replays the known divergence 'mooncake-store-eagle-one-token-window-unread'
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


def test_mooncake_store_eagle_one_token_window_unread():
    spec = SlidingWindowSpec(
        block_size=1,
        num_kv_heads=1,
        head_size=64,
        dtype=torch.float16,
        sliding_window=1,
    )
    groups = [KVCacheGroupSpec(["layers.0"], spec, is_eagle_group=True)]
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(2)]
    coordinator = MooncakeStoreCoordinator(
        groups, scheduler_block_size=1, hash_block_size=1, use_eagle=True
    )
    # The hit at 1 needs only block 1 (its EAGLE proof): block 0 is never read.
    store = ExternalCachedBlockPool(1, {(0, bytes(hashes[1]))})
    assert coordinator.find_longest_cache_hit(hashes, 2, store)[1] == 1
    # The request that computed token 0 saves it: the spec wants block 0 left out; vLLM
    # puts it.
    (mask,) = coordinator.store_mask(1, 0, num_prompt_tokens=1)
    assert mask is not None and not mask[0]
