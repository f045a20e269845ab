"""Replays the known divergence
'hybrid-unannotated-eagle-mamba-keeps-window-verification' (known-divergences.toml) on
plain vLLM.

It asserts what the spec allows (the drafter tier of kvspec spec/hits.py); vLLM returns
more, so this test FAILS on vLLM by design: kvspec's tests/test_divergences.py runs it
and expects that failure."""

import hashlib

import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)


def test_hybrid_unannotated_eagle_mamba_keeps_window_verification():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=16,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=16,
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            MambaSpec(
                block_size=16,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 16 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(4)]
    cached = [(0, 0), (0, 2), (0, 3), (1, 0)]  # (group id, hash index) entries present
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=6, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=65,
        max_in_flight_tokens=49,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=16,
        hash_block_size=16,
        allow_partial_hash_hits=True,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 48)
    # 0: at 16 nothing proves token 16 for the window group's drafter KV (vLLM keeps the
    # window's drop verification after Mamba shrinks the candidate)
    assert hit == 0
