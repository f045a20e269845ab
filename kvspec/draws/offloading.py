"""The draws of OffloadingConnector lookups: groups, chunk size, stored chunks, the request's
tokens and the cap."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from hypothesis import assume
from hypothesis import strategies as st

from kvspec.draws.lookups import cache_states, chunked_local_preconditions_hold, just_or_integers, lookup_settings
from kvspec.reference.lookup import coordinator_answer
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.offloading import (
    OffloadSetting,
    chunk_setting,
    tokens_per_chunk,
)
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import CacheState, LookupSetting

SPLIT_MAMBA_FINDING = (
    "latent: with a group of finer chunks than Mamba's, vLLM can resume Mamba inside one of its chunks "
    "from the state at the chunk's end (tests/test_offloading.py, not drawn here)"
)


# Made once per argument, not per draw (as kvspec/draws/lookups.py does); the same choices.
CHUNK_BLOCKS = st.sampled_from([1, 1, 2])
MOSTLY_PAST_THE_ALIGNMENT = st.sampled_from([False] * 7 + [True])


@cache
def mostly_no_cap(num_tokens: int):
    return st.none() | st.none() | st.integers(0, num_tokens)


@cache
def mostly_aligned_prefix(units: int, step: int):
    return st.integers(1, units // step).map(lambda k: k * step) | st.integers(1, units)


@st.composite
def offload_cases(draw):
    """(setting, state, num_tokens, cap): the request hashes each of the state's units once and
    may carry a few tokens past the last; the cap (max_num_new_tokens) is mostly absent. With
    EAGLE, lookahead hashes half the time (a release without them filters those out:
    kvspec/gate/offloading.py:offloading_takes_its_eagle_mode), the request then holding at
    least the token after its last unit."""
    lookup = draw(lookup_settings())
    lookahead = lookup.use_eagle and draw(st.booleans())
    setting = OffloadSetting(lookup.groups, lookup.hash_block_size, draw(CHUNK_BLOCKS), lookup.use_eagle,
                             lookahead_hashes=lookahead)
    mamba_chunks = {tokens_per_chunk(setting, gid) for gid, g in enumerate(setting.groups) if g.kind == Kind.MAMBA}
    assume(len(mamba_chunks) <= 1)  # vLLM asserts one Mamba alignment
    assume(all(g.block_size % m.block_size == 0 for m in setting.groups if m.kind == Kind.MAMBA for g in setting.groups))
    drawn = draw(cache_states(chunk_setting(setting)))
    units = {gid: tokens_per_chunk(setting, gid) // setting.hash_block_size for gid in range(len(setting.groups))}
    ends = frozenset((gid, j) for gid, j in drawn.cached if (j + 1) % units[gid] == 0)
    state = CacheState(drawn.num_hashes, ends)
    past = st.integers(1, setting.hash_block_size) if lookahead else st.integers(0, setting.hash_block_size - 1)
    num_tokens = state.num_hashes * setting.hash_block_size + draw(past)
    cap = draw(mostly_no_cap(num_tokens))
    return setting, state, num_tokens, cap


# The load-bound part's fixed cases, met at every seed and budget before the drawn ones. First, a model
# whose every group the connector offloads, as it does without HiSparse (offloading/config.py:
# get_offloading_group_ids, prefix_cacheable_group_ids), so no group bounds the load and vLLM
# passes no bound (offloading_connector.py:189-190). [Mamba 16, full 16], hash unit 16, a 97-token
# prompt, the store holding both groups' 6 blocks; locally nothing, then a 64-token local hit.
_MAMBA, _FULL = CacheGroup(Kind.MAMBA, 16), CacheGroup(Kind.FULL, 16)
EVERY_GROUP_OFFLOADED = tuple(
    (OffloadSetting((_MAMBA, _FULL), 16), CacheState.full_prefix(2, 6), 97, (), CacheState(6, local))
    for local in (frozenset(), frozenset({(0, 3)} | {(1, unit) for unit in range(4)}))
)
# Two groups left out, the second bounding tighter: [Mamba 16, full 32] offloaded, the store
# holding their 96 tokens; full 16 (its 6 blocks held locally) and full 64 (nothing held) left
# out. The bound is the least per-group hit of the two, 0, not the first group's 64 (its 96
# tokens on the scheduler block of 64).
TWO_GROUPS_LEFT_OUT = (
    OffloadSetting((_MAMBA, CacheGroup(Kind.FULL, 32)), 16), CacheState.full_prefix(2, 6), 97,
    (_FULL, CacheGroup(Kind.FULL, 64)), CacheState(6, frozenset((2, unit) for unit in range(6))),
)
LOAD_BOUND_FIXED = (*EVERY_GROUP_OFFLOADED, TWO_GROUPS_LEFT_OUT)


@st.composite
def bounded_offload_cases(draw):
    """(setting, state, num_tokens, bounding, local): an offload case whose model also has one or
    two groups the connector does not offload (``bounding``, appended after the offloaded ones),
    holding ``local`` in the GPU prefix cache: per group a run of blocks from the first, sometimes
    with a later one evicted. Either the offloaded groups hold nothing locally, so the local hit is
    0 (the lookup is driven from no locally computed tokens, impl/offloading.py), or they also
    hold every block of a drawn prefix, and the local hit (vLLM's own get_computed_blocks on that
    pool, impl/offloading_load_bound.py) is above 0, so the bound is asked past it as the
    scheduler asks it (scheduler.py:1169-1181).

    Ours: the bounding groups are full attention (optionally EAGLE-annotated), as HiSparse's
    source group, the one group vLLM leaves out of the connector that keeps its own longer hit
    (single_type_kv_cache_manager.py:2228-2237); their block sizes are the offloaded groups' or
    twice them, so Mamba's stays a divisor, and never an offloaded full-attention group's: equal
    specs are looked up as one (reference/lookup.py:spec_groups), which would bound the load by
    the offloaded group's local blocks, and HiSparse's source (sparse MLA) and indexer specs
    never are equal (hisparse/layout.py:146-156, 212-219)."""
    setting, state, num_tokens, _ = draw(offload_cases())
    if setting.lookahead_hashes:
        # Ours: the local manager the bound is read from hashes without lookahead
        # (impl/connector_hits.py), so the load bound is driven under the legacy EAGLE drop only:
        # the same draw, its prompt one token shorter so that it carries as many hashes.
        setting, num_tokens = replace(setting, lookahead_hashes=False), num_tokens - 1
    assume(num_tokens > 0)  # the scheduler never sees an empty prompt; vLLM's lookup asks num_tokens - 1
    offloaded_full = {g.block_size for g in setting.groups if g.kind == Kind.FULL}
    sizes = sorted({g.block_size * k for g in setting.groups for k in (1, 2)} - offloaded_full)
    assume(sizes)
    bounding = tuple(
        CacheGroup(Kind.FULL, draw(st.sampled_from(sizes)), is_eagle_group=setting.use_eagle and draw(st.booleans()))
        for _ in range(draw(st.integers(1, 2)))
    )
    # vLLM's core asserts these of a chunked-local group (ChunkedLocalAttentionManager.find_longest_cache_hit).
    model = LookupSetting(setting.groups + bounding, setting.hash_block_size, setting.use_eagle)
    assume(chunked_local_preconditions_hold(model))
    # Mostly a prompt past the hit alignment, below which every bound is 0.
    assume(num_tokens > cache_hit_alignment(model) or draw(MOSTLY_PAST_THE_ALIGNMENT))
    first = len(setting.groups)
    with_local_hit = draw(st.booleans())
    cached = set()
    for offset, group in enumerate(bounding):
        units = group.block_size // setting.hash_block_size
        blocks = state.num_hashes // units
        run = draw(just_or_integers(blocks, min(int(with_local_hit), blocks), blocks))  # a local hit needs block 0
        held = set(range(run))
        if run > 1 and draw(st.booleans()):
            held.discard(draw(st.integers(1, run - 1)))  # an eviction past the first block
        cached |= {(first + offset, (block + 1) * units - 1) for block in held}
    if with_local_hit:
        # A prefix of the prompt computed locally in every offloaded group: each holds the blocks
        # it ends (a sliding window or a local chunk reads fewer of them; Mamba its last state).
        # Mostly on the hit alignment, where a local hit can end.
        step = cache_hit_alignment(model) // setting.hash_block_size
        assume(step <= state.num_hashes)
        prefix = draw(mostly_aligned_prefix(state.num_hashes, step))
        for gid, group in enumerate(setting.groups):
            units = group.block_size // setting.hash_block_size
            cached |= {(gid, (block + 1) * units - 1) for block in range(prefix // units)}
    local = CacheState(state.num_hashes, frozenset(cached))
    # Ours: a local chunk or window of nothing cached can still be a local hit (its blocks before
    # the window are null); without the offloaded groups' blocks the lookup is driven from a local
    # hit of 0 only, and with them from a local hit above 0.
    assume((coordinator_answer(model, local, num_tokens - 1)[0].length > 0) == with_local_hit)
    return setting, state, num_tokens, bounding, local
