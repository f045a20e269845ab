"""The draws of prefix-cache lookups: groups, cache states and caps, and the fixed cases run first.

Preconditions vLLM asserts are not findings; the checks filter draws that break them
(kvspec/gate/lookups.py). Two restrictions are ours, not vLLM's, and are documented where they
are drawn: annotations only with EAGLE on (vLLM annotates groups only when the drop is in
effect, and only on prefix-cacheable groups), and chunk sizes that are multiples of the block size."""

from __future__ import annotations

import math
from functools import cache, reduce

from hypothesis import strategies as st

from kvspec.reference.lookup import spec_groups
from kvspec.spec.dcp import DcpSetting, sharded_block_size
from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind
from kvspec.spec.resolution import cache_hit_alignment, scheduler_block_size
from kvspec.spec.setting import CacheState, LookupSetting

KINDS = (Kind.FULL, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL, Kind.MAMBA)
# Issue 15's kinds that reach the core and Mooncake lookups: R-SWA and hidden-state groups hit
# like full attention; a circular buffer is skipped (spec/hits.py). HiSparse's hot and resident
# groups come only in its layout (hisparse_settings). Cross and encoder-only attention never reach
# these coordinators (spec/hits.py:lookup_preconditions_hold); nor does sink attention on 0.30-0.34:
# no coordinator can build its manager (spec/releases.py:SINK_MANAGER_REFUSES_THE_ZEROING_FLAG,
# tests/test_lookup_kinds.py).
NEW_KINDS = (Kind.RSWA, Kind.HIDDEN_STATE, Kind.CIRCULAR_BUFFER)
HISPARSE_KINDS = (Kind.HISPARSE_RESIDENT, Kind.HISPARSE_HOT)
MAX_HASHES = 16


# The kinds a group is drawn from: the classic mix, which the offloading, store and connector
# draws build on; the lookups check adds issue 15's kinds, one draw in four.
CLASSIC_MIX = KINDS + (Kind.FULL, Kind.MAMBA)
LOOKUP_MIX = CLASSIC_MIX * 2 + NEW_KINDS


# Hypothesis builds and validates a strategy each time one is made, which cost more than the
# draws themselves here: every strategy whose arguments repeat is made once (same choices, so
# the same examples at every seed).
sampled = cache(st.sampled_from)
BLOCK_MULTIPLES = st.sampled_from([1, 2, 4, 1, 2, 3])
BASES = st.sampled_from([1, 2, 4, 8, 16])


