"""Replays the known divergence
'mooncake-unannotated-eagle-mamba-keeps-window-verification' (known-divergences.toml) on
plain vLLM.

It asserts what the spec allows (the drafter tier of kvspec spec/hits.py); vLLM returns
more, so this test FAILS on vLLM by design: kvspec's tests/test_divergences.py runs it
and expects that failure."""

import hashlib

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator import (
    ExternalCachedBlockPool,
    MooncakeStoreCoordinator,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import KVCacheGroupSpec, MambaSpec, SlidingWindowSpec


def test_mooncake_unannotated_eagle_mamba_keeps_window_verification():
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
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=16,
        hash_block_size=16,
        use_eagle=True,
        enable_partial_hash_hits=False,
    )
    pool = ExternalCachedBlockPool(16, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 48, pool)
    # 0: at 16 nothing proves token 16 for the window group's drafter KV (vLLM keeps the
    # window's drop verification after Mamba shrinks the candidate)
    assert hit == 0
