import hashlib

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator import (
    ExternalCachedBlockPool,
    MooncakeStoreCoordinator,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, MambaSpec


def test_kvspec_mooncake_2_groups_full_mamba_eagle():
    groups = [
        KVCacheGroupSpec(["layers.0"], FullAttentionSpec(block_size=2, num_kv_heads=1, head_size=64, dtype=torch.float16), is_eagle_group=True),
        KVCacheGroupSpec(["layers.1"], MambaSpec(block_size=2, shapes=((32,),), dtypes=(torch.float16,), mamba_cache_mode="align"), is_eagle_group=True),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(1)]
    cached = [(0, 0), (1, 0)]  # (group id, hash index) entries present
    coordinator = MooncakeStoreCoordinator(
        groups,
        scheduler_block_size=2,
        hash_block_size=2,
        use_eagle=True,
        enable_partial_hash_hits=False,
    )
    pool = ExternalCachedBlockPool(2, {(g, bytes(hashes[i])) for g, i in cached})
    _masks, hit = coordinator.find_longest_cache_hit(hashes, 2, pool)
    # 0 is what vLLM's own algorithm, as the spec models it, returns; kvspec saw 2
    assert hit == 0
