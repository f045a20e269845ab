"""A real vLLM ``KVCacheManager`` that tests drive the way vLLM's scheduler drives it.

One call of ``schedule`` is one scheduler step that schedules one request
(vllm.v1.core.sched.scheduler:Scheduler.schedule, with a token budget that fits one request):
``new_step_starts``; for a waiting request the prefix-cache lookup; the chunk cut by the
scheduler's own Mamba block-aligned split and prefill-lookahead reserve; ``allocate_slots``
(which caches the blocks the chunk completes); the copy-on-write copies handed to the worker
and their retained blocks released; ``num_computed_tokens`` advanced; and, when the chunk
reaches the end of the known tokens, one sampled token appended and the finalized blocks
cached again (Scheduler.update_from_output). ``preempt`` and ``finish`` free a request's
blocks as the scheduler does. Nothing here decides what vLLM decides: every block id, hit and
refusal comes from vLLM; the step returns what the worker would be told to compute.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvspec.impl import vllm_symbols as S
from kvspec.impl.call_trace import CallTrace
from kvspec.impl.stand_in import StandIn
from kvspec.impl.vllm_specs import with_the_drafters_margins
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES, MAMBA_CHECKPOINT_IS_THE_SHARED_PREFIX_ONE

MAX_OUTPUT_TOKENS = 1 << 20  # requests end when the test finishes them, never by length


@dataclass
class Scheduled:
    """What the scheduler keeps between steps for one request."""

    request: object  # vllm.v1.request.Request
    hit_length: int = 0  # the prefix-cache hit taken when it was last admitted
    running: bool = False


@dataclass(frozen=True)
class Step:
    """What one scheduled step handed the worker: compute tokens ``[start, end)`` of the
    request's sequence into ``tables`` (block ids per group, 0 = null), after running the
    block ``copies`` (source, destination); ``sampled`` is the token appended after it."""

    request_id: str
    hit: int | None  # the prefix-cache hit, for an admission; None for a running request
    claimed: tuple[list[int], ...]  # the blocks the hit claimed, per group
    start: int
    end: int
    tables: tuple[list[int], ...]
    copies: tuple[tuple[int, int], ...]
    sampled: int | None


class PoolRecorder:
    """Records the pool-level operations vLLM's managers perform on one ``BlockPool``
    (allocate, touch, free, cache / uncache a key, reset), by wrapping that instance's
    methods: it observes, it never changes an argument or a result. Key removals made inside
    an allocation or a reset are the pool's own evictions, which the reference predicts
    itself, so they are not recorded. ("uncache", key, id, during_free): whether a
    ``free_blocks`` call made it (the order of the records cannot tell; stateful/judge.py)."""

    def __init__(self, pool):
        self.operations: list[tuple] = []
        self._inside = self._freeing = 0
        self._pool = pool
        self._wrap(pool, "get_new_blocks", self._allocate)
        self._wrap(pool, "touch", self._touch)
        self._wrap(pool, "free_blocks", self._free)
        self._wrap(pool, "reset_prefix_cache", self._reset)
        self._watch_map()

    def _watch_map(self) -> None:
        # vLLM 0.33's reset replaces the map with a new one: watch whichever is current.
        cache_map = self._pool.cached_block_hash_to_block
        if getattr(cache_map, "_kvspec_watched", False):
            return
        self._wrap(cache_map, "insert", self._insert)
        self._wrap(cache_map, "pop", self._pop)
        cache_map._kvspec_watched = True

    def _wrap(self, owner, name, recorder):
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: recorder(original, *args, **kwargs))

    def take(self) -> list[tuple]:
        operations, self.operations = self.operations, []
        return operations

    def _allocate(self, original, num_blocks):
        self._inside += 1
        try:
            blocks = original(num_blocks)
        finally:
            self._inside -= 1
        self.operations.append(("allocate", [b.block_id for b in blocks]))
        return blocks

    def _touch(self, original, blocks):
        blocks = list(blocks)
        self.operations.append(("touch", [b.block_id for b in blocks]))
        return original(blocks)

    def _free(self, original, ordered_blocks, *args, **kwargs):
        blocks = list(ordered_blocks)
        if args or kwargs.get("evict_first"):
            raise AssertionError("kvspec's scheduler never frees with evict_first")
        self.operations.append(("free", [b.block_id for b in blocks]))
        self._freeing += 1
        try:
            return original(blocks)
        finally:
            self._freeing -= 1

    def _reset(self, original):
        self._inside += 1
        try:
            succeeded = original()
        finally:
            self._inside -= 1
            self._watch_map()
        self.operations.append(("reset", succeeded))
        return succeeded

    def _insert(self, original, key, block):
        if not self._inside:
            self.operations.append(("cache", bytes(key), block.block_id))
        return original(key, block)

    def _pop(self, original, key, block_id):
        popped = original(key, block_id)
        if popped is not None and not self._inside:
            self.operations.append(("uncache", bytes(key), block_id, self._freeing > 0))
        return popped


class LiveManager:
    def __init__(
        self,
        vllm_groups: list,
        *,
        rules: frozenset,
        num_blocks: int,
        scheduler_block_size: int,
        hash_block_size: int,
        use_eagle: bool,
        max_model_len: int,
        num_hash_lookahead_tokens: int = 0,
        num_lookahead_tokens: int = 0,
        num_prefill_lookahead: int | None = None,
        retention_interval: int | None = None,
        token_budget: int = 2048,
        record_pool: bool = False,
    ):
        self.rules = rules  # the target release's (spec/releases.py), for whoever judges this manager
        sha256 = resolve(S.SHA256)
        resolve(S.INIT_NONE_HASH)(sha256)
        self._Request, self._SamplingParams = resolve(S.REQUEST), resolve(S.SAMPLING_PARAMS)
        self._Status = resolve(S.REQUEST_STATUS)
        self._key = resolve(S.MAKE_BLOCK_HASH_WITH_GROUP_ID)
        # On a release without lookahead hashes (spec/releases.py) the call takes no lookahead.
        lookahead = {"num_hash_lookahead_tokens": num_hash_lookahead_tokens} if LOOKAHEAD_BLOCK_HASHES in rules else {}
        if num_hash_lookahead_tokens and not lookahead:
            raise ValueError(f"this release has no {LOOKAHEAD_BLOCK_HASHES.name!r}")
        self._block_hasher = resolve(S.GET_REQUEST_BLOCK_HASHER)(hash_block_size, sha256, *lookahead.values())
        config = resolve(S.KV_CACHE_CONFIG)(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=vllm_groups)
        config.prefix_cache_retention_interval = retention_interval
        # Unless given (multi-module MTP: its num_speculative_tokens), an eagle-family drafter's
        # prefill lookahead: one token (vllm.config.vllm:VllmConfig.num_prefill_lookahead_tokens).
        default_lookahead = 1 if num_lookahead_tokens else 0
        self.num_prefill_lookahead = default_lookahead if num_prefill_lookahead is None else num_prefill_lookahead
        self.manager = resolve(S.KV_CACHE_MANAGER)(
            config,
            max_model_len=max_model_len,
            scheduler_block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            enable_caching=True,
            use_eagle=use_eagle,
            num_prefill_lookahead=self.num_prefill_lookahead,
            **lookahead,
        )
        self.num_lookahead_tokens = num_lookahead_tokens
        self.token_budget = token_budget
        self.has_mamba = any(type(g.kv_cache_spec).__name__ == "MambaSpec" for g in vllm_groups)
        self.recorder = PoolRecorder(self.manager.block_pool) if record_pool else None
        self.trace = CallTrace(self.manager, vllm_groups, rules, scheduler_block_size, hash_block_size,  # for replays
                               num_hash_lookahead_tokens, self.num_prefill_lookahead)
        self._split_view = self._scheduler_view(vllm_groups, scheduler_block_size, hash_block_size,
                                                use_eagle, num_hash_lookahead_tokens)
        self.requests: dict[str, Scheduled] = {}

    @classmethod
    def for_groups(
        cls,
        adapter,
        groups,
        *,
        num_blocks: int,
        hash_block_size: int | None = None,
        use_eagle: bool = False,
        num_hash_lookahead_tokens: int = 0,
        num_speculative_tokens: int = 0,
        num_prefill_lookahead: int | None = None,
        retention_interval: int | None = None,
        max_model_len: int = 4096,
        record_pool: bool = False,
    ) -> "LiveManager":
        """A manager for kvspec groups (spec/layers.py:CacheGroup), configured as the engine
        configures one: with speculative decoding, ``num_speculative_tokens`` lookahead slots
        per step, the drafter's ``num_prefill_lookahead`` (default: one token, an eagle-family
        drafter's) and the specs' margins for them (impl/vllm_specs.py:with_the_drafters_margins)."""
        scheduler_bs, hash_bs = adapter.block_sizes(groups, hash_block_size)
        lookahead = (1 if num_speculative_tokens else 0) if num_prefill_lookahead is None else num_prefill_lookahead
        vllm_groups = [dataclasses.replace(g, kv_cache_spec=with_the_drafters_margins(
            g.kv_cache_spec, num_speculative_tokens, lookahead)) for g in adapter.vllm_groups(groups)]
        return cls(vllm_groups, rules=adapter.rules, num_blocks=num_blocks, scheduler_block_size=scheduler_bs,
                   hash_block_size=hash_bs, use_eagle=use_eagle, max_model_len=max_model_len,
                   num_hash_lookahead_tokens=num_hash_lookahead_tokens, num_lookahead_tokens=num_speculative_tokens,
                   num_prefill_lookahead=lookahead, retention_interval=retention_interval,
                   record_pool=record_pool)

    # ------------------------------------------------------------------ scheduler rules
    def _scheduler_view(self, vllm_groups, scheduler_block_size, hash_block_size, use_eagle, lookahead):
        """The fields of vllm.v1.core.sched.scheduler:Scheduler that its chunk rules read, set
        as Scheduler.__init__ sets them for these groups (Mamba align mode, no internal
        prefill-checkpoint blocks, no shared-prefix checkpoint, no long-prefill threshold)."""
        mamba = [g.kv_cache_spec for g in vllm_groups if type(g.kv_cache_spec).__name__ == "MambaSpec"]
        if not mamba:
            return None
        partial = self.manager.coordinator.enable_partial_hash_hits
        return StandIn(
            "Scheduler",
            # CacheConfig.block_size is the Mamba block size in align mode
            # (vllm.platforms.interface:Platform.update_block_size_for_backend).
            cache_config=StandIn("CacheConfig", block_size=mamba[0].block_size),
            block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            use_eagle_block_drop=use_eagle,
            num_hash_lookahead_tokens=lookahead,
            num_prefill_lookahead=self.num_prefill_lookahead,
            mamba_partial_cache_hit=hash_block_size < scheduler_block_size and partial,
            mamba_has_prefill_checkpoint_blocks=False,
            mamba_prefill_checkpoint_alignment=None,
            # Off, under the name this release reads (spec/releases.py).
            **{"mamba_shared_prefix_checkpoint" if MAMBA_CHECKPOINT_IS_THE_SHARED_PREFIX_ONE in self.rules
               else "mamba_fine_grained_prefix_cache": False},
            max_num_scheduled_tokens=self.token_budget,
            scheduler_config=StandIn("SchedulerConfig", long_prefill_token_threshold=0),
        )

    def chunk_for(self, request, num_new_tokens: int, hit: int = 0) -> int:
        """How many of ``num_new_tokens`` the scheduler schedules: its own rules, called on
        the view above (Scheduler._mamba_block_aligned_split, Scheduler._reserve_prefill_lookahead)."""
        if self._split_view is not None:
            split = resolve(S.SCHEDULER_MAMBA_SPLIT)
            num_new_tokens = split(self._split_view, request, num_new_tokens, hit)
        view = self._split_view or StandIn("Scheduler", num_prefill_lookahead=self.num_prefill_lookahead)
        reserve = resolve(S.SCHEDULER_PREFILL_LOOKAHEAD)
        return reserve(view, request, request.num_computed_tokens + hit, num_new_tokens)

    # ------------------------------------------------------------------ requests
    def _new_request(self, request_id: str, prompt: list[int]):
        return self._Request(
            request_id=request_id,
            prompt_token_ids=list(prompt),
            sampling_params=self._SamplingParams(max_tokens=MAX_OUTPUT_TOKENS),
            pooling_params=None,
            block_hasher=self._block_hasher,
        )

    def add_request(self, request_id: str, prompt: list[int]) -> Scheduled:
        scheduled = self.requests[request_id] = Scheduled(self._new_request(request_id, prompt))
        return scheduled

    def schedule(self, request_id: str, budget: int, next_token: int = 0, *, chunk: int | None = None) -> Step | None:
        """One scheduler step for one request with ``budget`` tokens: admit it with its
        prefix-cache hit if it is waiting, else continue it. ``chunk`` forces the chunk
        length past the scheduler's rules (only to show what vLLM does with a schedule its
        scheduler never makes). None when the step schedules nothing (the chunk rules leave
        no token, or the pool cannot hold the chunk: the request keeps what it held)."""
        s = self.requests[request_id]
        request, admitting = s.request, not s.running
        self.manager.new_step_starts()
        hit, blocks, claimed = 0, None, ((),)
        if admitting:
            blocks, hit, request.shared_prefix_boundary = self.manager.get_computed_blocks(request)
            claimed = blocks.get_block_ids()
        remaining = request.num_tokens - request.num_computed_tokens - hit
        new_tokens = chunk if chunk is not None else self.chunk_for(request, min(budget, remaining), hit)
        if new_tokens <= 0:
            return None
        allocated = self.manager.allocate_slots(
            request,
            new_tokens,
            num_new_computed_tokens=hit,
            new_computed_blocks=blocks,
            num_lookahead_tokens=self.num_lookahead_tokens,
        )
        if allocated is None:
            return None
        copies, retained = self.manager.take_kv_cache_block_copies()
        if self.recorder is not None and copies:
            # The manager raised one endpoint's count itself, outside the pool: the one the
            # request's table keeps (SingleTypeKVCacheManager._apply_cow, and
            # MambaManager.allocate_new_blocks for a producer's partial tail).
            kept = {b for table in self.manager.get_block_ids(request_id) for b in table}
            self.recorder.operations.append(
                ("retain", [b for c in copies for b in (c.src_block_id, c.dst_block_id) if b in kept])
            )
        # Released once the copies are queued (Scheduler._free_cow_retained_blocks, sync).
        self.manager.block_pool.free_blocks(retained)
        start = request.num_computed_tokens + hit
        request.num_computed_tokens = start + new_tokens
        if admitting:
            s.running, s.hit_length = True, hit
            request.status = self._Status.RUNNING
        sampled = None
        if request.num_computed_tokens >= request.num_tokens:
            sampled = next_token
            request.append_output_token_ids(next_token)
            # vllm.v1.core.sched.scheduler:Scheduler.update_from_output publishes the
            # finalized blocks again with Mamba or speculative decoding.
            if self.has_mamba or self.num_lookahead_tokens:
                self.manager.cache_blocks(request, request.num_computed_tokens)
        return Step(
            request_id,
            hit if admitting else None,
            claimed,
            start,
            start + new_tokens,
            self.manager.get_block_ids(request_id),
            tuple((c.src_block_id, c.dst_block_id) for c in copies),
            sampled,
        )

    def preempt(self, request_id: str) -> None:
        """Free a running request's blocks and send it back to waiting, computed tokens
        forgotten (Scheduler._preempt_request)."""
        s = self.requests[request_id]
        self.manager.free(s.request)
        s.request.num_computed_tokens = 0
        s.request.status = self._Status.PREEMPTED
        s.running = False

    def finish(self, request_id: str) -> None:
        self.manager.free(self.requests.pop(request_id).request)

    # ------------------------------------------------------------------ observations
    def lookup(self, prompt: list[int]) -> tuple[int, tuple[list[int], ...]]:
        """The hit a new request with this prompt would get now, without admitting it, and
        the block ids it claims per group."""
        blocks, hit, _boundary = self.manager.get_computed_blocks(self._new_request("kvspec-probe", prompt))
        return hit, blocks.get_block_ids()

    def block_hashes(self, prompt: list[int]) -> list:
        """The chained block hashes a request with this prompt carries (hash-unit granularity)."""
        return list(self._new_request("kvspec-probe", prompt).block_hashes)

    def cache_key(self, block_hash, group_id: int) -> bytes:
        return bytes(self._key(block_hash, group_id))

    def block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's block table per group; 0 is the null block (skipped positions)."""
        return self.manager.get_block_ids(request_id)

    def reset_prefix_cache(self) -> bool:
        return self.manager.reset_prefix_cache()

    def free_block_ids(self) -> list[int]:
        return [b.block_id for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]

    def ref_counts(self) -> dict[int, int]:
        return {b.block_id: b.ref_cnt for b in self.manager.block_pool.blocks if not b.is_null}

    def keys_on(self, block_id: int) -> set[bytes]:
        """Every key one block carries: its primary hash and its secondary (partial) entries."""
        pool = self.manager.block_pool
        block = pool.blocks[block_id]
        if block.block_hash is None:
            return set()
        return {bytes(k) for k in (block.block_hash, *pool.cached_block_hashes_by_block.get(block_id, ()))}

    def cache_map(self) -> dict[bytes, tuple[set[int], int]]:
        """Every cached key: the blocks carrying it, and the block a lookup is served by
        (BlockPool.cached_block_hashes_by_block holds a block's keys besides its primary)."""
        pool = self.manager.block_pool
        holders: dict[bytes, set[int]] = {}
        for block in pool.blocks:
            if block.block_hash is None:
                continue
            for key in {block.block_hash, *pool.cached_block_hashes_by_block.get(block.block_id, ())}:
                holders.setdefault(bytes(key), set()).add(block.block_id)
        cache_map = pool.cached_block_hash_to_block
        # BlockHashWithGroupId is bytes (a NewType), so a key is looked up as it is.
        return {key: (ids, cache_map.get_one_block(key).block_id) for key, ids in holders.items()}
