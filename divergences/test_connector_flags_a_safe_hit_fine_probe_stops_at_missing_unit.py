"""Replays the known divergence
'connector-flags-a-safe-hit-fine-probe-stops-at-missing-unit' (known-divergences.toml)
on plain vLLM: without EAGLE, a full-attention group of blocks larger than the hash unit
probes the block the cap falls in unit by unit
(FullAttentionManager.find_longest_cache_hit, phase 2) and stops at a missing unit, so
its own hit lags full attention's and the hit is flagged, though a later entry of that
group (its block key) proves every token before it.

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
)
from vllm.v1.request import Request


def _full(block_size):
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=64, dtype=torch.float16
    )


def _mamba(block_size):
    return MambaSpec(
        block_size=block_size,
        shapes=((32,),),
        dtypes=(torch.float16,),
        mamba_cache_mode="align",
    )


def test_connector_flags_a_safe_hit_fine_probe_stops_at_missing_unit():
    groups = [
        KVCacheGroupSpec([f"layers.{i}"], spec)
        for i, spec in enumerate([_full(32), _full(16), _mamba(32)])
    ]
    init_none_hash(sha256)
    manager = KVCacheManager(
        KVCacheConfig(num_blocks=9, kv_cache_tensors=[], kv_cache_groups=groups),
        max_model_len=96,
        scheduler_block_size=32,
        hash_block_size=8,
        enable_caching=True,
        use_eagle=False,
    )
    request = Request(
        request_id="r",
        prompt_token_ids=list(range(1, 32 + 1)),
        sampling_params=SamplingParams(max_tokens=1),
        pooling_params=None,
        block_hasher=get_request_block_hasher(8, sha256),
    )
    # (group id, hash unit) entries present, as an earlier request left them. Group 1
    # (blocks of 16) holds both its blocks, under their keys units 1 and 3, so tokens
    # 0-31;
    # unit 2, the only one its probe of block 1 reads below the cap of 31, is missing.
    cached = [(0, 1), (0, 2), (1, 0), (1, 1), (1, 3), (2, 2), (2, 3)]
    pool = manager.block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        key = make_block_hash_with_group_id(request.block_hashes[index], group_id)
        pool.cached_block_hash_to_block.insert(key, block)
    _blocks, hit, _boundary, hit_diverged = manager.get_computed_blocks_for_connector(
        request
    )
    assert hit == 24
    # per-group hits (24, 16, 24): group 1's own hit stops at the missing unit 2, yet
    # its
    # blocks hold tokens 0-31, Mamba's state at 24 is cached, so every group can resume
    # at 24
    # and the hit needs no flag; a flag makes the scheduler fall back to
    # get_computed_blocks
    assert not hit_diverged
