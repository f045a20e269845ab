"""The draws of OffloadingConnector lookups: groups, chunk size, stored chunks, the request's
tokens and the cap."""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from kvspec.draws.lookups import cache_states, lookup_settings
from kvspec.spec.layers import Kind
from kvspec.spec.offloading import (
    OffloadSetting,
    chunk_setting,
    tokens_per_chunk,
)
from kvspec.spec.setting import CacheState

SPLIT_MAMBA_FINDING = (
    "latent: with a group of finer chunks than Mamba's, vLLM can resume Mamba inside one of its chunks "
    "from the state at the chunk's end (tests/test_offloading.py, not drawn here)"
)


@st.composite
def offload_cases(draw):
    """(setting, state, num_tokens, cap): the request hashes each of the state's units once and
    may carry a few tokens past the last; the cap (max_num_new_tokens) is mostly absent."""
    lookup = draw(lookup_settings())
    setting = OffloadSetting(lookup.groups, lookup.hash_block_size, draw(st.sampled_from([1, 1, 2])), lookup.use_eagle)
    mamba_chunks = {tokens_per_chunk(setting, gid) for gid, g in enumerate(setting.groups) if g.kind == Kind.MAMBA}
    assume(len(mamba_chunks) <= 1)  # vLLM asserts one Mamba alignment
    assume(all(g.block_size % m.block_size == 0 for m in setting.groups if m.kind == Kind.MAMBA for g in setting.groups))
    drawn = draw(cache_states(chunk_setting(setting)))
    units = {gid: tokens_per_chunk(setting, gid) // setting.hash_block_size for gid in range(len(setting.groups))}
    ends = frozenset((gid, j) for gid, j in drawn.cached if (j + 1) % units[gid] == 0)
    state = CacheState(drawn.num_hashes, ends)
    num_tokens = state.num_hashes * setting.hash_block_size + draw(st.integers(0, setting.hash_block_size - 1))
    cap = draw(st.none() | st.none() | st.integers(0, num_tokens))
    return setting, state, num_tokens, cap
