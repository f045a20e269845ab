"""The engine core's lookup for a request scheduled with a KV connector, on real vLLM:
KVCacheManager.get_computed_blocks_for_connector and the per-group lookup it decides from
(HybridKVCacheCoordinator.find_longest_cache_hit_per_group).

A fresh real KVCacheManager per lookup (impl/live.py builds it as the engine does), its pool
holding exactly the drawn entries under the real request's block hashes, and a real Request
built from a prompt of distinct tokens, so ``prefix_cache_lookup_enabled`` and the cap
(Request.get_max_cache_hit_length) are vLLM's.
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.live import LiveManager
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.connector_hits import ConnectorAnswer, max_connector_hit
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP
from kvspec.spec.setting import CacheState, Hit, LookupSetting


def _manager_holding(adapter, setting: LookupSetting, state: CacheState, num_tokens: int, skip_reads: bool):
    live = LiveManager.for_groups(
        adapter, list(setting.groups), num_blocks=len(state.cached) + 2,
        hash_block_size=setting.hash_block_size, use_eagle=setting.use_eagle,
        max_model_len=num_tokens + 64,
    )  # fmt: skip
    request = resolve(S.REQUEST)(
        request_id="kvspec-connector",
        prompt_token_ids=list(range(1, num_tokens + 1)),
        sampling_params=resolve(S.SAMPLING_PARAMS)(max_tokens=1, skip_reading_prefix_cache=skip_reads),
        pooling_params=None,
        block_hasher=live._block_hasher,
    )
    hashes = request.block_hashes
    assert len(hashes) == state.num_hashes, "the request hashes each of the state's units once"
    pool = live.manager.block_pool
    for (gid, index), block in zip(sorted(state.cached), pool.get_new_blocks(len(state.cached))):
        pool.cached_block_hash_to_block.insert(live.cache_key(hashes[index], gid), block)
    return live.manager, request


def connector_hit(adapter, setting: LookupSetting, state: CacheState, num_tokens: int, cap: int | None = None,
                  skip_reads: bool = False) -> tuple[Hit, ConnectorAnswer]:
    """What get_computed_blocks_for_connector returns for a ``num_tokens`` request over a pool
    holding exactly ``state``, the scheduler's ``cap`` passed where the release takes one
    (spec/releases.py:CONNECTOR_LOOKUP_TAKES_A_CAP): its blocks (real or null, per group) and its
    numbers, with the per-group hits find_longest_cache_hit_per_group gives on the same pool at
    the same limit (None when the model takes get_computed_blocks' path: a coordinator without
    the per-group lookup, or a request that skips prefix-cache reads)."""
    manager, request = _manager_holding(adapter, setting, state, num_tokens, skip_reads)
    capped = cap is not None and adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP)
    answer = manager.get_computed_blocks_for_connector(request, *([cap] if capped else []))
    blocks, num_local, boundary, diverged = answer
    coordinator = manager.coordinator
    per_group = None
    if (not skip_reads and getattr(coordinator, "full_attention_group_id", None) is not None
            and manager.kv_cache_config.has_mamba_layers):
        limit = max_connector_hit(num_tokens, cap if capped else None)
        _, per_group = coordinator.find_longest_cache_hit_per_group(request.block_hashes, limit)
    real = tuple(tuple(not b.is_null for b in group) for group in blocks.blocks)
    return Hit(num_local, real), ConnectorAnswer(num_local, bool(diverged), None if per_group is None else tuple(per_group),
                                                 boundary)