@cache
def hash_unit_choices(gcd: int):
    return st.sampled_from([d for d in (gcd, gcd // 2, gcd // 4) if d and gcd % d == 0])


@cache
def just_or_integers(value: int, low: int, high: int):
    return st.just(value) | st.integers(low, high)


@cache
def integers_or_integers(low: int, high: int, other_low: int):
    return st.integers(low, high) | st.integers(other_low, high)


@cache
def near_or_under(top: int, alignment: int):
    """A cap within ``alignment`` below ``top``, or any up to it."""
    return st.integers(0, alignment).map(lambda d: max(0, top - d)) | st.integers(0, top)


@cache
def unit_sets(num_hashes: int, max_size: int):
    return st.sets(st.integers(0, max(0, num_hashes - 1)), max_size=max_size)


@st.composite
def cache_groups(draw, base: int, use_eagle: bool, kinds: tuple[Kind, ...] = CLASSIC_MIX) -> CacheGroup:
    kind = draw(sampled(kinds))
    block_size = base * draw(BLOCK_MULTIPLES)
    window = draw(st.integers(1, 3 * block_size + 2)) if kind == Kind.SLIDING_WINDOW else None
    # Ours: real chunk sizes (8192) are block multiples; vLLM does not check it.
    chunk = block_size * draw(st.integers(1, 4)) if kind == Kind.CHUNKED_LOCAL else None
    rswa_window = draw(st.integers(1, 4 * block_size)) if kind == Kind.RSWA else None
    # SinkFullAttentionManager asserts a positive whole number of blocks of sinks.
    sink_len = block_size * draw(st.integers(1, 2)) if kind == Kind.SINK_FULL else None
    # Ours: vLLM sets is_eagle_group only when the EAGLE drop is in effect; and never on a group
    # outside prefix caching (a drafter's layers are attention it rereads from the cache).
    annotated = use_eagle and kind not in NOT_PREFIX_CACHEABLE_KINDS and draw(st.booleans())
    return CacheGroup(kind, block_size, window=window, chunk=chunk, is_eagle_group=annotated,
                      rswa_window=rswa_window, sink_len=sink_len)


@cache
def group_lists(base: int, use_eagle: bool, kinds: tuple[Kind, ...]):
    return st.lists(cache_groups(base, use_eagle, kinds), min_size=1, max_size=4)


@st.composite
def lookup_settings(draw, kinds: tuple[Kind, ...] = CLASSIC_MIX) -> LookupSetting:
    base = draw(BASES)
    use_eagle = draw(st.booleans())
    groups = tuple(draw(group_lists(base, use_eagle, kinds)))
    gcd = reduce(math.gcd, (g.block_size for g in groups))
    hash_bs = draw(hash_unit_choices(gcd))
    return LookupSetting(groups, hash_bs, use_eagle, allow_partial_hash_hits=draw(st.booleans()))


@st.composite
def hisparse_settings(draw) -> LookupSetting:
    """HiSparse's groups as its layout makes them (vllm.v1.hisparse.layout:_lay_out_hisparse_groups):
    the host source, the indexer, one or two resident and hot pairs at the source's block size,
    then up to two regular groups. The indexer's spec equals the source's here (ours: its real
    spec has other head sizes), so only their manager classes keep them apart."""
    base = draw(st.sampled_from([1, 2, 4, 8, 16]))
    block_size = base * draw(st.sampled_from([1, 2, 4]))
    use_eagle = draw(st.booleans())
    source = CacheGroup(Kind.MLA, block_size, is_eagle_group=use_eagle and draw(st.booleans()), hisparse_source=True)
    indexer = CacheGroup(Kind.MLA, block_size, is_eagle_group=use_eagle and draw(st.booleans()))
    pairs = draw(st.integers(1, 2))
    auxiliary = (CacheGroup(Kind.HISPARSE_RESIDENT, block_size),) * pairs + (CacheGroup(Kind.HISPARSE_HOT, block_size),) * pairs
    regular = tuple(draw(st.lists(cache_groups(base, use_eagle), max_size=2)))
    groups = (source, indexer, *auxiliary, *regular)
    gcd = reduce(math.gcd, (g.block_size for g in groups if g.kind not in NOT_PREFIX_CACHEABLE_KINDS))
    hash_bs = draw(st.sampled_from([d for d in (gcd, gcd // 2, gcd // 4) if d and gcd % d == 0]))
    return LookupSetting(groups, hash_bs, use_eagle, allow_partial_hash_hits=draw(st.booleans()))


@st.composite
def cache_states(draw, setting: LookupSetting) -> CacheState:
    """Mostly a shared dense prefix (what one earlier request leaves), then per group a
    different prefix length, evicted holes and stray later entries. Long enough for a few
    alignment units even when the lcm is many hash units."""
    units_per_lcm = scheduler_block_size(setting) // setting.hash_block_size
    # At least one lcm block most of the time, or no hit could reach the alignment.
    longest = max(MAX_HASHES, 3 * units_per_lcm)
    num_hashes = draw(integers_or_integers(min(units_per_lcm, longest), longest, 0))
    num_groups = len(setting.groups)
    shared = draw(just_or_integers(num_hashes, 0, num_hashes))
    cached = set()
    for gid in range(num_groups):
        prefix = draw(just_or_integers(shared, 0, num_hashes))
        entries = set(range(prefix))
        if num_hashes:
            entries -= draw(unit_sets(num_hashes, 2))
            entries |= draw(unit_sets(num_hashes, 3))
        group = setting.groups[gid]
        if group.kind in NOT_PREFIX_CACHEABLE_KINDS:  # vLLM never caches them (cache_blocks returns)
            entries = set()
        if group.kind in (Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL):  # vLLM keys only their whole blocks
            per_block = group.block_size // setting.hash_block_size
            entries = {j for j in entries if (j + 1) % per_block == 0}
        cached |= {(gid, j) for j in entries}
    return CacheState(num_hashes, frozenset(cached))


# with_hisparse: one draw in eight is a HiSparse layout. Three fair coins, not integers(1, 8) == 1:
# Hypothesis favours an integer range's bounds, which made it nearly one in three and crowded out
# the rarer kinds of the mix at the quick budget.
HISPARSE_COINS = 3


@st.composite
def lookups(draw, kinds: tuple[Kind, ...] = CLASSIC_MIX, with_hisparse: bool = False):
    hisparse = with_hisparse and all(draw(st.booleans()) for _ in range(HISPARSE_COINS))
    setting = draw(hisparse_settings() if hisparse else lookup_settings(kinds))
    state = draw(cache_states(setting))
    max_length = draw(near_or_under(state.num_hashes * setting.hash_block_size, cache_hit_alignment(setting)))
    return setting, state, max_length


# First among the load masks: EAGLE with no annotation (every group drops) over full attention
# and a one-token window, 2 blocks stored, hit 16: the receive side loads the window group's
# block 0; dropping a second time there leaves it out.
FIXED_LOAD_MASKS = (
    (
        LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.SLIDING_WINDOW, 16, window=1)), 16, use_eagle=True),
        CacheState.full_prefix(2, 2),
        32,
    ),
)


# HiSparse's layout with its host source holding 4 blocks and its (equal-spec) indexer 2: the hit
# is 32, and the core leaves the source its 4 blocks (the Mooncake store trims them to 2).
HISPARSE_LAYOUT = LookupSetting(
    (CacheGroup(Kind.MLA, 16, hisparse_source=True), CacheGroup(Kind.MLA, 16),
     CacheGroup(Kind.HISPARSE_RESIDENT, 16), CacheGroup(Kind.HISPARSE_HOT, 16)),
    16,
)  # fmt: skip
SOURCE_AHEAD_OF_INDEXER = CacheState(4, frozenset({(0, j) for j in range(4)} | {(1, 0), (1, 1)}))
HISPARSE_CASE = (HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64)

# Run first on both paths: situations the draws rarely reach, found by kvspec mutate's survivors.
FIXED_LOOKUPS = (
    HISPARSE_CASE,
    # R-SWA and hidden-state groups hit as full attention does: alone, and beside full attention
    # and a circular buffer (each kind of issue 15 reached with a hit on every budget).
    (LookupSetting((CacheGroup(Kind.RSWA, 16, rswa_window=24),), 16), CacheState.full_prefix(1, 4), 64),
    (LookupSetting((CacheGroup(Kind.RSWA, 16, rswa_window=8), CacheGroup(Kind.FULL, 16)), 16),
     CacheState.full_prefix(2, 3), 64),
    (LookupSetting((CacheGroup(Kind.HIDDEN_STATE, 16),), 16), CacheState.full_prefix(1, 4), 64),
    (LookupSetting((CacheGroup(Kind.HIDDEN_STATE, 16), CacheGroup(Kind.CIRCULAR_BUFFER, 16)), 16),
     CacheState(4, frozenset((0, j) for j in range(3))), 64),
    # A circular buffer alone: the unitary coordinator asks its manager, which answers 0.
    (LookupSetting((CacheGroup(Kind.CIRCULAR_BUFFER, 16),), 16), CacheState.full_prefix(1, 4), 64),
    # Beside full attention, a circular buffer is skipped: full attention's hit stands.
    (LookupSetting((CacheGroup(Kind.CIRCULAR_BUFFER, 16), CacheGroup(Kind.FULL, 16)), 16),
     CacheState(4, frozenset((1, j) for j in range(4))), 64),
    # A window group's pop after the EAGLE drop, then its re-alignment to the lcm (32).
    (
        LookupSetting((CacheGroup(Kind.FULL, 32), CacheGroup(Kind.SLIDING_WINDOW, 16, window=200, is_eagle_group=True)),
                      16, use_eagle=True),
        CacheState(8, frozenset({(0, j) for j in range(8)} | {(1, j) for j in range(3)})),
        64,
    ),
    # Mamba shortens the candidate after the window group dropped: the drop must be taken again.
    (
        LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=32, is_eagle_group=True), CacheGroup(Kind.MAMBA, 16)),
                      16, use_eagle=True),
        CacheState(7, frozenset({(0, j) for j in (0, 1, 2, 4, 5, 6)} | {(1, 1), (1, 2)})),
        96,
    ),
)


DCP_SIZES = (2, 4)


DCP_GROUP_KINDS = (Kind.FULL, Kind.MAMBA, Kind.FULL, Kind.MLA)


# Run first in the phase: one full-attention group stretched to 32 tokens, and the smallest
# hybrid whose partial hits exist only under DCP (Mamba block == hash unit).
FIXED_DCP_LOOKUPS = (
    (DcpSetting((CacheGroup(Kind.FULL, 16),), 32, dcp=2), CacheState(6, frozenset((0, j) for j in range(3))), 96),
    (
        DcpSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16, dcp=2),
        CacheState(8, frozenset({(0, j) for j in range(8)} | {(1, 2), (1, 4)})),
        128,
    ),
)


