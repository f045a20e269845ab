"""The draws of SimpleCPUOffload lookups: the core lookups' groups and cache states (as the CPU
pool), the request's tokens, a local prefix on a scheduler block, eager or lazy mode."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume
from hypothesis import strategies as st

from kvspec.draws.lookups import cache_states, chunked_local_preconditions_hold, lookup_settings
from kvspec.spec.layers import FULL_ATTENTION_KINDS, CacheGroup, Kind
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload import SimpleOffloadCase


@st.composite
def simple_offload_pools(draw) -> tuple[LookupSetting, CacheState, bool]:
    """The groups, the CPU pool's entries, and whether the connector is lazy."""
    lazy = draw(st.booleans())
    setting = draw(lookup_settings())
    # The connector's coordinator decides partial hits from its mode (not lazy), not the draw.
    setting = replace(setting, allow_partial_hash_hits=not lazy)
    # vLLM asserts these (kvspec/gate/lookups.py): not findings.
    assume(len(setting.groups) > 1 or setting.hash_block_size == setting.groups[0].block_size)
    assume(chunked_local_preconditions_hold(setting))
    # SimpleCPUOffloadScheduler asserts a full-attention group (its fa_gidx).
    assume(any(g.kind in FULL_ATTENTION_KINDS for g in setting.groups))
    return setting, draw(cache_states(setting)), lazy


@st.composite
def simple_offload_cases(draw) -> SimpleOffloadCase:
    setting, cpu, lazy = draw(simple_offload_pools())
    unit = setting.hash_block_size
    num_tokens = cpu.num_hashes * unit + draw(st.integers(0, unit - 1))
    assume(num_tokens > 1)
    block = scheduler_block_size(setting)
    aligned = st.integers(0, cpu.num_hashes * unit // block).map(lambda k: k * block)
    # The scheduler presents the connector a local hit on a scheduler block (Scheduler's
    # block_aligned_local), so the prefix is one; a local chunk may still end inside it.
    num_computed = draw(aligned)
    chunks = [g.chunk for g in setting.groups if g.kind == Kind.CHUNKED_LOCAL]
    # Such a prefix is rare among the aligned ones, and it is where 0.33 and later refuse
    # (spec/releases.py:SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK): three times in four, one of those.
    off_chunk = [k * block for k in range(1, cpu.num_hashes * unit // block + 1)
                 if any(k * block % chunk for chunk in chunks)]
    if off_chunk and draw(st.integers(0, 3)):
        num_computed = draw(st.sampled_from(off_chunk))
    return SimpleOffloadCase(setting, cpu, num_tokens, num_computed, lazy)


_HYBRID = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16)
_CPU = CacheState(4, frozenset({(0, 0), (0, 1), (0, 2), (1, 2)}))  # full 3 blocks, Mamba's state at 48
# [full 4, chunked local 4 (chunk 8)], the CPU pool holding full attention's tokens [0, 12) and the
# local group's [0, 8), a 13-token prompt past a local prefix of 4: ending inside chunk [0, 8).
# Looked up as if the suffix began the request, a match of 8 needs no local block; at 12 tokens
# in all the local group needs [8, 12), which the pool lacks. 0.32 and older match 8
# (release-findings.toml: simple-offload-splits-a-local-chunk); 0.33 refuses.
SPLIT_LOCAL_CHUNK = SimpleOffloadCase(
    LookupSetting((CacheGroup(Kind.FULL, 4), CacheGroup(Kind.CHUNKED_LOCAL, 4, chunk=8)), 4),
    CacheState(3, frozenset({(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)})), 13, 4)
# [full 1]: one token left past a local prefix of 1 in a 3-token prompt, and the pool holds it.
ONE_TOKEN_LEFT = SimpleOffloadCase(LookupSetting((CacheGroup(Kind.FULL, 1),), 1),
                                   CacheState(3, frozenset({(0, 0), (0, 1), (0, 2)})), 3, 1)
# Run first, whatever the budget: [full 16, Mamba 16] past each local prefix, eager and lazy;
# then the split local chunk and the one token left.
FIXED_SIMPLE_CASES = tuple(
    SimpleOffloadCase(_HYBRID, _CPU, 64, num_computed, lazy) for lazy in (False, True) for num_computed in (0, 16, 32, 48)
) + (SPLIT_LOCAL_CHUNK, ONE_TOKEN_LEFT)
