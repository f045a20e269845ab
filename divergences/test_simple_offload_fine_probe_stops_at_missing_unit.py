"""Replays the known divergence 'simple-offload-fine-probe-stops-at-missing-unit'
(known-divergences.toml) on plain vLLM: the SimpleCPUOffload connector's lookup
(SimpleCPUOffloadScheduler.get_num_new_matched_tokens) over a CPU pool holding exactly
the entries below, for a request past a local prefix of 0 tokens.

It asserts what the spec allows; vLLM returns less, so this test FAILS on vLLM by
design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib
from types import SimpleNamespace

import torch

from vllm.config import DeviceConfig, SpeculativeConfig, VllmConfig
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
)
from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler


def _spec(kind, block_size, chunk):
    if kind == "mamba":
        return MambaSpec(
            block_size=block_size,
            shapes=((32,),),
            dtypes=(torch.float16,),
            mamba_cache_mode="align",
        )
    if kind == "chunked_local":
        return ChunkedLocalAttentionSpec(
            block_size=block_size,
            num_kv_heads=1,
            head_size=64,
            dtype=torch.float16,
            attention_chunk_size=chunk,
        )
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=64, dtype=torch.float16
    )


def _config(use_eagle):
    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    object.__setattr__(config, "model_config", SimpleNamespace(max_model_len=4096))
    # only the fields the KV-cache code reads; the validator would fetch a model
    if use_eagle:
        speculative = SpeculativeConfig.__new__(SpeculativeConfig)
        fields = dict(
            method="eagle",
            disable_eagle_block_drop=False,
            disable_lookahead_block_hashes=False,
            num_speculative_tokens=1,
        )
        for name, value in fields.items():
            object.__setattr__(speculative, name, value)
        object.__setattr__(config, "speculative_config", speculative)
    return config


def test_simple_offload_fine_probe_stops_at_missing_unit():
    groups = [
        KVCacheGroupSpec([f"layers.{i}"], _spec(kind, block_size, chunk))
        for i, (kind, block_size, chunk) in enumerate(
            [
                ("full", 2, None),
                ("full", 2, None),
                ("mamba", 2, None),
                ("full", 4, None),
            ]
        )
    ]
    tensor = KVCacheTensor(
        size=64 * 4096, layers=["layers.0"], layer_stride=4096, block_stride=4096
    )
    scheduler = SimpleCPUOffloadScheduler(
        _config(False),
        KVCacheConfig(num_blocks=64, kv_cache_tensors=[tensor], kv_cache_groups=groups),
        cpu_capacity_bytes=64 * 4096,
        scheduler_block_size=4,
        hash_block_size=1,
        lazy_offload=False,
    )
    # Hash unit i stands for the chained hash of the first (i + 1) * 1 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(4)]
    # (group id, hash index) entries in the CPU pool
    cached = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 2)]
    pool = scheduler.cpu_block_pool
    for (group_id, index), block in zip(
        cached, pool.get_new_blocks(len(cached)), strict=True
    ):
        pool.cached_block_hash_to_block.insert(
            make_block_hash_with_group_id(hashes[index], group_id), block
        )
    request = SimpleNamespace(
        request_id="r",
        block_hashes=hashes,
        num_tokens=4,
        skip_reading_external_kv=False,
        skip_reading_prefix_cache=False,
    )
    matched, _load_async = scheduler.get_num_new_matched_tokens(request, 0)
    # 2 tokens past the local prefix are the longest safe match; vLLM matches 1
    assert matched == 2
