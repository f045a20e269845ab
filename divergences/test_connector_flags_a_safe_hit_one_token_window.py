"""Replays the known divergence 'connector-flags-a-safe-hit-one-token-window'
(known-divergences.toml) on plain vLLM: a one-token window's own hit is 0, so the hit is
flagged though every group can resume at it.

It asserts what the spec allows (the hit is safe for every group, so it needs no flag);
vLLM flags it, so this test FAILS on vLLM by design: kvspec's tests/test_divergences.py
runs it and expects that failure."""

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


def _full(block_size):
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=64, dtype=torch.float16
    )


def _window(block_size, window):
    return SlidingWindowSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=64,
        dtype=torch.float16,
        sliding_window=window,
    )


def _mamba(block_size):
    return MambaSpec(
        block_size=block_size,
        shapes=((32,),),
        dtypes=(torch.float16,),
        mamba_cache_mode="align",
    )


def test_connector_flags_a_safe_hit_one_token_window():
    groups = [
        KVCacheGroupSpec([f"layers.{i}"], spec)
        for i, spec in enumerate([_full(2), _window(2, 1), _mamba(2)])
    ]
    init_none_hash(sha256)
    manager = KVCacheManager(
        KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=64,
        scheduler_block_size=2,
        hash_block_size=2,
        enable_caching=True,
        use_eagle=False,
    )
    request = Request(
        request_id="r",
        prompt_token_ids=list(range(1, 4 + 1)),
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
        block_hasher=get_request_block_hasher(2, sha256),
    )
    # (group id, hash unit) entries present, as an earlier request left them
    cached = [(0, 0), (0, 1), (2, 0), (2, 1)]
    pool = manager.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(request.block_hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _boundary, hit_diverged = manager.get_computed_blocks_for_connector(
        request
    )
    assert hit == 2
    # per-group hits (2, 0, 2): the one-token window reads no earlier token, so 2 is
    # safe for it
    assert not hit_diverged
