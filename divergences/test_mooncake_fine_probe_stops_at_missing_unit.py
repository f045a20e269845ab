"""Replays the known divergence 'mooncake-fine-probe-stops-at-missing-unit'
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
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, MambaSpec


def test_mooncake_fine_probe_stops_at_missing_unit():
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=4, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            MambaSpec(
                block_size=4,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(13)]
    # (group id, hash index) entries present
    cached = [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (0, 6),
        (0, 7),
        (0, 8),
        (0, 9),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 8),
        (1, 9),
        (1, 10),
        (1, 11),
        (1, 12),
    ]
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=4,
        hash_block_size=1,
        use_eagle=False,
        enable_partial_hash_hits=True,
    )
    pool = ExternalCachedBlockPool(1, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 6, pool)
    # 6 is the longest safe hit; vLLM returns 5
    assert hit == 6
