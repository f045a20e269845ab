"""Replays the known divergence 'offloading-load-bound-below-the-best'
(known-divergences.toml) on plain vLLM.

It asserts what the spec allows; vLLM returns less, so this test FAILS on vLLM by
design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib
import types

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupRole,
    KVCacheGroupSpec,
    MambaSpec,
)


def test_kvspec_offloading_load_bound_below_the_best():
    # HiSparse on: the connector offloads the indexer group (0) only; group 1 bounds the
    # load.
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            MambaSpec(
                block_size=4,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
            role=KVCacheGroupRole.HISPARSE_INDEXER,
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            FullAttentionSpec(
                block_size=8, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
    ]
    config = KVCacheConfig(num_blocks=4, kv_cache_tensors=[], kv_cache_groups=groups)
    config.hisparse_host_num_blocks = 1
    # Hash unit i stands for the chained hash of the first (i + 1) * 2 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(4)]
    coordinator = get_kv_cache_coordinator(
        config,
        max_model_len=72,
        max_in_flight_tokens=8,
        use_eagle=False,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=8,
        hash_block_size=2,
        allow_partial_hash_hits=True,
    )
    # Group 1 holds its block 0 whole (tokens 0-7), cached under the key of unit 3.
    pool = coordinator.block_pool
    block = pool.get_new_blocks(1)[0]
    pool.cached_block_hash_to_block.insert(
        make_block_hash_with_group_id(hashes[3], 1), block
    )
    connector = OffloadingConnector.__new__(OffloadingConnector)
    connector._kv_cache_config = config
    connector._kv_cache_manager = types.SimpleNamespace(coordinator=coordinator)
    assert connector._bounding_group_ids == (1,)
    request = types.SimpleNamespace(block_hashes=hashes, num_tokens=8)
    bound = connector._max_loadable_tokens(request, 0)
    # Group 1 can resume at 6 (on the hash unit, below the last token) from the block
    # it holds: 6 is the best bound; vLLM returns 0
    assert bound == 6
