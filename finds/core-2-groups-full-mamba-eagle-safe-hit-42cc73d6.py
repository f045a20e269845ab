import hashlib

import torch
from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec


def test_kvspec_core_2_groups_full_mamba_eagle():
    groups = [
        KVCacheGroupSpec(["layers.0"], FullAttentionSpec(block_size=2, num_kv_heads=1, head_size=64, dtype=torch.float16), is_eagle_group=True),
        KVCacheGroupSpec(["layers.1"], MambaSpec(block_size=2, shapes=((32,),), dtypes=(torch.float16,), mamba_cache_mode="align"), is_eagle_group=True),
    ]
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(1)]
    cached = [(0, 0), (1, 0)]  # (group id, hash index) entries present
    coordinator = get_kv_cache_coordinator(
        KVCacheConfig(num_blocks=4, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=3,
        max_in_flight_tokens=3,
        use_eagle=True,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=2,
        hash_block_size=2,
        allow_partial_hash_hits=False,
    )
    pool = coordinator.block_pool
    for (group_id, index), block in zip(cached, pool.get_new_blocks(len(cached))):
        key = make_block_hash_with_group_id(hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, 2)
    # 0 is what vLLM's own algorithm, as the spec models it, returns; kvspec saw 2
    assert hit == 0
