"""What the SimpleCPUOffload connector's bookkeeping owes the CPU pool between a lookup and the
load it promises (vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler), as
properties named as sentences that return their violations. spec/simple_offload.py says which
matches are safe; this module says what keeps them true until the load reads them.

A lookup that matches ``m`` tokens promises a load of those tokens from CPU blocks. The load
may start a step later (the scheduler's deferred loads, Scheduler._drain_deferred_loads), and in
between the connector's stores take CPU blocks from the front of the pool's eviction order. So:

* a match stays in the pool until the admission that loads it, and the loaded blocks until the
  load is done: the pool still holds the target's KV and state for the matched tokens
  (spec/hits.py), whatever pressure it is under (get_num_new_matched_tokens pins the hit's
  blocks with BlockPool.touch; update_state_after_alloc moves the pin to the load);
* a lookup first releases the request's earlier pin (a retry after a failed allocate_slots), a
  request that skips external reads is matched nothing and pins nothing, a request aborted
  while waiting releases its pin (request_finished), and a load that is done releases its
  blocks (update_connector_output): once no request waits and no load is in flight, no CPU
  block is pinned;
* the eager mode's CPU pool holds a copy of every GPU prefix it offloaded, and an admission with
  a local hit reads that prefix from the GPU, so where the release has
  spec/releases.py:SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX, the admission moves the CPU copy
  of the latest lookup's local prefix (the CPU blocks its own coordinator finds for it) to the
  most-recent end of the eviction order; the lazy mode, a lookup with no local hit, and the
  releases without the rule leave the order as it was, and so does a request that skips
  external reads: it leaves the CPU tier alone, neither pinned nor refreshed. Apart from that,
  an admission keeps the relative order of the blocks that stay free.

The operations are the scheduler's calls for a request, in its order (spec/setting.py's
vocabulary for the pool's entries): Lookup, then Admit or Finish while it waits (Lookup again
on a retry), then LoadDone when its admission loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.hits import target_unsafe_reason
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload import SimpleOffloadCase, with_local_prefix

Entry = tuple[int, int]  # (group id, hash index) of a CPU block, spec/setting.py:CacheState


@dataclass(frozen=True)
class Lookup:
    """get_num_new_matched_tokens for ``request`` past a local prefix of ``num_computed`` tokens."""
    request: int
    num_computed: int
    skips_external_reads: bool = False


@dataclass(frozen=True)
class Admit:
    """update_state_after_alloc with the whole match of the request's latest lookup (0 if none)."""
    request: int


@dataclass(frozen=True)
class LoadDone:
    """The worker reports the request's load done (update_connector_output's finished_recving)."""
    request: int


@dataclass(frozen=True)
class Finish:
    """The request is aborted while it waits (request_finished)."""
    request: int


@dataclass(frozen=True)
class Press:
    """The pool hands out ``num_blocks`` blocks, evicting from the front of its eviction order
    (a store's BlockPool.get_new_blocks), and takes them back empty."""
    num_blocks: int


@dataclass(frozen=True)
class PinsCase:
    """One connector: the groups, the CPU pool's entries and their eviction order (front first),
    eager or lazy mode, the requests' token counts (each a prefix of one token sequence), and
    the operations."""

    setting: LookupSetting
    cpu: CacheState
    eviction_order: tuple[Entry, ...]
    lazy: bool
    request_tokens: tuple[int, ...]
    ops: tuple

    def request_hashes(self, request: int) -> int:
        return self.request_tokens[request] // self.setting.hash_block_size


@dataclass(frozen=True)
class PoolView:
    """What the connector left in the CPU pool: each cached entry's pin count (BlockPool ref_cnt)
    and the eviction order of the free cached entries, front first."""

    pins: dict
    eviction_order: tuple[Entry, ...]


def a_lookup_that_skips_external_reads_pins_nothing(before: PoolView, after: PoolView) -> list[str]:
    return [f"entry {entry} pinned {before.pins.get(entry, 0)} -> {count} by a lookup that skips external reads"
            for entry, count in after.pins.items() if count > before.pins.get(entry, 0)]


def an_outstanding_match_stays_in_the_pool(lookup_now: SimpleOffloadCase, matched: int) -> list[str]:
    """``lookup_now``: a request's latest lookup over the entries the pool holds now; ``matched``:
    the tokens it was matched, still to be loaded. The pool must still hold the target's KV and
    state for them (spec/hits.py:target_unsafe_reason; the drafter's proof was taken at the
    lookup and is not what the load reads)."""
    total = lookup_now.num_computed + matched
    reason = target_unsafe_reason(lookup_now.setting, with_local_prefix(lookup_now), total, lookup_now.num_tokens - 1)
    return [f"request matched {matched} tokens past {lookup_now.num_computed}, and the pool lost them: {reason}"] \
        if reason else []


def no_pin_outlives_its_request(view: PoolView) -> list[str]:
    """Checked when no request waits and no load is in flight."""
    return [f"entry {entry} still pinned {count} times with no request waiting or loading"
            for entry, count in sorted(view.pins.items()) if count]


def an_admission_refreshes_only_the_local_prefix(before: PoolView, after: PoolView,
                                                 refreshed: frozenset[Entry]) -> list[str]:
    """``refreshed``: the CPU copy of the local prefix this admission moves to the most-recent end
    (empty when no refresh is due). Entries free before and after keep their relative order,
    the refreshed ones at the end."""
    stayed = [e for e in before.eviction_order if e in set(after.eviction_order)]
    found = []
    kept = [e for e in stayed if e not in refreshed]
    if [e for e in after.eviction_order if e in set(kept)] != kept:
        found.append(f"the eviction order of entries the admission did not refresh changed: "
                     f"{before.eviction_order} -> {after.eviction_order}")
    moved = [i for i, e in enumerate(after.eviction_order) if e in refreshed]
    if kept and moved and min(moved) < max(after.eviction_order.index(e) for e in kept):
        found.append(f"the local prefix's CPU copy {sorted(refreshed)} is not the most recently used: "
                     f"eviction order {after.eviction_order}")
    return found
