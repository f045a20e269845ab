"""What the stateful check asserts after each of its steps (kvspec/stateful/machine.py): the
judges of one run, over one real ``KVCacheManager`` and one configuration. Each failure raises
``Violated`` with the invariant it breaks (kvspec/oracles/invariants.py), which review and fuzz
file it under.
"""

from __future__ import annotations

from collections import Counter

from kvspec.divergences.known import DRAFTER_KIND, drafter_where, served_copy_where, short_hit_where
from kvspec.divergences.known import load as load_known
from kvspec.emit.lookup_test import regression_test
from kvspec.oracles.invariants import (
    NEW_DIVERGENCE,
    STATEFUL_BLOCKS,
    STATEFUL_CAP,
    STATEFUL_DRAFTER,
    STATEFUL_REFERENCE,
    STATEFUL_SAFE,
    STATEFUL_WRITES,
    Violated,
    fail,
)
from kvspec.reference.cache_model import CacheModel, replay
from kvspec.reference.lookup import coordinator_lookup
from kvspec.spec.hits import drafter_unproven_reason, max_safe_hit, target_unsafe_reason
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, Kind
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import CacheState, Hit
from kvspec.stateful.config import MachineConfig
from kvspec.stateful.shadow import NULL_BLOCK, Shadow
from kvspec.stateful.writes import WriteJudge

DRAFTER_KNOWN = "drafter-unproven hits and reads, known"
# Computing the longest safe hit tries every aligned length: skip it past this many.
MAX_SAFE_HIT_CANDIDATES = 256


