"""The OffloadingConnector's cache-hit lookup on real vLLM, stateless: one fresh connector
scheduler per lookup, over a real CPU offloading store holding exactly the drawn chunks.

Driven the way vLLM's own unit tests drive it
(tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py builds an
``OffloadingConnectorScheduler`` from a duck-typed ``OffloadingSpec`` namespace, a real
``KVCacheConfig`` and a real ``CPUOffloadingManager``, then calls ``_lookup_complete_chunks``).
The groups, their chunk windows (offloading/config.py:get_sliding_window_size_in_chunks), the
EAGLE decision (SpeculativeConfig.use_eagle_block_drop), the store and the lookup are all
vLLM's; kvspec supplies only the cached keys and a request carrying block hashes.

Which chunks the hit loads, per group, are read from vLLM itself: with GPU prefix caching on,
the lookup asks, for every chunk of the hit it would load, whether that chunk is already being
loaded (``_chunks_being_loaded``); a recorder in that set's place answers no and notes the
question.
"""

from __future__ import annotations

import functools

from kvspec.impl import vllm_symbols as S
from kvspec.impl.failures import CannotDrive
from kvspec.impl.stand_in import StandIn
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.caching import hashed_units
from kvspec.spec.layers import CacheGroup, SpecDecode
from kvspec.spec.releases import OFFLOADING_TRIMS_WINDOW_BEFORE_CAP
from kvspec.spec.setting import CacheState, Hit


class _LoadRecorder:
    """Stands in for the scheduler's set of chunks being loaded: non-empty, holding nothing,
    remembering every key asked about."""

    def __init__(self) -> None:
        self.asked: list = []

    def __bool__(self) -> bool:
        return True

    def __contains__(self, key) -> bool:
        self.asked.append(key)
        return False


def trims_window_before_cap(adapter: VllmAdapter) -> bool:
    """Whether the target takes a windowed model's recomputed last token off the request before
    capping the load (spec/releases.py:OFFLOADING_TRIMS_WINDOW_BEFORE_CAP, read from
    _lookup_complete_chunks), asked of the rules its release has."""
    return adapter.has(OFFLOADING_TRIMS_WINDOW_BEFORE_CAP)


@functools.lru_cache(maxsize=8)
def _vllm_config(adapter: VllmAdapter, use_eagle: bool, lookahead_hashes: bool = False):
    """One engine config per target and EAGLE setting (building one takes milliseconds; the
    connector scheduler only reads it). With ``lookahead_hashes`` the config names this connector,
    and vLLM's own resolution sets the hash lookahead it takes (VllmConfig
    ._resolve_num_hash_lookahead_tokens, which asks OffloadingConnector.supports_lookahead_block_hashes)."""
    config = adapter.engine_config(SpecDecode("eagle" if use_eagle else None), hybrid_manager=True)
    config.cache_config.enable_prefix_caching = True  # so the lookup reports the chunks it loads
    if lookahead_hashes:
        transfer = resolve(S.KV_TRANSFER_CONFIG)(kv_connector="OffloadingConnector", kv_role="kv_both")
        object.__setattr__(config, "kv_transfer_config", transfer)
        config.num_hash_lookahead_tokens = resolve(S.RESOLVE_HASH_LOOKAHEAD)(config)
        if config.num_hash_lookahead_tokens != 1:  # what the setting means no longer holds: ours to mend
            raise CannotDrive(f"{S.RESOLVE_HASH_LOOKAHEAD} resolves {config.num_hash_lookahead_tokens} lookahead "
                              "tokens for an EAGLE drafter with the OffloadingConnector, not 1")
    return config