@st.composite
def dcp_lookups(draw):
    """(setting, state, max_length) with full-attention, MLA and Mamba groups."""

    dcp = draw(st.sampled_from(DCP_SIZES))
    base = draw(st.sampled_from([1, 2, 4, 8, 16]))
    use_eagle = draw(st.booleans())
    groups = tuple(
        CacheGroup(
            draw(st.sampled_from(DCP_GROUP_KINDS)),
            base * draw(st.sampled_from([1, 2, 4])),
            is_eagle_group=use_eagle and draw(st.booleans()),
        )
        for _ in range(draw(st.integers(1, 3)))
    )
    sharded = [sharded_block_size(g, dcp) for g in groups]
    gcd = reduce(math.gcd, sharded)
    if len(groups) == 1:
        hash_bs = sharded[0]
    else:
        hash_bs = draw(st.sampled_from([d for d in (gcd, gcd // 2, gcd // 4) if d and gcd % d == 0]))
    setting = DcpSetting(groups, hash_bs, dcp, use_eagle, allow_partial_hash_hits=draw(st.booleans()))
    state = draw(cache_states(setting.view()))
    top = state.num_hashes * hash_bs
    near_top = st.integers(0, cache_hit_alignment(setting)).map(lambda d: max(0, top - d))
    return setting, state, draw(near_top | st.integers(0, top))


def chunked_local_preconditions_hold(setting: LookupSetting) -> bool:
    """No chunked-local spec group drops (a drop is shared by equal specs) and its block size
    is the hit alignment."""
    alignment = cache_hit_alignment(setting)
    return all(
        sg.spec.kind != Kind.CHUNKED_LOCAL or (not sg.drops and sg.spec.block_size == alignment)
        for sg in spec_groups(setting, drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE))
    )
