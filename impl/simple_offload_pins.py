"""The SimpleCPUOffload connector's bookkeeping on real vLLM: one real SimpleCPUOffloadScheduler
per case (impl/simple_offload.py), its CPU pool holding the drawn entries, each in a block of its
own, freed in the drawn eviction order; a real GPU BlockPool bound as Scheduler.__init__ binds
the manager's; then the case's operations, each as the scheduler calls it
(spec/simple_offload_pins.py):

* Lookup: get_num_new_matched_tokens past the local prefix (Scheduler.schedule's waiting loop);
* Admit: update_state_after_alloc with fresh GPU blocks for the local prefix and the match,
  the whole match taken (what allocate_slots hands it when the blocks fit);
* LoadDone: update_connector_output with the request in ``finished_recving``, as the worker
  reports a load (the transfer itself moves data, no pin); nothing when the admission loaded
  nothing;
* Finish: request_finished for a request aborted while it waits; the scheduler's
  request_finished_all_groups first queues the eager stores of the blocks it computed, and a
  waiting request has computed none;
* Press: BlockPool.get_new_blocks on the CPU pool, as a store takes blocks, then the blocks back.

After each operation, what the pool holds (spec/simple_offload_pins.py:PoolView), and before an
admission, the CPU blocks the connector's own coordinator finds for the local prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.impl import vllm_symbols as S
from kvspec.impl.simple_offload import connector_request, simple_offload_scheduler
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.simple_offload_pins import Admit, Finish, LoadDone, Lookup, PinsCase, PoolView, Press


@dataclass(frozen=True)
class Step:
    """One operation and what it left."""

    op: object
    before: PoolView
    after: PoolView
    matched: int | None  # a Lookup's answer
    local_copy: frozenset  # an Admit's local prefix as the CPU coordinator finds it (before the admission)


class PinsDriver:
    """One real connector for ``case``, its pool filled as the module docstring says, running
    the case's operations one at a time."""

    def __init__(self, adapter, case: PinsCase):
        setting = case.setting
        self.case = case
        self.scheduler, _, self.hash_bs = simple_offload_scheduler(
            adapter, setting, num_blocks=len(case.cpu.cached) + 2, lazy=case.lazy)
        self.hashes = adapter.block_hashes(case.cpu.num_hashes)
        self.pool = self.scheduler.cpu_block_pool
        make_key = resolve(S.MAKE_BLOCK_HASH_WITH_GROUP_ID)
        blocks = self.pool.get_new_blocks(len(case.eviction_order))
        self.entry_of = {}
        for (gid, index), block in zip(case.eviction_order, blocks):
            resolve(S.POOL_INSERT_BLOCK_HASH)(self.pool, make_key(self.hashes[index], gid), block, None)
            self.entry_of[block.block_id] = (gid, index)
        self.pool.free_blocks(blocks)  # the first is evicted first
        sizes = [g.block_size for g in setting.groups]
        most_tokens = max(case.request_tokens)
        gpu_blocks = 1 + len(case.request_tokens) * sum(-(-most_tokens // size) for size in sizes)
        self.gpu_pool = resolve(S.BLOCK_POOL)(gpu_blocks, enable_caching=True, hash_block_size=self.hash_bs)
        resolve(S.SIMPLE_CPU_OFFLOAD_BIND_GPU_POOL)(self.scheduler, self.gpu_pool)
        self.requests = [connector_request(f"r{i}", self.hashes[:case.request_hashes(i)], tokens)
                         for i, tokens in enumerate(case.request_tokens)]
        self.latest: dict[int, tuple[int, int]] = {}  # request -> (local prefix, matched) of its latest lookup
        self.loading: set[int] = set()

    def view(self) -> PoolView:
        cached = {block.block_id: block for block in self.pool.blocks
                  if block.block_id in self.entry_of and block.block_hash is not None}
        order = tuple(self.entry_of[block.block_id] for block in self.pool.free_block_queue.get_all_free_blocks()
                      if block.block_id in cached)
        return PoolView({self.entry_of[bid]: block.ref_cnt for bid, block in cached.items()}, order)

    def _entries(self, hit_blocks) -> frozenset:
        return frozenset(self.entry_of[b.block_id] for group in hit_blocks for b in group
                         if not b.is_null and b.block_id in self.entry_of)

    def run(self, op) -> Step:
        before, matched, local_copy = self.view(), None, frozenset()
        if isinstance(op, Lookup):
            req = self.requests[op.request]
            req.skip_reading_external_kv = req.skip_reading_prefix_cache = op.skips_external_reads
            matched, _ = resolve(S.SIMPLE_CPU_OFFLOAD_MATCHED)(self.scheduler, req, op.num_computed)
            # The scheduler zeroes the match of a request that skips external reads itself.
            self.latest[op.request] = (op.num_computed, 0 if op.skips_external_reads else matched or 0)
        elif isinstance(op, Admit):
            local, matched_tokens = self.latest[op.request]
            if local:
                found, _, _ = self.scheduler.cpu_coordinator.find_longest_cache_hit(
                    self.requests[op.request].block_hashes, local)
                local_copy = self._entries(found)
            table = resolve(S.KV_CACHE_BLOCKS)(tuple(
                self.gpu_pool.get_new_blocks(-(-(local + matched_tokens) // g.block_size))
                for g in self.case.setting.groups))
            resolve(S.SIMPLE_CPU_OFFLOAD_ADMIT)(self.scheduler, self.requests[op.request], table, matched_tokens)
            if matched_tokens:
                self.loading.add(op.request)
        elif isinstance(op, LoadDone):
            if op.request in self.loading:  # else its admission loaded nothing: no load to report
                self.loading.discard(op.request)
                output = resolve(S.KV_CONNECTOR_OUTPUT)(finished_recving={self.requests[op.request].request_id})
                resolve(S.SIMPLE_CPU_OFFLOAD_OUTPUT)(self.scheduler, output)
        elif isinstance(op, Finish):
            resolve(S.SIMPLE_CPU_OFFLOAD_FINISHED)(self.scheduler, self.requests[op.request], [])
        elif isinstance(op, Press):
            taken = self.pool.get_new_blocks(min(op.num_blocks, self.pool.get_num_free_blocks()))
            self.pool.free_blocks(taken)
        else:
            raise TypeError(f"not an operation: {op!r}")
        return Step(op, before, self.view(), matched, local_copy)


def run_pins_case(adapter, case: PinsCase) -> list[Step]:
    driver = PinsDriver(adapter, case)
    return [driver.run(op) for op in case.ops]