def offloading_scheduler(
    adapter: VllmAdapter,
    groups: list[CacheGroup],
    *,
    use_eagle: bool,
    hash_block_size: int,
    blocks_per_chunk: int = 1,
    num_chunks: int = 64,
    lookahead_hashes: bool = False,
):
    """A real OffloadingConnectorScheduler over these groups and an empty real CPU store of
    ``num_chunks`` chunks. Speculative decoding is EAGLE when ``use_eagle`` (vLLM's
    use_eagle_block_drop decides), the groups' ``is_eagle_group`` annotations as given."""
    window_in_chunks = resolve(S.WINDOW_IN_CHUNKS)
    vllm_groups = adapter.vllm_groups(groups)
    config = _vllm_config(adapter, use_eagle, lookahead_hashes)
    store = resolve(S.CPU_OFFLOADING_MANAGER)(num_chunks=num_chunks)
    spec = StandIn(
        "OffloadingSpec",
        config=StandIn(
            "OffloadingConfig",
            groups=tuple(
                StandIn(
                    "OffloadingGroupConfig",
                    group_id=gid,
                    tokens_per_block=group.block_size,
                    sliding_window_size_in_chunks=window_in_chunks(
                        vllm_group.kv_cache_spec, group.block_size * blocks_per_chunk
                    ),
                )
                for gid, (group, vllm_group) in enumerate(zip(groups, vllm_groups))
            )
        ),
        tokens_per_block=tuple(group.block_size for group in groups),
        tokens_per_hash=hash_block_size,
        blocks_per_chunk=blocks_per_chunk,
        offload_prompt_only=True,
        extra_config={},
        kv_events_config=resolve(S.OFFLOADING_EVENTS_CONFIG)(
            enable_kv_cache_events=False, self_describing_kv_events=False
        ),
        get_manager=lambda: store,
    )
    kv_cache_config = resolve(S.KV_CACHE_CONFIG)(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=vllm_groups)
    return resolve(S.OFFLOADING_SCHEDULER)(spec, config, kv_cache_config)


def offloading_hit(
    adapter: VllmAdapter,
    groups: list[CacheGroup],
    state: CacheState,
    num_tokens: int,
    *,
    use_eagle: bool,
    hash_block_size: int,
    blocks_per_chunk: int = 1,
    max_num_new_tokens: int | None = None,
    lookahead_hashes: bool = False,
) -> Hit:
    """The hit the OffloadingConnector's scheduler finds for a ``num_tokens`` request, nothing
    computed locally, against a store holding the chunk-end entries of ``state``
    (offloading/scheduler.py:OffloadingConnectorScheduler._lookup_complete_chunks). Entries of
    ``state`` that end no chunk are not offloadable and are not stored. Real blocks are per
    chunk: whether the load brings that chunk of the hit. Under ``lookahead_hashes`` each hash
    also covers the token after its unit."""
    lookahead = 1 if lookahead_hashes else 0
    assert state.num_hashes == hashed_units(num_tokens, hash_block_size, lookahead), "a request hashes each unit once"
    sched = offloading_scheduler(
        adapter,
        groups,
        use_eagle=use_eagle,
        hash_block_size=hash_block_size,
        blocks_per_chunk=blocks_per_chunk,
        num_chunks=len(state.cached) + 1,
        lookahead_hashes=lookahead_hashes,
    )
    hashes = adapter.block_hashes(state.num_hashes)
    _fill(sched.manager, hashes, sched.config.kv_group_configs, state)
    request = StandIn(
        "Request",
        request_id="kvspec",
        kv_transfer_params=None,
        kv_hints=None,
        block_hashes=hashes,
        num_tokens=num_tokens,
        num_prompt_tokens=num_tokens,
        skip_reading_external_kv=False,
    )
    sched.on_new_request(request)
    status = sched._req_status[request.request_id]
    status.update_offload_keys()
    status.num_locally_computed_tokens = 0
    recorder = _LoadRecorder()
    sched._chunks_being_loaded = recorder
    answer = sched._lookup_complete_chunks(status, max_num_new_tokens)
    hit = answer[0] if isinstance(answer, tuple) else answer  # 0.34 adds the full-attention boundary
    assert hit is not None, "a store that answers at once never defers"
    where = {
        key: (gid, chunk)
        for gid, group_state in enumerate(status.group_states)
        for chunk, key in enumerate(group_state.offload_keys)
    }
    loaded = {where[key] for key in recorder.asked}
    chunk_sizes = [c.tokens_per_chunk for c in sched.config.kv_group_configs]
    return Hit(
        hit,
        tuple(
            tuple((gid, chunk) in loaded for chunk in range(-(-hit // size))) if hit else ()
            for gid, size in enumerate(chunk_sizes)
        ),
    )


def _fill(store, hashes, group_configs, state: CacheState) -> None:
    """Store, as one earlier request would have, the key of every cached entry that ends a chunk."""
    make_offload_key = resolve(S.MAKE_OFFLOAD_KEY)
    keys = [
        make_offload_key(hashes[index], gid)
        for gid, index in sorted(state.cached)
        if (index + 1) % group_configs[gid].hashes_per_chunk == 0
    ]
    if not keys:
        return
    writer = resolve(S.OFFLOAD_REQ_CONTEXT)(req_id="kvspec-writer")
    store.on_new_request(writer)
    prepared = store.prepare_store(keys, writer)
    assert prepared is not None and not prepared.evicted_keys, "the store has room for every key"
    store.complete_store(prepared.keys_to_store, writer)
