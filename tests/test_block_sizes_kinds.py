"""The block sizes the engine resolves for groups of the issue-15 kinds (R-SWA, sink, cross
attention) against spec/resolution.py, per release (0.34.0 and 0.33.0): which groups the hash
unit must divide, which may keep hits inside blocks, and proof that the rule bites."""

from __future__ import annotations

from kvspec.draws.block_sizes import FIXED_KIND_CASES, NEW_RESOLVED_KINDS
from kvspec.gate.block_sizes import BLOCK_SIZE_MINIMUMS, check_block_sizes, resolves_as_the_spec_says
from kvspec.gate.options import GateOptions
from kvspec.impl.broken import applied
from kvspec.oracles.invariants import Violated
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import FINE_GRAINED_KINDS, hashing_sizes, resolved_block_sizes

CROSS_BESIDE_MAMBA = [CacheGroup(Kind.CROSS_ATTENTION, 32), CacheGroup(Kind.MAMBA, 64), CacheGroup(Kind.FULL, 16)]


def test_each_kind_beside_mamba_resolves_as_the_spec_says(vllm_adapter):
    for groups, unit in FIXED_KIND_CASES:
        resolves_as_the_spec_says(vllm_adapter, groups, unit)


def test_rswa_and_sink_probe_inside_blocks_cross_attention_does_not():
    assert {Kind.RSWA, Kind.SINK_FULL} <= FINE_GRAINED_KINDS
    assert Kind.CROSS_ATTENTION not in FINE_GRAINED_KINDS
    assert resolved_block_sizes(CROSS_BESIDE_MAMBA) == (64, 16, 64)
    rswa = [CacheGroup(Kind.RSWA, 32, rswa_window=128), *CROSS_BESIDE_MAMBA[1:]]
    assert resolved_block_sizes(rswa) == (64, 16, 16)


def test_a_group_outside_prefix_caching_does_not_set_the_hash_unit():
    ring = CacheGroup(Kind.CIRCULAR_BUFFER, 4)
    assert hashing_sizes([ring, CacheGroup(Kind.FULL, 16)]) == [16]
    assert hashing_sizes([ring]) == [4]


def test_the_cross_attention_rule_is_caught_by_its_broken_variant(vllm_adapter):
    resolves_as_the_spec_says(vllm_adapter, CROSS_BESIDE_MAMBA)
    with applied(vllm_adapter, ["cross-attention-probes-inside-blocks"]):
        try:
            resolves_as_the_spec_says(vllm_adapter, CROSS_BESIDE_MAMBA)
        except Violated:
            pass
        else:
            raise AssertionError("the broken variant resolved as the spec says")
        assert not check_block_sizes(vllm_adapter, GateOptions(scale=0.05)).holds


def test_the_check_reports_each_kind_above_its_minimum(vllm_adapter):
    result = check_block_sizes(vllm_adapter, GateOptions(scale=0.05))
    assert result.holds, result.details
    assert result.minimums == BLOCK_SIZE_MINIMUMS
    for kind in NEW_RESOLVED_KINDS:
        assert result.coverage[f"kind {kind}"] >= 2
