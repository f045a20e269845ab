"""The block sizes the engine resolves (kvspec/gate/block_sizes.py), and that the check bites."""

import pytest

from kvspec.gate.block_sizes import check_block_sizes, resolves_as_the_spec_says
from kvspec.gate.options import GateOptions
from kvspec.impl.broken import applied
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import resolved_hash_block_size


def test_block_sizes_resolve_as_the_spec_says(vllm_adapter):
    assert check_block_sizes(vllm_adapter, GateOptions()).holds


def test_mamba_hybrid_hits_land_on_the_hash_unit(vllm_adapter):
    resolved = vllm_adapter.resolve_block_sizes([CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 64)])
    # lcm 64, gcd 16; Mamba's 64-token blocks are longer than the unit: partial hits, so 16.
    assert (resolved.scheduler_block_size, resolved.hash_block_size, resolved.cache_hit_alignment) == (64, 16, 16)
    resolves_as_the_spec_says(vllm_adapter, [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 64)])


def test_a_sliding_window_group_turns_partial_hits_off(vllm_adapter):
    groups = [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.SLIDING_WINDOW, 32, window=64), CacheGroup(Kind.MAMBA, 64)]
    # The window manager looks up whole 32-token blocks only (twice the 16-token unit), so
    # hits land on the lcm, 64.
    assert vllm_adapter.resolve_block_sizes(groups).cache_hit_alignment == 64


def test_check_catches_a_whole_block_eagle_margin(vllm_adapter):
    with applied(vllm_adapter, ["eagle-margin-whole-block"]):
        result = check_block_sizes(vllm_adapter, GateOptions())
    assert not result.holds
    assert "eagle_proof_margin" in result.details[0]
    assert check_block_sizes(vllm_adapter, GateOptions()).holds  # undone


def test_prefix_match_units_vllm_refuses_the_spec_refuses(vllm_adapter):
    one, two = [CacheGroup(Kind.FULL, 16)], [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 64)]
    for groups, unit in ((one, 8), (two, 32)):  # not the one block size; not a divisor of 16
        with pytest.raises(ValueError):
            vllm_adapter.resolve_block_sizes(groups, prefix_match_unit=unit)
        with pytest.raises(ValueError):
            resolved_hash_block_size([g.block_size for g in groups], unit)
    # A divisor of every block size is taken as the hash unit; Mamba then hits on it.
    assert vllm_adapter.resolve_block_sizes(two, prefix_match_unit=8).hash_block_size == 8
    resolves_as_the_spec_says(vllm_adapter, two, prefix_match_unit=8)


def test_the_dcp_rules_at_one_rank_are_the_plain_rules():
    from itertools import product

    from kvspec.spec.resolution import cache_hit_alignment, resolved_block_sizes, scheduler_block_size
    from kvspec.spec.setting import LookupSetting

    kinds = (Kind.FULL, Kind.MAMBA, Kind.SLIDING_WINDOW)
    for (k1, b1), (k2, b2) in product(product(kinds, (8, 16, 32)), repeat=2):
        groups = [CacheGroup(k1, b1, window=4 if k1 == Kind.SLIDING_WINDOW else None),
                  CacheGroup(k2, b2, window=4 if k2 == Kind.SLIDING_WINDOW else None)]  # fmt: skip
        setting = LookupSetting(tuple(groups), resolved_hash_block_size([b1, b2]))
        expected = (scheduler_block_size(setting), setting.hash_block_size, cache_hit_alignment(setting))
        assert resolved_block_sizes(groups) == expected, groups


def test_dcp_stretches_attention_blocks_and_enables_partial_hits_at_an_equal_mamba_block(vllm_adapter):
    from kvspec.gate.block_sizes import resolves_as_spec_dcp_says

    full, mamba = CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)
    sizes = vllm_adapter.resolve_block_sizes([full, mamba], dcp=2)
    # Full attention spans 32 tokens on 2 ranks, Mamba 16: lcm 32, gcd 16, and a Mamba block of
    # one hash unit enables partial hits under DCP (not without it: alignment 16 either way).
    assert (sizes.scheduler_block_size, sizes.hash_block_size, sizes.cache_hit_alignment) == (32, 16, 16)
    assert vllm_adapter.resolve_block_sizes([full], dcp=2).scheduler_block_size == 32
    assert vllm_adapter.resolve_block_sizes([mamba], dcp=2).scheduler_block_size == 16  # not sharded
    for case in (([full, mamba], None, 2, True), ([full], 8, 2, False), ([full, CacheGroup(Kind.FULL, 32)], 5, 1, False)):
        resolves_as_spec_dcp_says(vllm_adapter, case)
