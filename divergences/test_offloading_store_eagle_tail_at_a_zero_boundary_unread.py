"""Replays the known divergence 'offloading-store-eagle-tail-at-a-zero-boundary-unread'
(known-divergences.toml) on plain vLLM.

It asserts what the spec wants stored; vLLM stores otherwise, so this test FAILS on vLLM
by design: kvspec's tests/test_divergences.py runs it and expects that failure."""

import hashlib
import types

import torch

from vllm.config import DeviceConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload.base import OffloadingKVEventsConfig, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.request import RequestStatus

try:  # where newer releases keep it
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        get_sliding_window_size_in_chunks,
    )
except ImportError:  # older releases
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        get_sliding_window_size_in_chunks,
    )


def test_offloading_store_eagle_tail_at_a_zero_boundary_unread():
    # The drafter's group (is_eagle_group) is a one-token window; vLLM's config has no
    # lookahead hashes (num_hash_lookahead_tokens = 0), so the connector uses the legacy
    # EAGLE drop (the only mode on 0.33 and older; disable_lookahead_block_hashes=True
    # on 0.34).
    groups = [
        KVCacheGroupSpec(
            ["layers.0"],
            SlidingWindowSpec(
                block_size=3,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=7,
            ),
        ),
        KVCacheGroupSpec(
            ["layers.1"],
            SlidingWindowSpec(
                block_size=1,
                num_kv_heads=1,
                head_size=64,
                dtype=torch.float16,
                sliding_window=1,
            ),
            is_eagle_group=True,
        ),
    ]
    blocks_per_chunk, hash_unit, prompt = 1, 1, 3
    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    store = CPUOffloadingManager(num_chunks=256)
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
        tokens_per_hash=hash_unit,
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
    # Hash unit i stands for the chained hash of the first (i + 1) * hash_unit tokens.
    hashes = [
        BlockHash(hashlib.sha256(b"block-%d" % i).digest())
        for i in range(prompt // hash_unit)
    ]
    request = types.SimpleNamespace(
        request_id="r",
        kv_transfer_params=None,
        kv_hints=None,
        block_hashes=hashes,
        num_tokens=prompt,
        num_prompt_tokens=prompt,
        num_computed_tokens=0,
        num_in_flight_tokens=0,
        skip_reading_external_kv=False,
        shared_prefix_boundary=None,
        status=RequestStatus.RUNNING,
    )
    request.is_finished = lambda: RequestStatus.is_finished(request.status)
    scheduler.on_new_request(request)

    def step(new_reqs, cached_ids, new_blocks, scheduled, finished):
        cached = types.SimpleNamespace(
            req_ids=cached_ids, new_block_ids=new_blocks, resumed_req_ids=set()
        )
        output = types.SimpleNamespace(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=scheduled,
            finished_req_ids=finished,
            preempted_req_ids=set(),
            kv_cache_block_copies=None,
            kv_connector_block_state=None,
        )
        meta = scheduler.build_connector_meta(output)
        return [key for job in meta.store_jobs for key in scheduler._jobs[job].keys]

    # The scheduler computes the prompt's tokens [0, 1), then the request is aborted.
    stored, table, next_id = [], [[] for _ in groups], 1
    for index, (start, end) in enumerate([(0, 1)]):
        new = []
        for g, group in enumerate(groups):
            grow = -(-end // group.kv_cache_spec.block_size) - len(table[g])
            new.append(list(range(next_id, next_id + grow)))
            next_id += grow
            table[g].extend(new[-1])
        if index == 0:
            new_req = types.SimpleNamespace(
                req_id="r", block_ids=tuple(list(t) for t in table)
            )
            stored += step([new_req], [], [], {"r": end - start}, set())
        else:
            stored += step([], ["r"], [tuple(new)], {"r": end - start}, set())
        request.num_computed_tokens = end
    if request.num_computed_tokens == prompt:
        request.status, request.num_tokens = (
            RequestStatus.FINISHED_LENGTH_CAPPED,
            prompt + 1,
        )
    else:
        request.status = RequestStatus.FINISHED_ABORTED
    scheduler.request_finished(request)
    stored += step([], [], [], {}, {"r"})

    def key(group, chunk):  # the key of a group's chunk: the hash unit that ends it
        per_chunk = (
            groups[group].kv_cache_spec.block_size * blocks_per_chunk // hash_unit
        )
        return make_offload_key(hashes[(chunk + 1) * per_chunk - 1], group)

    # The store's alignment is the largest chunk, 3 tokens (no full attention), so the
    # prompt's replay boundary, 2, aligns down to 0; with EAGLE the window keeps the
    # block after that boundary (shift 1), the proof of a hit of 0 tokens. The lookup
    # reads a one-token window's chunk just before a hit, at multiples of 3 here (the
    # other group's chunk), so no lookup reads chunk 0 of group 1.
    assert key(1, 0) not in stored
