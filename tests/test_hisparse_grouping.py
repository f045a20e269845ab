"""HiSparse's grouping rule (spec/hisparse_grouping.py) against real vLLM: with
attention_config.hisparse_config set, kv_cache_planning:get_kv_cache_groups takes its HiSparse
branch (vllm.v1.hisparse.layout:get_hisparse_kv_cache_groups), which no other check drives.
Fixed DeepSeek-V3.2-like shapes, each refusal, drawn models, the packing against its
brute-force statement, and the mutants of that branch that once survived the gate, caught. The
suite runs this per release (0.34.0 and 0.33.0); a release without
spec/releases.py:HISPARSE_LAID_OUT_WHEN_GROUPED is skipped."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvspec.draws.hisparse_models import (
    FIXED_HISPARSE_MODELS,
    INDEXER,
    REGULAR,
    SPARSE,
    V32,
    deepseek_v32,
    hisparse_models,
    one_byte_boundary,
)
from kvspec.gate.hisparse_grouping import HISPARSE_MINIMUMS, hisparse_violations, situations, vllm_hisparse_answer
from kvspec.impl import patching
from kvspec.impl import vllm_symbols as S
from kvspec.oracles.grouping import hisparse_grouping_violations
from kvspec.reference.hisparse_grouping import expected_hisparse_grouping, packing_by_definition
from kvspec.spec.grouping import Refusal
from kvspec.spec.hisparse_grouping import GroupRole, HiSparseSetting, hisparse_applies, pack_units, value_error
from kvspec.spec.releases import HISPARSE_LAID_OUT_WHEN_GROUPED, HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER

SWAP = ("get_hisparse_kv_cache_groups(vllm_config, kv_cache_spec)",
        "get_hisparse_kv_cache_groups(kv_cache_spec, vllm_config)")


@pytest.fixture(scope="module")
def hisparse_adapter(vllm_adapter):
    if HISPARSE_LAID_OUT_WHEN_GROUPED not in vllm_adapter.rules:
        pytest.skip(f"this release lacks '{HISPARSE_LAID_OUT_WHEN_GROUPED.name}': "
                    f"{HISPARSE_LAID_OUT_WHEN_GROUPED.description}")
    return vllm_adapter


def conformance_failure(adapter, layers, setting) -> str | None:
    """What vLLM's grouping gets wrong against the spec, or None (the grouping check's judge)."""
    problems = hisparse_violations(adapter, layers, setting)
    return "\n".join(v.detail for v in problems) or None


# ------------------------------------------------------------------ fixed shapes


@pytest.mark.parametrize("num_layers, freq", [(4, 1), (20, 1), (12, 4)], ids=["v32-4", "v32-20", "indexcache-4"])
def test_deepseek_v32_groups_as_the_spec_says(hisparse_adapter, num_layers, freq):
    layers = deepseek_v32(num_layers, freq)
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    groups = hisparse_adapter.group_hisparse_layers(layers, V32)
    source, indexer = groups[:2]
    assert (source.role, source.host_resident) == (GroupRole.HISPARSE_SOURCE, True)
    assert (indexer.role, indexer.host_resident) == (GroupRole.HISPARSE_INDEXER, False)
    assert len(source.group.layer_names) == num_layers
    hot = [g for g in groups if g.group.spec_class == "HiSparseHotSpec"]
    # (1 + 1) * 2048 rows in 64-token blocks.
    assert {g.blocks_per_request for g in hot} == {64}


def test_twenty_layers_pack_two_units_a_hot_group(hisparse_adapter):
    """20 indexers hold 20 * 8448 bytes a block; a sparse layer 73728: two units a group."""
    groups = hisparse_adapter.group_hisparse_layers(deepseek_v32(20), V32)
    hot = [g.group for g in groups if g.group.spec_class == "HiSparseHotSpec"]
    resident = [g.group for g in groups if g.group.spec_class == "HiSparseResidentSpec"]
    assert [len(g.layer_names) for g in hot] == [2] * 10
    assert hot[0].layer_names == ("model.layers.0.self_attn.attn.hisparse_hot", "model.layers.1.self_attn.attn.hisparse_hot")
    assert [n.removesuffix(".hisparse_resident") for n in resident[0].layer_names] == \
           [n.removesuffix(".hisparse_hot") for n in hot[0].layer_names]
    assert [g.group.spec_class for g in groups[2:]] == ["HiSparseResidentSpec"] * 10 + ["HiSparseHotSpec"] * 10


def test_a_regular_group_comes_last(hisparse_adapter):
    layers = {**deepseek_v32(4), "model.layers.4.full": REGULAR, "model.layers.5.full": REGULAR}
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    last = hisparse_adapter.group_hisparse_layers(layers, V32)[-1]
    assert (last.group.layer_names, last.role) == (("model.layers.4.full", "model.layers.5.full"), GroupRole.DEFAULT)


def test_a_configured_buffer_sets_the_hot_blocks(hisparse_adapter):
    setting = HiSparseSetting(device_buffer_size=3000, index_topk=2048)
    assert conformance_failure(hisparse_adapter, deepseek_v32(4), setting) is None
    hot = [g for g in hisparse_adapter.group_hisparse_layers(deepseek_v32(4), setting) if g.blocks_per_request]
    assert {g.blocks_per_request for g in hot} == {47}  # ceil(3000 / 64)


def test_the_widest_top_k_buffer_sizes_the_hot_buffer(hisparse_adapter):
    if HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER not in hisparse_adapter.rules:
        pytest.skip(f"this release lacks '{HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER.name}'")
    layers = deepseek_v32(4)
    layers["model.layers.3.self_attn.attn"] = replace(layers["model.layers.3.self_attn.attn"], topk_width=4096)
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    hot = [g for g in hisparse_adapter.group_hisparse_layers(layers, V32) if g.blocks_per_request]
    assert {g.blocks_per_request for g in hot} == {128}  # (1 + 1) * 4096 / 64


def test_only_the_source_and_the_indexer_are_transferred(hisparse_adapter):
    """The resident and hot groups are device replicas a connector never moves
    (KVCacheGroupSpec.enable_kv_transfer False); the host source and the indexer it does."""
    groups = hisparse_adapter.group_hisparse_layers(deepseek_v32(4), V32)
    assert [g.kv_transfer for g in groups] == [True, True] + [False] * (len(groups) - 2)


# Unit pages (one indexer: a 132-byte budget) and the hot groups' sizes vLLM packs them into.
BOUNDARIES = {
    "fills": ((66, 66), [2]),
    "passes-by-a-byte": ((66, 67), [1, 1]),
    "fills-after-a-group": ((132, 66, 66), [1, 2]),
    "passes-after-a-group": ((132, 66, 67), [1, 1, 1]),
}


@pytest.mark.parametrize("name", sorted(BOUNDARIES))
def test_the_packing_at_its_boundaries(hisparse_adapter, name):
    """A hot group takes units while their summed page stays within the indexer's."""
    heads, hot_sizes = BOUNDARIES[name]
    layers = one_byte_boundary(heads)
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    groups = hisparse_adapter.group_hisparse_layers(layers, V32)
    assert [len(g.group.layer_names) for g in groups if g.group.spec_class == "HiSparseHotSpec"] == hot_sizes


