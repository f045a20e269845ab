"""The block sizes the engine resolves (kvspec/block_size_check.py), and that the check bites."""

from kvspec.block_size_check import check_block_sizes, resolves_as_the_spec_says
from kvspec.impl.broken import applied
from kvspec.spec.layers import CacheGroup, Kind


def test_block_sizes_resolve_as_the_spec_says(vllm_adapter):
    assert check_block_sizes(vllm_adapter, seed=0).holds


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
        result = check_block_sizes(vllm_adapter, seed=0)
    assert not result.holds
    assert "eagle_proof_margin" in result.details[0]
    assert check_block_sizes(vllm_adapter, seed=0).holds  # undone
