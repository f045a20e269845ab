"""Replays the known divergence 'offloading-cap-less-one-token' (known-divergences.toml)
on plain vLLM.

It asserts what the spec allows; vLLM 0.33 returns less, so this test FAILS on it by
design (0.34 is skipped): kvspec's tests/test_divergences.py runs it and expects that
failure."""

import hashlib
import types

import pytest
import torch

import vllm
from vllm.config import DeviceConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload.base import (
    OffloadingKVEventsConfig,
    ReqContext,
    make_offload_key,
)
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

try:  # where newer releases keep it
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        get_sliding_window_size_in_chunks,
    )
except ImportError:  # older releases
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        get_sliding_window_size_in_chunks,
    )


def test_kvspec_offloading_cap_less_one_token():
    if tuple(int(p) for p in vllm.__version__.split(".")[:2]) >= (0, 34):
        pytest.skip("vLLM 0.34 takes the token off the prompt before the cap: 32")
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            FullAttentionSpec(
                block_size=16, num_kv_heads=1, head_size=64, dtype=torch.float16
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            SlidingWindowSpec(
                block_size=16,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=32,
            ),
        ),
    ]
    blocks_per_chunk = 1
    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    store = CPUOffloadingManager(num_chunks=9)
    spec = types.SimpleNamespace(  # the OffloadingSpec fields the scheduler reads
        config=types.SimpleNamespace(
            groups=tuple(
                types.SimpleNamespace(
                    group_id=i,
                    tokens_per_block=g.kv_cache_spec.block_size,
                    sliding_window_size_in_chunks=get_sliding_window_size_in_chunks(
                        g.kv_cache_spec, g.kv_cache_spec.block_size * blocks_per_chunk
                    ),
                )
                for i, g in enumerate(groups)
            )
        ),
        tokens_per_block=tuple(g.kv_cache_spec.block_size for g in groups),
        tokens_per_hash=16,
        blocks_per_chunk=blocks_per_chunk,
        offload_prompt_only=True,
        extra_config={},
        kv_events_config=OffloadingKVEventsConfig(
            enable_kv_cache_events=False, self_describing_kv_events=False
        ),
        get_manager=lambda: store,
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=1, kv_cache_tensors=[], kv_cache_groups=groups
    )
    scheduler = OffloadingConnectorScheduler(spec, config, kv_cache_config)
    # Hash unit i stands for the chained hash of the first (i + 1) * 16 tokens.
    hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range(4)]
    # (group id, hash index ending the chunk) of each offloaded chunk
    stored = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    writer = ReqContext(req_id="writer")
    store.on_new_request(writer)
    store.complete_store(
        store.prepare_store(
            [make_offload_key(hashes[i], g) for g, i in stored], writer
        ).keys_to_store,
        writer,
    )
    request = types.SimpleNamespace(
        request_id="r",
        kv_transfer_params=None,
        kv_hints=None,
        block_hashes=hashes,
        num_tokens=65,
        num_prompt_tokens=65,
        resumable=False,
        # 0.34, 0.33
        skip_reading_external_kv=False,
        skip_reading_prefix_cache=False,
    )
    scheduler.on_new_request(request)
    hit, _load_async = scheduler.get_num_new_matched_tokens(request, 0, 32)
    # 32 is safe and within the cap; vLLM 0.33 takes the recomputed last token off the
    # capped bound and returns 31
    assert hit == 32