class MachineJudge:
    def __init__(self, config: MachineConfig, live, stats: Counter, findings: dict[str, str] | None = None,
                 strict_drafter: bool = False, known: dict | None = None):
        self.config, self.live, self.stats = config, live, stats
        self.findings = {} if findings is None else findings
        # Short and drafter-unproven hits fail unless recorded (the drafter's always when strict).
        self.known = load_known() if known is None else known
        if strict_drafter:
            self.known = {key: entry for key, entry in self.known.items() if key[0] != DRAFTER_KIND}
        self.drafter_where_of: dict[str, str] = {}  # request -> where its hit's drafter problem is filed
        self.setting = config.setting
        self.shadow = Shadow(config.groups, config.drafter_groups)
        self.reference = CacheModel(config.num_blocks)
        self.writes = WriteJudge(config, live, stats)

    # ------------------------------------------------------------------ the reference cache model
    def sync(self, freeing: bool = False) -> None:
        """Replay the pool operations vLLM performed since the last sync on the reference. A
        free never drops a cached key (spec/caching.py); ``freeing``: these operations freed a
        request, and nothing else."""
        evicted_before = self.reference.evicted_blocks
        operations = self.live.recorder.take()
        if dropped := _dropped_by_frees(operations, everything=freeing):
            fail(STATEFUL_WRITES, f"freeing dropped {len(dropped)} cached key(s) from blocks {dropped}: "
                                  f"a freed block keeps its keys until it is reused (spec/caching.py)")
        for operation in operations:
            if operation[0] == "allocate":
                self.writes.reallocated(operation[1])
        problems = replay(self.reference, operations)
        self.stats["evictions"] += self.reference.evicted_blocks - evicted_before
        if problems:
            fail(STATEFUL_BLOCKS, "pool differs from the reference: " + "; ".join(problems))

    def cache_state(self, block_hashes) -> CacheState:
        """The reference's cached ``(group, hash index)`` entries for one request's hashes."""
        cached = self.reference.copies
        entries = frozenset(
            (gid, index)
            for index, block_hash in enumerate(block_hashes)
            for gid in range(len(self.config.groups))
            if self.live.cache_key(block_hash, gid) in cached
        )
        return CacheState(len(block_hashes), entries)

    def expected_hit(self, request) -> tuple[Hit, CacheState, int]:
        """reference/lookup.py's hit for this request over the reference's cache, now."""
        state = self.cache_state(request.block_hashes)
        max_length = request.num_tokens - 1
        return coordinator_lookup(self.setting, state, max_length, self.live.rules), state, max_length

    # ------------------------------------------------------------------ hits
    def hit(self, who, sequence, hit, claimed, expected=None, max_length=None) -> None:
        """Judge a lookup's answer: within the cap and aligned, equal to the reference's over
        the reference cache, safe by spec/hits.py, and holding the prefix by the shadow. A
        failure carries a plain-vLLM test of the same lookup over the same cached entries."""
        if expected is None:
            expected = self.expected_hit(_Probe(sequence, self.live.block_hashes(sequence)))
        try:
            self._judge_hit(who, sequence, hit, claimed, expected, max_length)
        except Violated as failure:
            failure.args = (f"{failure}\n{self._vllm_test(hit, expected)}",)
            failure.judged_lookup = (hit, claimed, expected)  # for the replay of the whole run (gate/stateful.py)
            raise

    def wanted_hit(self, hit: int, expected) -> tuple[int, str] | None:
        """The hit a vLLM test of this lookup asserts, and why: the reference's where vLLM
        departs from it, else the longest safe hit; None when the cap is too long to search."""
        reference, state, cap = expected
        if hit != reference.length:
            return reference.length, "what vLLM's own algorithm, as the spec models it, returns"
        if cap // self.config.alignment <= MAX_SAFE_HIT_CANDIDATES:
            return max_safe_hit(self.setting, state, cap), "the longest hit that is safe"
        return None

    def _vllm_test(self, hit: int, expected) -> str:
        """The lookup at the coordinator, as a pytest importing only vLLM, asserting
        ``wanted_hit``."""
        _reference, state, cap = expected
        if (wanted := self.wanted_hit(hit, expected)) is None:
            return "(no lookup-level vLLM test: the cap is too long to search)"
        want, why = wanted
        if want == hit:
            return "(no lookup-level vLLM test: the hit length is right; the blocks served are not)"
        test = regression_test(self.setting, state, cap, want, f"{want} is {why}; kvspec saw {hit}",
                               path="core", partial_hash_hits=partial_hash_hits_enabled(self.setting),
                               name=f"stateful {self.config.shape}")
        return "as a vLLM test (the same lookup over the same cached entries):\n" + test

    def _judge_hit(self, who, sequence, hit, claimed, expected, max_length) -> None:
        reference, state, cap = expected
        if max_length is not None and cap != max_length:
            fail(STATEFUL_CAP, f"{who}: the lookup's cap {cap} is not M={max_length}")
        stats = self.stats
        stats["lookups"] += 1
        if hit:
            stats["hits"] += 1
            stats.update(f"hits with {k}" for k in {g.kind for g in self.config.groups})
            stats[f"hits, {self.config.eagle_label}"] += 1
            if hit % self.config.scheduler_block_size:
                stats["partial hits"] += 1
        if not (0 <= hit <= cap):
            fail(STATEFUL_CAP, f"{who}: hit {hit} exceeds M={cap}")
        if hit % self.config.alignment != 0:
            fail(STATEFUL_CAP, f"{who}: hit {hit} not a multiple of {self.config.alignment}")
        problems = self.shadow.claim_problems(sequence, hit, claimed)
        target = [p.detail for p in problems if p.invariant != STATEFUL_DRAFTER]
        if target:
            fail(STATEFUL_SAFE, f"{who}: unsafe hit {hit}: " + "; ".join(target))
        if reason := target_unsafe_reason(self.setting, state, hit, cap):
            fail(STATEFUL_SAFE, f"{who}: unsafe hit {hit} by spec/hits.py: {reason} (cached {_entries(state)}, M={cap})")
        if reason := drafter_unproven_reason(self.setting, state, hit):
            self.drafter_where_of[who] = drafter_where("core", self.setting)
            self._drafter_unproven(who, f"{who}: drafter-unproven hit {hit} by spec/hits.py: {reason} "
                                        f"(cached {_entries(state)}, M={cap})")
        elif len(target) < len(problems):
            self.drafter_where_of[who] = served_copy_where("core")
            self._drafter_unproven(who, f"{who}: drafter-unproven hit {hit}: {problems[0].detail}")
        if hit != reference.length:
            fail(STATEFUL_REFERENCE, f"{who}: vLLM's hit {hit} differs from the reference's {reference.length} "
                                     f"over the reference cache {_entries(state)}, M={cap}")
        real = tuple(tuple(b != NULL_BLOCK for b in table) for table in claimed)
        if real != reference.real_blocks:
            stats["hits whose blocks differ from the reference"] += 1
        if cap // self.config.alignment <= MAX_SAFE_HIT_CANDIDATES:
            distance = max_safe_hit(self.setting, state, cap) - hit
            # Past it only when drafter-unproven (judged above): the longest safe hit demands both tiers.
            stats["hits at the longest safe hit" if distance == 0 else "hits below the longest safe hit"
                  if distance > 0 else "hits past the longest safe hit, drafter-unproven"] += 1
            stats["tokens below the longest safe hit"] += max(distance, 0)
            if distance > 0:  # a short hit: explained only by a recorded divergence of the core's lookup
                where = short_hit_where("core", self.setting)
                known = self.known.get(("short-hit", where))
                if not known:
                    fail(NEW_DIVERGENCE, f"{who}: hit {hit}, {distance} below the longest safe hit over "
                                         f"{_entries(state)}, M={cap}; NEW divergence: short-hit at {where!r}")
                self.findings.setdefault(known.id, f"{who}: hit {hit}, longest safe {hit + distance}")

    def _drafter_unproven(self, who: str, message: str) -> None:
        """A drafter-only problem (the target's KV right): counted when its situation is a
        known divergence (kvspec/divergences/known.py), else it fails the check."""
        where = self.drafter_where_of.get(who, served_copy_where("core"))
        known = self.known.get((DRAFTER_KIND, where))
        if not known:
            fail(STATEFUL_DRAFTER, f"{message}; NEW divergence: {DRAFTER_KIND} at {where!r} ({self.config.shape}, {self.config.eagle_label})")
        self.stats[DRAFTER_KNOWN] += 1
        self.findings.setdefault(known.id, message)

    # ------------------------------------------------------------------ the worker
    def compute(self, step, sequence) -> None:
        """Run one scheduled step on the shadow: the copies, then the chunk's reads, then its
        writes, each written block owned by this request alone."""
        for source, destination in step.copies:
            self.shadow.copy(source, destination)
        problems = self.shadow.read_problems(sequence, step.start, step.tables)
        if drafter := [p.detail for p in problems if p.invariant == STATEFUL_DRAFTER]:
            self._drafter_unproven(step.request_id, f"{step.request_id}: drafter-unproven read at {step.start}: {drafter[0]}")
        if target := [p.detail for p in problems if p.invariant != STATEFUL_DRAFTER]:
            fail(STATEFUL_SAFE, f"{step.request_id}: unsafe hit or read at {step.start}: " + "; ".join(target))
        problems = self.shadow.compute(sequence, step.start, step.end, step.tables)
        if problems:
            fail(STATEFUL_SAFE, f"{step.request_id}: computing [{step.start}, {step.end}): " + "; ".join(problems))
        ref_counts = self.live.ref_counts()
        for gid, (group, table) in enumerate(zip(self.config.groups, step.tables)):
            bs = group.block_size
            if group.kind in NOT_PREFIX_CACHEABLE_KINDS:  # the ring block every step rewrites
                columns = range(len(table))
            elif group.kind == Kind.MAMBA:
                columns = [(step.end - 1) // bs]
            else:
                columns = range(step.start // bs, (step.end - 1) // bs + 1)
            shared = {table[c]: ref_counts[table[c]] for c in columns if ref_counts[table[c]] != 1}
            if shared:
                fail(STATEFUL_SAFE, f"{step.request_id}: group {gid} writes blocks shared with others (ref counts {shared})")
        mamba_block_size = self.config.mamba_block_size()
        if mamba_block_size and step.end % mamba_block_size:
            self.stats["chunks ending inside a Mamba block"] += 1
        self.writes.judge(step)

    # ------------------------------------------------------------------ accounting
    def accounting(self, running) -> None:
        live, reference = self.live, self.reference
        ref_counts = live.ref_counts()
        holders = Counter(b for r in running for table in live.block_ids(r) for b in table if b != NULL_BLOCK)
        wrong = {b: (ref_counts[b], n) for b, n in holders.items() if ref_counts[b] != n}
        if wrong:
            fail(STATEFUL_BLOCKS, f"ref counts differ from block-table references: {wrong}")
        free = live.free_block_ids()
        if len(free) != len(set(free)):
            fail(STATEFUL_BLOCKS, "a block is twice in the free queue")
        if set(free) & set(holders):
            fail(STATEFUL_BLOCKS, f"blocks both free and in use: {set(free) & set(holders)}")
        if len(free) + len(holders) != self.config.num_blocks - 1:
            fail(STATEFUL_BLOCKS, "blocks lost or invented")
        if ref_counts != reference.ref_counts:
            differ = {b: (n, reference.ref_counts[b]) for b, n in ref_counts.items() if reference.ref_counts[b] != n}
            fail(STATEFUL_BLOCKS, f"ref counts differ from the reference: {differ}")
        if free != reference.free_queue:
            fail(STATEFUL_BLOCKS, f"free queue {free} differs from the reference {reference.free_queue}")
        vllm_map = live.cache_map()
        # How deep the cache gets: the write side needs deep states (issue 14's operation mix).
        self.stats["cached keys, summed over steps"] += len(vllm_map)
        self.stats["cached keys, most at once"] = max(self.stats["cached keys, most at once"], len(vllm_map))
        model_map = {key: (set(blocks), blocks[0]) for key, blocks in reference.copies.items()}
        if vllm_map != model_map:
            fail(STATEFUL_BLOCKS, "cache map differs from the reference: " + _map_difference(vllm_map, model_map))


def _dropped_by_frees(operations, everything: bool) -> list[int]:
    """Blocks whose keys a free removed: removals made inside a ``free_blocks`` call
    (impl/live.py:PoolRecorder), or any removal when ``everything`` was a free. A removal
    merely recorded after a free is no drop: the scheduler releases a step's copy-on-write
    retentions (vllm/v1/core/sched/scheduler.py:_free_cow_retained_blocks, 0.34.0:3235) just
    before update_from_output's cache_blocks (0.34.0:2468) promotes a partial entry to a full
    block, removing its keys before it inserts them again (block_pool.py:cache_full_blocks,
    0.34.0:262-275); the write judge and the reference pool judge that re-publication."""
    return sorted({operation[2] for operation in operations
                   if operation[0] == "uncache" and (everything or operation[3])})


class _Probe:
    """What expected_hit reads of a request, for a probe lookup."""

    def __init__(self, sequence, block_hashes):
        self.block_hashes, self.num_tokens = block_hashes, len(sequence)


def _entries(state: CacheState) -> str:
    """The cached (group, hash index) entries, per group as index ranges."""
    per_group: dict[int, list[int]] = {}
    for gid, index in sorted(state.cached):
        per_group.setdefault(gid, []).append(index)
    return "; ".join(f"group {gid}: {_ranges(indices)}" for gid, indices in per_group.items()) or "nothing"


def _ranges(indices: list[int]) -> str:
    spans, start = [], None
    for i, index in enumerate(indices):
        if start is None:
            start = index
        if i + 1 == len(indices) or indices[i + 1] != index + 1:
            spans.append(str(start) if start == index else f"{start}-{index}")
            start = None
    return ",".join(spans)


def _map_difference(vllm_map, model_map) -> str:
    lines = []
    for key in sorted(set(vllm_map) | set(model_map)):
        if vllm_map.get(key) != model_map.get(key):
            lines.append(f"key {key.hex()[:12]}: vLLM {vllm_map.get(key)}, reference {model_map.get(key)}")
    return "; ".join(lines[:4])
