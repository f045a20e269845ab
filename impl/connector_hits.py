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
from kvspec.spec.layers import SpecDecode
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP
from kvspec.spec.setting import CacheState, Hit, LookupSetting


def _manager_holding(adapter, setting: LookupSetting, state: CacheState, num_tokens: int, skip_reads: bool,
                     spare_blocks: int = 2, hashed: bool = False):
    """A real manager whose pool holds ``state``'s entries under the request's hashes (each
    block carrying its key too when ``hashed``, as a block vLLM cached does) and
    ``spare_blocks`` free blocks, with the request."""
    live = LiveManager.for_groups(
        adapter, list(setting.groups), num_blocks=len(state.cached) + spare_blocks,
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
        key = live.cache_key(hashes[index], gid)
        if hashed:
            block.set_block_hash(key, (index + 1) * setting.hash_block_size)
        pool.cached_block_hash_to_block.insert(key, block)
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


def nixl_load_after_a_hit(adapter, setting: LookupSetting, state: CacheState, num_tokens: int,
                          spare_blocks: int = 16) -> tuple[ConnectorAnswer, int, tuple[tuple[int, ...], ...]]:
    """A decode-side NIXL load admitted on the connector lookup's hit, as the scheduler admits
    it (sched/scheduler.py:_get_local_prefix_cache_hit, then get_num_new_matched_tokens on the
    block-aligned local hit, allocate_slots with the external tokens and delay_cache_blocks for
    an async load, update_state_after_alloc on the request's blocks): the lookup's numbers, the
    external tokens NIXL claims and, per group, the block indices of the request whose ids the
    real NixlPullConnectorScheduler hands its worker to pull into (pull_scheduler.py:
    update_state_after_alloc). The pool holds ``state``'s entries as cached blocks carrying
    their hashes, as vLLM's own cached blocks do, and ``spare_blocks`` free ones."""
    manager, request = _manager_holding(adapter, setting, state, num_tokens, False, spare_blocks, hashed=True)
    blocks, num_local, _boundary, diverged = manager.get_computed_blocks_for_connector(request)
    config = adapter.engine_config(SpecDecode("eagle" if setting.use_eagle else None), hybrid_manager=True)
    config.kv_transfer_config = resolve(S.KV_TRANSFER_CONFIG)(
        kv_connector="NixlConnector", kv_role="kv_consumer", engine_id="kvspec-decode")
    nixl = resolve(S.NIXL_PULL_SCHEDULER)(config, "kvspec-decode", manager.kv_cache_config)
    # A prefill finished remotely: what the proxy hands the decode (its block ids are never read
    # on the scheduler side).
    request.kv_transfer_params = {
        "do_remote_prefill": True, "remote_block_ids": [[0] for _ in setting.groups],
        "remote_engine_id": "kvspec-prefill", "remote_request_id": request.request_id,
        "remote_host": "localhost", "remote_port": 1,
    }
    # The scheduler presents the hit less its partial tail; the hits driven here end on a block.
    external, load_async = nixl.get_num_new_matched_tokens(request, num_local)
    assert external > 0 and load_async, "the load this helper drives"
    # The scheduler's skip_zeroing_group_ids (0.34) only spares the loaded blocks from zeroing.
    allocated = manager.allocate_slots(
        request, 0, num_new_computed_tokens=num_local, new_computed_blocks=blocks,
        num_external_computed_tokens=external, delay_cache_blocks=True,
    )  # fmt: skip
    assert allocated is not None, "spare_blocks too few for the load"
    held = manager.get_blocks(request.request_id)
    nixl.update_state_after_alloc(request, held, external)
    pulled = dict(zip(manager.kv_cache_config.transfer_group_ids, nixl._reqs_need_recv[request.request_id][1]))
    indices = tuple(
        tuple(i for i, block in enumerate(group) if not block.is_null and block.block_id in pulled.get(gid, ()))
        for gid, group in enumerate(held.blocks)
    )
    return ConnectorAnswer(num_local, bool(diverged), None), external, indices
