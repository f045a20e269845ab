"""Replays the known divergence 'core-vs-connector-one-token-window-eagle'
(known-divergences.toml) on plain vLLM.

It asserts that the unflagged hit of get_computed_blocks_for_connector (each group
looked up once, with the EAGLE drop) is the core's; the core's hybrid loop looks the
window group up again without the drop, where the one-token window wants a cached block
at the end of the run, and returns less, so this test FAILS on vLLM by design: kvspec's
tests/test_divergences.py runs it and expects that failure."""

import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    make_block_hash_with_group_id,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request


def test_kvspec_core_vs_connector_one_token_window_eagle():
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
                block_size=2,
                shapes=((32,),),
                dtypes=(torch.float16,),
                mamba_cache_mode="align",
            ),
        ),
        KVCacheGroupSpec(
            ["layers.2"],
            SlidingWindowSpec(
                block_size=4,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
            is_eagle_group=True,
        ),
    ]
    init_none_hash(sha256)
    manager = KVCacheManager(
        KVCacheConfig(num_blocks=7, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=81,
        scheduler_block_size=4,
        hash_block_size=2,
        enable_caching=True,
        use_eagle=True,
    )
    request = Request(
        request_id="r",
        prompt_token_ids=list(range(1, 17 + 1)),
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
        block_hasher=get_request_block_hasher(2, sha256),
    )
    # (group id, hash unit) entries present, as an earlier request left them
    cached = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 3)]
    pool = manager.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(request.block_hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, core_hit, _boundary = manager.get_computed_blocks(request)
    _blocks, hit, _boundary, hit_diverged = manager.get_computed_blocks_for_connector(
        request
    )
    assert not hit_diverged
    # per-group hits (4, 4, 4): the scheduler adopts this unflagged hit as the local
    # prefix; the core's lookup answers another on the same cache and prompt
    assert hit == core_hit