NO_LEADER_FIRST = {**deepseek_v32(4), "model.layers.0.self_attn.attn": replace(SPARSE, index_leader=False)}


def test_a_first_layer_that_leads_no_index_group_starts_the_first_unit(hisparse_adapter):
    assert conformance_failure(hisparse_adapter, NO_LEADER_FIRST, V32) is None


def test_a_refusal_in_other_words_is_not_vllm_s():
    """Python's own ValueError (say max() of no sparse layer) is not vLLM's refusal of that model."""
    words = "HiSparse requires sparse-MLA and indexer cache specs."
    assert hisparse_grouping_violations(ValueError(words), value_error(words)) == []
    assert hisparse_grouping_violations(ValueError("max() arg is an empty sequence"), value_error(words))


def test_without_mla_hisparse_leaves_the_ordinary_grouping(hisparse_adapter):
    layers = {"model.layers.0.full": REGULAR}
    assert not hisparse_applies(layers, V32)
    assert expected_hisparse_grouping(layers, V32) is None
    (group,) = hisparse_adapter.group_hisparse_layers(layers, V32)
    assert (group.role, group.host_resident) == (GroupRole.DEFAULT, False)


def test_the_fixed_models_reach_every_hisparse_situation(hisparse_adapter):
    """The grouping check runs these first: each of its HiSparse minimums is reached by them
    alone (so a quick run meets them), and each groups as the reference says."""
    reached = {situation for layers, setting in FIXED_HISPARSE_MODELS
               for situation in situations(expected_hisparse_grouping(layers, setting, hisparse_adapter.rules))}
    assert reached == set(HISPARSE_MINIMUMS)
    for layers, setting in FIXED_HISPARSE_MODELS:
        assert conformance_failure(hisparse_adapter, layers, setting) is None


