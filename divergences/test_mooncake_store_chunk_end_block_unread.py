"""Replays the known divergence 'mooncake-store-chunk-end-block-unread'
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
from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, KVCacheGroupSpec


def test_mooncake_store_chunk_end_block_unread():
    spec = ChunkedLocalAttentionSpec(
        block_size=2,
        num_kv_heads=1,
        head_size=64,
        dtype=torch.float16,
        attention_chunk_size=4,
    )
    groups = [KVCacheGroupSpec(["layers.0"], spec)]
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(9)]
    coordinator = MooncakeStoreCoordinator(
        groups, scheduler_block_size=2, hash_block_size=2, use_eagle=False
    )
    # Without block 1 (tokens 2-3, the end of local chunk 0) every boundary hit up to 6
    # is still found.
    store = ExternalCachedBlockPool(2, {(0, bytes(hashes[i])) for i in (0, 2)})
    assert [
        coordinator.find_longest_cache_hit(hashes, cap, store)[1] for cap in (2, 4, 6)
    ] == [2, 4, 6]
    # The request that computed tokens [0, 6) saves them: the spec wants block 1 left
    # out; vLLM puts it.
    (mask,) = coordinator.store_mask(6, 0, num_prompt_tokens=18)
    assert mask is not None and not mask[1]
