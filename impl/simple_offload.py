"""The SimpleCPUOffload connector's lookup on real vLLM: a fresh real SimpleCPUOffloadScheduler
per lookup (vllm/v1/simple_kv_offload/manager.py), its own CPU coordinator and pool built by
vLLM from the groups, the pool holding exactly the drawn entries, then
``get_num_new_matched_tokens`` for a request past its local prefix.

kvspec supplies the engine config (impl/vllm_adapter.py:engine_config, with the model length
the CPU coordinator reads), one KV-cache tensor so that vLLM can size the CPU pool, and a
request carrying block hashes; the lookup, its alignment and its cap are vLLM's.
"""

from __future__ import annotations

import functools

from kvspec.impl import vllm_symbols as S
from kvspec.impl.stand_in import StandIn
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.layers import SpecDecode
from kvspec.spec.simple_offload import SimpleOffloadCase

_BLOCK_BYTES = 4096  # any size: the CPU pool gets as many blocks as the GPU one


@functools.lru_cache(maxsize=8)
def _engine_config(adapter, use_eagle: bool):
    config = adapter.engine_config(SpecDecode("eagle" if use_eagle else None), hybrid_manager=True)
    model = config.model_config
    object.__setattr__(config, "model_config", StandIn("ModelConfig", max_model_len=4096,
                                                         supports_kv_cache_grouping=False, hf_config=model.hf_config))
    return config


def simple_offload_scheduler(adapter, setting, *, num_blocks: int, lazy: bool):
    """A real SimpleCPUOffloadScheduler for ``setting``'s groups with a CPU pool of about
    ``num_blocks`` blocks, and its scheduler and hash block sizes."""
    groups = list(setting.groups)
    tensor = resolve(S.KV_CACHE_TENSOR)(size=num_blocks * _BLOCK_BYTES, layers=["layers.0"],
                                        layer_stride=_BLOCK_BYTES, block_stride=_BLOCK_BYTES)
    kv_cache_config = resolve(S.KV_CACHE_CONFIG)(num_blocks=num_blocks, kv_cache_tensors=[tensor],
                                                 kv_cache_groups=adapter.vllm_groups(groups))
    scheduler_bs, hash_bs = adapter.block_sizes(groups, setting.hash_block_size)
    scheduler = resolve(S.SIMPLE_CPU_OFFLOAD_SCHEDULER)(
        _engine_config(adapter, setting.use_eagle), kv_cache_config, cpu_capacity_bytes=num_blocks * _BLOCK_BYTES,
        scheduler_block_size=scheduler_bs, hash_block_size=hash_bs, lazy_offload=lazy,
    )
    return scheduler, scheduler_bs, hash_bs


def connector_request(request_id: str, hashes: list, num_tokens: int, *, skips_external_reads: bool = False):
    """The fields of a vllm.v1.request:Request the connector reads. Both names of the skip flag:
    0.34 reads skip_reading_external_kv, 0.33 and older skip_reading_prefix_cache."""
    return StandIn("Request", request_id=request_id, block_hashes=hashes, num_tokens=num_tokens,
                   skip_reading_external_kv=skips_external_reads, skip_reading_prefix_cache=skips_external_reads)


def simple_offload_matched(adapter, case: SimpleOffloadCase) -> tuple[int | None, bool]:
    """(matched tokens, loads asynchronously) as get_num_new_matched_tokens answers them."""
    scheduler, _, _ = simple_offload_scheduler(adapter, case.setting, num_blocks=len(case.cpu.cached) + 2,
                                               lazy=case.lazy)
    hashes = adapter.block_hashes(case.cpu.num_hashes)
    pool = scheduler.cpu_block_pool
    make_key = resolve(S.MAKE_BLOCK_HASH_WITH_GROUP_ID)
    cached = sorted(case.cpu.cached)
    for (gid, index), block in zip(cached, pool.get_new_blocks(len(cached))):
        pool.cached_block_hash_to_block.insert(make_key(hashes[index], gid), block)
    request = connector_request("kvspec", hashes, case.num_tokens)
    return scheduler.get_num_new_matched_tokens(request, case.num_computed)
