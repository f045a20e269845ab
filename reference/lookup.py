"""An operational model of vLLM's prefix-cache lookup: what the coordinators compute, step by
step, over a set of cached ``(group_id, hash_index)`` entries (see spec/setting.py for the encoding,
spec/resolution.py for the sizes and spec/hits.py for which answers are safe).

Each finder answers for one "spec group" (groups with equal specs, looked up jointly: an entry
counts only if every member has it) and returns the hit length and, per block of that hit,
whether a real block is reused (False = a null placeholder the group does not read).

Rules for the kinds beyond the classic five:
* R-SWA, sink full attention and the hidden-state cache find hits as full attention and count as
  full attention in the loop (their specs subclass FullAttentionSpec, which the coordinators test
  with isinstance; their managers inherit FullAttentionManager.find_longest_cache_hit). Their
  specs differ from full attention's (another class), so they are never merged with it.
* A group outside prefix caching (circular buffer, HiSparse hot and resident) is skipped by the
  coordinators and keeps an empty block list; alone, its manager answers 0
  (CircularBufferManager.find_longest_cache_hit).
* HiSparse's host source finds hits as full attention, but its manager class differs from its
  spec's (HiSparseSourceManager, by role), so the core never merges it with an equal spec; and
  it keeps its own longer hit, untrimmed at the reconciled one (retains_longer_hit). The
  Mooncake store gives it its spec's manager: there it is plain MLA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvspec.spec.dcp import DcpSetting
from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.layers import HITS_LIKE_FULL_KINDS, NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind
from kvspec.spec.releases import EAGLE_PEEKS_PAST_THE_CAP, MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE, NEWEST_RULES
from kvspec.spec.resolution import (
    FINE_GRAINED_KINDS,
    cache_hit_alignment,
    eagle_proof_margin,
    mamba_partial_hits_possible,
    partial_hash_hits_enabled,
    scheduler_block_size,
)
from kvspec.spec.setting import CacheState, Hit, LookupSetting


@dataclass(frozen=True)
class SpecGroup:
    """Groups with one spec, looked up together; ``drops`` is the OR of the members' EAGLE drop
    (vllm.v1.core.kv_cache_coordinator:SpecGroup)."""

    spec: CacheGroup  # the members' shared spec (is_eagle_group ignored)
    group_ids: tuple[int, ...]
    drops: bool


class Lookup:
    """One lookup's fixed inputs: the cache, the hash unit, the shared alignment."""

    def __init__(self, setting: LookupSetting, state, alignment: int):
        self.unit, self.alignment = setting.hash_block_size, alignment
        self.num_hashes, self.cached = state.num_hashes, state.cached

    def has(self, group_ids, hash_index: int) -> bool:
        return all((g, hash_index) in self.cached for g in group_ids)

    # ------------------------------------------------------------------ finders
    def find_full(self, sg: SpecGroup, max_length: int, drop: bool) -> tuple[int, list[bool]]:
        """Leading run of whole blocks, then (fine-grained) the deepest entry inside the next
        block; EAGLE drops one alignment unit, at most a block
        (single_type_kv_cache_manager:FullAttentionManager.find_longest_cache_hit)."""
        bs, align = sg.spec.block_size, self.alignment
        fine = align < bs and bs % align == 0
        # Fine-grained lookups view the raw hashes in alignment units; only sound when the
        # alignment IS the hash unit, which is how vLLM enables it.
        assert not fine or align == self.unit
        per_block = bs // self.unit
        blocks = 0
        while blocks < min(max_length // bs, self.num_hashes // per_block) and self.has(
            sg.group_ids, (blocks + 1) * per_block - 1
        ):
            blocks += 1
        hit = blocks * bs
        if fine:
            first = blocks * per_block
            last = min(first + per_block - 1, max_length // align, self.num_hashes)
            for j in range(last - 1, first - 1, -1):
                if self.has(sg.group_ids, j):
                    hit = (j + 1) * align
                    break
        if drop and hit > 0:
            hit -= min(align, bs)
        hit -= hit % align
        return hit, [True] * -(-hit // bs)

    def find_sliding_window(self, sg: SpecGroup, max_length: int, drop: bool) -> tuple[int, list[bool]]:
        """The rightmost run of window blocks whose end keeps the hit aligned; EAGLE wants one
        more block in the run and pops it; with no full run, the run from block 0 counts
        (single_type_kv_cache_manager:SlidingWindowManager.find_longest_cache_hit)."""
        bs, align, window = sg.spec.block_size, self.alignment, sg.spec.window
        per_block = bs // self.unit
        need = -(-(window - 1) // bs) + (1 if drop else 0)
        cached = [self.has(sg.group_ids, (i + 1) * per_block - 1) for i in range(max_length // bs)]
        run, run_start, length = 0, 0, None
        for i in reversed(range(len(cached))):
            if not cached[i]:
                run = 0
                continue
            # A run may only end where the hit (after the EAGLE pop) stays aligned.
            run_end = i if drop else i + 1
            if run == 0 and bs != align and (run_end * bs) % align:
                continue
            run += 1
            if run >= need:
                run_start, length = i, i + run
                break
        if length is None:
            length = run  # the run that starts at block 0: a prompt shorter than the window
            while bs != align and (length * bs) % align:
                length -= 1
        if drop and length:
            length -= 1
            while bs != align and (length * bs) % align:
                length -= 1
        real = [False] * min(run_start, length) + [True] * max(0, length - run_start)
        return length * bs, real

    def find_chunked_local(self, sg: SpecGroup, max_length: int, drop: bool) -> tuple[int, list[bool]]:
        """Blocks before the current chunk count as computed (null); from the chunk start, the
        leading run of cached blocks (single_type_kv_cache_manager:ChunkedLocalAttentionManager)."""
        assert not drop and sg.spec.block_size == self.alignment, "vLLM asserts both"
        bs, chunk = sg.spec.block_size, sg.spec.chunk
        per_block = bs // self.unit
        first = (max_length // chunk * chunk if max_length > 0 else 0) // bs
        blocks = first
        while blocks < max_length // bs and self.has(sg.group_ids, (blocks + 1) * per_block - 1):
            blocks += 1
        return blocks * bs, [False] * first + [True] * (blocks - first)

    def find_mamba(self, sg: SpecGroup, max_length: int, drop: bool) -> tuple[int, list[bool]]:
        """The rightmost cached state not past ``max_length`` (any hash unit when fine-grained,
        else block ends that keep the hit aligned); the EAGLE drop is ignored
        (single_type_kv_cache_manager:MambaManager.find_longest_cache_hit)."""
        bs, align = sg.spec.block_size, self.alignment
        per_block = bs // self.unit
        if align < bs and bs % align == 0:
            assert align == self.unit
            for j in reversed(range(min(max_length // align, self.num_hashes))):
                if self.has(sg.group_ids, j):
                    return (j + 1) * align, [False] * (j // per_block) + [True]
            return 0, []
        for i in reversed(range(max_length // bs)):
            if self.has(sg.group_ids, (i + 1) * per_block - 1) and ((i + 1) * bs) % align == 0:
                return (i + 1) * bs, [False] * i + [True]
        return 0, []

    def find(self, sg: SpecGroup, max_length: int, drop: bool) -> tuple[int, list[bool]]:
        kind = sg.spec.kind
        if kind in NOT_PREFIX_CACHEABLE_KINDS:
            return 0, []
        if kind in HITS_LIKE_FULL_KINDS:
            return self.find_full(sg, max_length, drop)
        finder = {
            Kind.SLIDING_WINDOW: self.find_sliding_window,
            Kind.CHUNKED_LOCAL: self.find_chunked_local,
            Kind.MAMBA: self.find_mamba,
        }[kind]
        return finder(sg, max_length, drop)


def spec_groups(setting: LookupSetting, drops: frozenset[int], *, by_role: bool = True) -> list[SpecGroup]:
    """Equal specs with one manager class merged (drop OR-ed), full attention first, others in
    group order; groups outside prefix caching left out
    (kv_cache_coordinator:HybridKVCacheCoordinator.verify_and_split_kv_cache_groups).
    ``by_role``: the group's role picks its manager (the core), else its spec alone (the
    Mooncake store)."""
    merged: dict[CacheGroup, SpecGroup] = {}
    for gid, group in enumerate(setting.groups):
        if group.kind in NOT_PREFIX_CACHEABLE_KINDS:
            continue
        spec = CacheGroup(group.kind, group.block_size, group.window, group.chunk,
                          rswa_window=group.rswa_window, sink_len=group.sink_len,
                          hisparse_source=by_role and group.hisparse_source)
        old = merged.get(spec)
        ids = (old.group_ids if old else ()) + (gid,)
        merged[spec] = SpecGroup(spec, ids, (old is not None and old.drops) or gid in drops)
    return sorted(merged.values(), key=lambda sg: sg.spec.kind not in HITS_LIKE_FULL_KINDS)


def _masks(setting: LookupSetting, per_group: dict[int, list[bool]]) -> tuple[tuple[bool, ...], ...]:
    return tuple(tuple(per_group.get(gid, [])) for gid in range(len(setting.groups)))


def reconcile(setting: LookupSetting, state, max_length: int, groups: list[SpecGroup], **options) -> Hit:
    """The reconciled hit (see reconcile_with_longest)."""
    return reconcile_with_longest(setting, state, max_length, groups, **options)[0]


def reconcile_with_longest(
    setting: LookupSetting,
    state,
    max_length: int,
    groups: list[SpecGroup],
    *,
    alignment: int | None = None,
    partial: bool | None = None,
    peek_past_the_cap: bool = True,
) -> tuple[Hit, int]:
    """The fixed-point loop: each spec group in turn may only shorten the candidate; full
    attention is looked up once (its hits are downward-closed); an EAGLE group looks one margin
    past the candidate (never a Mamba group, #43559) and drops, once per candidate: the
    verification is forgotten only when a non-dropping group shortens the candidate; with one
    full-attention group plus one other, a single pass
    (kv_cache_coordinator:HybridKVCacheCoordinator.find_longest_cache_hit).

    Also returns the longest hit any single lookup of the loop found (after its own drop):
    that minus the reconciled hit is the coordinator's ``num_uncached_common_prefix_tokens``.
    ``alignment`` and ``partial`` default to spec/resolution.py's for ``setting`` (DCP passes
    those of the DcpSetting). The EAGLE group's look past the candidate reaches the hashed
    length, or only the cap ``max_length`` on a release without
    spec/releases.py:EAGLE_PEEKS_PAST_THE_CAP (``peek_past_the_cap``)."""
    lookup = Lookup(setting, state, cache_hit_alignment(setting) if alignment is None else alignment)
    partial = partial_hash_hits_enabled(setting) if partial is None else partial
    max_tokens = state.num_hashes * setting.hash_block_size if peek_past_the_cap else max_length
    simple = len(groups) == 2 and groups[0].spec.kind in HITS_LIKE_FULL_KINDS
    found: dict[int, tuple[int, list[bool]]] = {}
    verified: set[int] = set()
    hit, longest = max_length, 0
    while True:
        candidate = hit
        for idx, sg in enumerate(groups):
            if sg.spec.kind in HITS_LIKE_FULL_KINDS and idx in found:
                candidate = min(candidate, found[idx][0])
                continue
            drop = sg.drops and idx not in verified
            reach = candidate
            if drop and sg.spec.kind != Kind.MAMBA:
                fine = partial and sg.spec.kind in FINE_GRAINED_KINDS
                margin = eagle_proof_margin(sg.spec.block_size, setting.hash_block_size, fine)
                reach = min(candidate + margin, max_tokens)
            found[idx] = lookup.find(sg, reach, drop)
            new = found[idx][0]
            if drop:
                verified.add(idx)
            elif new < candidate:
                verified.clear()
            candidate = new
            longest = max(longest, new)
        if candidate >= hit:
            break
        hit = candidate
        if simple:
            break
    per_group = {}
    for idx, sg in enumerate(groups):
        blocks = found[idx][1]
        if sg.spec.kind in HITS_LIKE_FULL_KINDS and not sg.spec.hisparse_source:  # trimmed to the reconciled hit
            blocks = blocks[: -(-hit // sg.spec.block_size)]
        per_group.update({gid: blocks for gid in sg.group_ids})
    return Hit(hit, _masks(setting, per_group)), longest


def coordinator_lookup(setting: LookupSetting, state, max_length: int, rules=NEWEST_RULES) -> Hit:
    """The engine core's lookup (see coordinator_answer)."""
    return coordinator_answer(setting, state, max_length, rules)[0]


def coordinator_answer(setting: LookupSetting | DcpSetting, state, max_length: int,
                       rules=NEWEST_RULES) -> tuple[Hit, int]:
    """The engine core's lookup and its uncached common prefix: one group goes straight to its
    finder at its own block size, with the drop but no peek margin, and reports no uncached
    prefix (kv_cache_coordinator:UnitaryKVCacheCoordinator); more groups reconcile
    (HybridKVCacheCoordinator). Under DCP (a DcpSetting) every lookup runs at the sharded
    block sizes, on DCP's alignment (spec/dcp.py). ``rules``: the target release's
    (spec/releases.py)."""
    # Asked of the setting as given: under DCP the resolution rules differ from its view's.
    alignment, partial = cache_hit_alignment(setting), partial_hash_hits_enabled(setting)
    if isinstance(setting, DcpSetting):
        setting = setting.view()
    drops = drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE)
    groups = spec_groups(setting, drops)
    if len(setting.groups) == 1:
        assert setting.hash_block_size == setting.groups[0].block_size, "vLLM asserts it"
        if not groups:  # alone outside prefix caching: its manager answers 0
            return Hit(0, ((),)), 0
        lookup = Lookup(setting, state, setting.groups[0].block_size)
        hit, blocks = lookup.find(groups[0], max_length, groups[0].drops)
        return Hit(hit, (tuple(blocks),)), 0
    hit, longest = reconcile_with_longest(setting, state, max_length, groups, alignment=alignment, partial=partial,
                                          peek_past_the_cap=EAGLE_PEEKS_PAST_THE_CAP in rules)
    return hit, longest - hit.length


def mooncake_lookup(setting: LookupSetting, state, max_length: int, rules=NEWEST_RULES) -> Hit:
    """The Mooncake store connector's lookup, the core's loop with three differences: a group's
    annotation drops whatever ``use_eagle`` says; the flag-all fallback is taken over merged
    spec groups; and one spec group (even of several equal groups) gets no peek margin
    (mooncake/store/coordinator:MooncakeStoreCoordinator._find_hit_blocks). On a release
    without spec/releases.py:MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE the store decides partial
    hits itself, from the Mamba groups alone (its own partial_hash_hits_enabled)."""
    annotated = frozenset(gid for gid, g in enumerate(setting.groups) if g.is_eagle_group)
    groups = spec_groups(setting, annotated, by_role=False)
    if setting.use_eagle and not any(sg.drops for sg in groups):
        groups = [SpecGroup(sg.spec, sg.group_ids, True) for sg in groups]
    partial = (partial_hash_hits_enabled(setting) if MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE in rules
               else mamba_partial_hits_possible(setting))
    alignment = setting.hash_block_size if partial else scheduler_block_size(setting)
    if len(groups) == 1:
        lookup = Lookup(setting, state, alignment)
        hit, blocks = lookup.find(groups[0], max_length, groups[0].drops)
        return Hit(hit, _masks(setting, {gid: blocks for gid in groups[0].group_ids}))
    return reconcile(setting, state, max_length, groups, alignment=alignment, partial=partial,
                     peek_past_the_cap=EAGLE_PEEKS_PAST_THE_CAP in rules)


def mooncake_load_mask(setting: LookupSetting, num_hashes: int, token_len: int,
                       rules=NEWEST_RULES) -> tuple[tuple[bool, ...], ...]:
    """The blocks the Mooncake store connector's receive side loads for a hit of ``token_len``:
    the store's lookup over a store holding everything, with no EAGLE drop (the hit already
    took it) (mooncake/store/coordinator:MooncakeStoreCoordinator.load_mask)."""
    plain = LookupSetting(
        tuple(replace(g, is_eagle_group=False) for g in setting.groups), setting.hash_block_size,
        use_eagle=False, allow_partial_hash_hits=setting.allow_partial_hash_hits,
    )  # fmt: skip
    everything = CacheState.full_prefix(len(setting.groups), num_hashes)
    return mooncake_lookup(plain, everything, token_len, rules).real_blocks