REFUSED = {
    "deepseek-v4": {**deepseek_v32(2), "model.layers.1.self_attn.attn": replace(SPARSE, model_version="deepseek_v4")},
    "no-indexer": {f"model.layers.{i}.self_attn.attn": replace(SPARSE, index_leader=True) for i in range(2)},
    "no-sparse-layer": {"model.layers.0.self_attn.indexer.k_cache": INDEXER},
    "two-block-sizes": {**deepseek_v32(2), "model.layers.0.self_attn.indexer.k_cache": replace(INDEXER, block_size=16)},
    # Layer 1 shares layer 0's top-k, so both land in one hot group with other pages.
    "hot-pages-differ": {**deepseek_v32(2, 4), "model.layers.1.self_attn.attn": replace(SPARSE, head_size=512)},
}
EXPECTED_ERROR = {"deepseek-v4": ValueError, "no-indexer": ValueError, "no-sparse-layer": ValueError,
                  "two-block-sizes": AssertionError, "hot-pages-differ": ValueError}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_refusal_is_vllm_s(hisparse_adapter, name):
    expected = expected_hisparse_grouping(REFUSED[name], V32, hisparse_adapter.rules)
    assert isinstance(expected, Refusal) and expected.error is EXPECTED_ERROR[name]
    assert type(vllm_hisparse_answer(hisparse_adapter, REFUSED[name], V32)) is EXPECTED_ERROR[name]


@pytest.mark.parametrize("buffer", [1000, 40000], ids=["below-one-top-k", "past-int16"])
def test_a_buffer_out_of_range_is_refused(hisparse_adapter, buffer):
    setting = HiSparseSetting(device_buffer_size=buffer, index_topk=2048)
    assert expected_hisparse_grouping(deepseek_v32(2), setting, hisparse_adapter.rules).error is ValueError
    assert type(vllm_hisparse_answer(hisparse_adapter, deepseek_v32(2), setting)) is ValueError


# ------------------------------------------------------------------ drawn models


