"""The OffloadingConnector's store side on real vLLM: which chunks the connector's scheduler
stores for a request, as vLLM's own ``OffloadingConnectorScheduler._build_store_jobs`` picks them.

Driven the way vLLM's scheduler drives the connector (vllm.v1.core.sched.scheduler:Scheduler.schedule
calls ``build_connector_meta`` once per step; ``_update_finished_requests`` calls
``request_finished``, and the next step's output lists the request in ``finished_req_ids``):
the connector scheduler of impl/offloading.py over an empty real CPU store, the request added
(``on_new_request``), then one step per save: a scheduler output scheduling ``end - start``
tokens of it (its whole block table on the first step, the blocks allocated since on the
others, as ``yield_req_data`` reads them), ``build_connector_meta``, and the request's
``num_computed_tokens`` advanced to ``end``; then the request finishes (length-capped after one
sampled token when its prompt is computed, else aborted or in error mid-prefill, the two ways
``Scheduler`` ends a request there; ``request_finished``,
and a last ``build_connector_meta`` with the request in ``finished_req_ids``, which lifts the
EAGLE tail exclusion and closes the final segment). The request carries the hashes vLLM's block
hasher gives its tokens (under lookahead hashes a unit's once the token after it exists, so the
prompt's last unit is hashed when the sampled token is appended). What is stored is read off the
store jobs' keys (``TransferJobStatus.keys``), mapped back to (group, chunk) by the request's own
keys.

The block table: every block covering the tokens scheduled so far, each a distinct live block
(the allocation the KVCacheManager hands a step); kvspec does not null the blocks a window or
Mamba skips, so the connector's null-block skip is not exercised here (its reachable mask
decides alone).
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.offloading import offloading_scheduler
from kvspec.impl.stand_in import StandIn
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.caching import hashed_units
from kvspec.spec.offloading import OffloadSetting

REQ = "kvspec"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def offloading_stored_chunks(
    adapter: VllmAdapter, setting: OffloadSetting, saves, num_prompt_tokens: int, *, ends_in_error: bool = False
) -> list[dict[int, tuple[int, ...]]]:
    """Per step (each save, then the finishing step), the chunks vLLM's store jobs write, per
    group, in the order the jobs list them. ``saves`` are (start, end) token pairs tiling
    ``[0, end)``; a request they leave mid-prefill ends aborted, or in error if ``ends_in_error``."""
    status_enum = resolve(S.REQUEST_STATUS)
    sched = offloading_scheduler(
        adapter,
        list(setting.groups),
        use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size,
        blocks_per_chunk=setting.blocks_per_chunk,
        num_chunks=4096,
        lookahead_hashes=setting.lookahead_hashes,
    )
    unit, lookahead = setting.hash_block_size, setting.lookahead_tokens
    request = StandIn(
        "Request",
        request_id=REQ,
        kv_transfer_params=None,
        kv_hints=None,
        block_hashes=adapter.block_hashes(hashed_units(num_prompt_tokens, unit, lookahead)),
        num_tokens=num_prompt_tokens,
        num_prompt_tokens=num_prompt_tokens,
        num_computed_tokens=0,
        num_in_flight_tokens=0,
        skip_reading_external_kv=False,
        shared_prefix_boundary=None,
        status=status_enum.RUNNING,
    )
    request.is_finished = lambda: status_enum.is_finished(request.status)
    build_meta = resolve(S.OFFLOAD_BUILD_CONNECTOR_META)
    sched.on_new_request(request)
    tables = [[] for _ in setting.groups]  # block ids per group, distinct and live
    next_id = [1]
    steps = []
    for index, (start, end) in enumerate(saves):
        new = []
        for gid, group in enumerate(setting.groups):
            grow = _cdiv(end, group.block_size) - len(tables[gid])
            fresh = list(range(next_id[0], next_id[0] + max(0, grow)))
            next_id[0] += len(fresh)
            tables[gid].extend(fresh)
            new.append(fresh)
        first = index == 0
        output = _scheduler_output(
            new=[StandIn("NewRequestData", req_id=REQ, block_ids=tuple(list(t) for t in tables))] if first else [],
            cached=StandIn("CachedRequestData", req_ids=[] if first else [REQ], new_block_ids=[] if first else [tuple(new)],
                           resumed_req_ids=set()),
            scheduled={REQ: end - start},
            finished=set(),
        )
        steps.append(_stored(sched, request, build_meta(sched, output)))
        request.num_computed_tokens = end
    if request.num_computed_tokens == num_prompt_tokens:  # prefilled: it sampled a token, then hit its length cap
        request.status, request.num_tokens = status_enum.FINISHED_LENGTH_CAPPED, num_prompt_tokens + 1
        # Appending the token hashes what it completes (Request.append_output_token_ids).
        request.block_hashes = adapter.block_hashes(hashed_units(num_prompt_tokens + 1, unit, lookahead))
    else:  # stopped mid-prefill: its client aborted it, or the engine ended it in error
        request.status = status_enum.FINISHED_ERROR if ends_in_error else status_enum.FINISHED_ABORTED
    resolve(S.OFFLOAD_REQUEST_FINISHED)(sched, request)
    output = _scheduler_output(
        new=[], cached=StandIn("CachedRequestData", req_ids=[], new_block_ids=[], resumed_req_ids=set()), scheduled={}, finished={REQ}
    )
    steps.append(_stored(sched, request, build_meta(sched, output)))
    return steps


def _scheduler_output(*, new, cached, scheduled, finished):
    return StandIn(
        "SchedulerOutput",
        scheduled_new_reqs=new,
        scheduled_cached_reqs=cached,
        num_scheduled_tokens=scheduled,
        finished_req_ids=finished,
        preempted_req_ids=set(),
        kv_cache_block_copies=None,
        kv_connector_block_state=None,
    )


def _stored(sched, request, meta) -> dict[int, tuple[int, ...]]:
    """The (group, chunk) of every key the step's store jobs write."""
    status = sched._req_status.get(request.request_id)
    where = {
        key: (gid, chunk)
        for gid, group_state in enumerate(status.group_states)
        for chunk, key in enumerate(group_state.offload_keys)
    } if status is not None else {}
    stored: dict[int, list[int]] = {}
    for job_id in meta.store_jobs:
        for key in sched._jobs[job_id].keys:
            gid, chunk = where[key]
            stored.setdefault(gid, []).append(chunk)
    return {gid: tuple(chunks) for gid, chunks in stored.items()}