@settings(derandomize=True, max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_drawn_models_group_as_the_spec_says(hisparse_adapter, data):
    widest = HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER in hisparse_adapter.rules
    layers, setting = data.draw(hisparse_models(widest))
    assert conformance_failure(hisparse_adapter, layers, setting) is None


@settings(derandomize=True, max_examples=300, deadline=None, database=None)
@given(pages=st.lists(st.integers(1, 100), max_size=8), budget=st.integers(1, 300))
def test_the_packing_is_the_one_its_definition_names(pages, budget):
    assert pack_units(pages, budget) == packing_by_definition(pages, budget)


# ------------------------------------------------------------------ the mutant is caught


def test_the_argument_swap_of_the_hisparse_branch_is_caught(hisparse_adapter):
    """get_kv_cache_groups:SwapArguments:0 (benchmarks/mutation_triage.toml) survived every
    check: with its arguments swapped the HiSparse branch never fires. Here it fails the comparison."""
    layers = deepseek_v32(4)
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    undo = patching.edit(S.GET_KV_CACHE_GROUPS, [SWAP])
    try:
        assert conformance_failure(hisparse_adapter, layers, V32) is not None
        assert conformance_failure(hisparse_adapter, {**layers, "model.layers.4.full": REGULAR}, V32) is not None
    finally:
        undo()
    assert conformance_failure(hisparse_adapter, layers, V32) is None


# Survivors of kvspec mutate --vllm 0.34.0 on HiSparse's layout, each with a model that now catches it.
LAYOUT, PARTITION = S.LAY_OUT_HISPARSE_GROUPS, S.PARTITION_HISPARSE_SPECS
FIRST_TOTAL, RESET_TOTAL = "current_page = {}\n    for unit", "current_page = {}\n        current.extend"
RESIDENT_TRANSFER = "),\n                enable_kv_transfer={},\n            )\n        )\n        hot_groups"
SURVIVORS = {
    "_partition_hisparse_specs:DropOperand:6": (
        PARTITION, ("if not source_specs or not indexer_specs:", "if not indexer_specs:"),
        {"model.layers.0.self_attn.indexer.k_cache": INDEXER}),
    "_lay_out_hisparse_groups:DropOperand:1": (
        LAYOUT, ("if layer_spec.is_index_group_leader or not hot_units:", "if layer_spec.is_index_group_leader:"),
        NO_LEADER_FIRST),
    "_lay_out_hisparse_groups:NumberReplacer:6": (
        LAYOUT, (FIRST_TOTAL.format(0), FIRST_TOTAL.format(1)), one_byte_boundary((66, 66))),
    "_lay_out_hisparse_groups:NumberReplacer:7": (
        LAYOUT, (FIRST_TOTAL.format(0), FIRST_TOTAL.format(-1)), one_byte_boundary((66, 67))),
    "_lay_out_hisparse_groups:NumberReplacer:8": (
        LAYOUT, (RESET_TOTAL.format(0), RESET_TOTAL.format(1)), one_byte_boundary((132, 66, 66))),
    "_lay_out_hisparse_groups:NumberReplacer:9": (
        LAYOUT, (RESET_TOTAL.format(0), RESET_TOTAL.format(-1)), one_byte_boundary((132, 66, 67))),
    "_lay_out_hisparse_groups:ReplaceComparisonOperator_Gt_GtE:0": (
        LAYOUT, ("current_page + unit_page > indexer_page", "current_page + unit_page >= indexer_page"),
        one_byte_boundary((66, 66))),
    "_lay_out_hisparse_groups:ReplaceFalseWithTrue:0": (
        LAYOUT, (RESIDENT_TRANSFER.format(False), RESIDENT_TRANSFER.format(True)), deepseek_v32(4)),
}


@pytest.mark.parametrize("mutant", sorted(SURVIVORS))
def test_a_surviving_mutant_of_the_layout_is_caught(hisparse_adapter, mutant):
    symbol, edit, layers = SURVIVORS[mutant]
    assert conformance_failure(hisparse_adapter, layers, V32) is None
    undo = patching.edit(symbol, [edit])
    try:
        assert conformance_failure(hisparse_adapter, layers, V32) is not None
    finally:
        undo()


def test_a_symbol_kvspec_cannot_find_is_never_taken_for_a_refusal(hisparse_adapter, monkeypatch):
    """A renamed HiSparseConfig is kvspec's failure to drive this vLLM: it propagates, so the
    gate reports "cannot drive", not a refusal that departs from the reference."""
    from kvspec.impl.vllm_symbols import SymbolMissing

    def renamed(layers, setting):
        raise SymbolMissing(S.HISPARSE_CONFIG, "renamed in this tree")

    monkeypatch.setattr(hisparse_adapter, "group_hisparse_layers", renamed)
    with pytest.raises(SymbolMissing):
        vllm_hisparse_answer(hisparse_adapter, deepseek_v32(2), V32)
