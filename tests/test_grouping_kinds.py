"""The grouping rules of the issue-15 kinds (R-SWA, sink, circular-buffer, cross attention)
against real vLLM: every kind alone and every pair, the coverage the check reports, and proof
that each new rule bites: vLLM with the rule broken (impl/broken_grouping.py) fails the check,
on the shape that exposes it and on the gate's own run. The suite runs this per release
(0.34.0 and 0.33.0)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspec.draws.models import DRAWN_KINDS, NEW_GROUPED_KINDS, exemplar, kind_pair_models
from kvspec.gate.grouping import GROUPING_MINIMUMS, assert_conforms, check_grouping, conformance_failures
from kvspec.gate.hisparse_grouping import HISPARSE_MINIMUMS
from kvspec.gate.options import GateOptions
from kvspec.impl.broken import applied
from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import GROUPED_KINDS, Refusal, format_of, merge_failure
from kvspec.spec.grouping_properties import Model, layers_of_one_spec_keep_model_order
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode
from kvspec.spec.releases import HISPARSE_LAID_OUT_WHEN_GROUPED
from kvspec.tools import matrix


def _model(*layers: LayerSpec) -> Model:
    return Model({f"model.layers.{i}": layer for i, layer in enumerate(layers)}, SpecDecode(), True)


RSWA_64, RSWA_128 = LayerSpec(Kind.RSWA, 16, rswa_window=64), LayerSpec(Kind.RSWA, 16, rswa_window=128)
FULL_THEN_RSWA = _model(exemplar(Kind.FULL), exemplar(Kind.RSWA), exemplar(Kind.RSWA))
RING_THEN_FULL = _model(exemplar(Kind.CIRCULAR_BUFFER), exemplar(Kind.FULL), exemplar(Kind.FULL))
EXPOSED_BY = {
    "rswa-merges-any-window": _model(RSWA_64, RSWA_128),
    "full-merge-refuses-subclasses": FULL_THEN_RSWA,
    "circular-buffer-uniform-with-any-attention": RING_THEN_FULL,
}


def test_the_draws_stay_within_the_kinds_the_grouping_rules_speak_of():
    assert set(DRAWN_KINDS) <= GROUPED_KINDS
    assert GROUPED_KINDS.isdisjoint({Kind.ENCODER_ONLY, Kind.HIDDEN_STATE, Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT})


def test_every_kind_and_pair_groups_as_the_reference_predicts(vllm_adapter):
    for model in kind_pair_models():
        assert_conforms(vllm_adapter, model, repr(model.layers))


def test_rules_read_from_vllm_source():
    full, rswa, sink = (format_of(exemplar(k)) for k in (Kind.FULL, Kind.RSWA, Kind.SINK_FULL))
    # FullAttentionSpec.merge takes an R-SWA or sink layer; RSWASpec.merge only R-SWA layers of one window.
    assert merge_failure([full, rswa, sink]) is None
    assert merge_failure([rswa, full]) is AssertionError
    assert merge_failure([format_of(RSWA_64), format_of(RSWA_128)]) is AssertionError
    # SinkFullAttentionSpec.merge builds its spec without tokens_per_state.
    compressed_sink = format_of(LayerSpec(Kind.SINK_FULL, 16, sink_len=16, tokens_per_state=2))
    assert merge_failure([compressed_sink, compressed_sink]) is AssertionError
    # R-SWA first: not one spec, but one uniform type with full attention (a FullAttentionSpec base).
    grouping = expected_grouping(_model(exemplar(Kind.RSWA), exemplar(Kind.FULL)).layers)
    assert not isinstance(grouping, Refusal)
    assert [g.spec_class for g in grouping.groups] == ["UniformTypeKVCacheSpecs"]


def test_full_then_rswa_is_one_full_attention_group(vllm_adapter):
    expected = expected_grouping(FULL_THEN_RSWA.layers)
    assert [g.spec_class for g in expected.groups] == ["FullAttentionSpec"]
    assert_conforms(vllm_adapter, FULL_THEN_RSWA)


@pytest.mark.parametrize("variant", EXPOSED_BY)
def test_each_new_rule_is_caught_by_its_broken_variant(vllm_adapter, variant):
    exposing_model = EXPOSED_BY[variant]
    assert_conforms(vllm_adapter, exposing_model)  # unbroken vLLM passes on the same shape
    with applied(vllm_adapter, [variant]):
        assert conformance_failures(vllm_adapter, exposing_model)


@pytest.mark.parametrize("variant", EXPOSED_BY)
def test_the_gate_check_fails_on_each_new_variant(vllm_adapter, variant):
    with applied(vllm_adapter, [variant]):
        result = check_grouping(vllm_adapter, GateOptions(scale=0.05))
    assert not result.holds, result.details
    # Caught by the variant itself: a release's recorded finding is set aside, reported last.
    assert not any(result.details[0].startswith(f.id) for f in matrix.load()), result.details[0]


def test_the_check_reports_every_kind_and_pair_above_its_minimum(vllm_adapter):
    recorded = [f.id for f in matrix.load() if f.check == "grouping" and vllm_adapter.target.version in f.releases]
    result = check_grouping(vllm_adapter, GateOptions(scale=0.05))
    # A release's recorded finding is set aside wherever the draws meet it, and fails the check alone.
    assert [line.split(",")[0] for line in result.details if not result.holds] == recorded[:1], result.details
    hisparse = HISPARSE_MINIMUMS if HISPARSE_LAID_OUT_WHEN_GROUPED in vllm_adapter.rules else {}
    assert result.minimums == GROUPING_MINIMUMS | hisparse
    for kind in DRAWN_KINDS:
        assert result.coverage[f"kind {kind}"] >= 1
    for i, a in enumerate(DRAWN_KINDS):
        for b in DRAWN_KINDS[i + 1:]:
            if b in NEW_GROUPED_KINDS:
                assert result.coverage[f"pair {a}+{b}"] >= 2  # both orders of the kind-pair shapes


def test_a_merged_bucket_lists_each_specs_layers_in_model_order_one_spec_after_the_other(vllm_adapter):
    """Seeds 1, 4 and 7 of the false-positive grid, reduced: full F0, R-SWA R1, F2, F3, sliding
    S4, S5. The R-SWA layer merges into full attention's bucket after its layers, (F0 F2 F3 R1),
    dealt out to two groups of two: vLLM and the reference agree on (F0 F3) and (F2 R1). Only the
    layers of one spec keep model order, and swapping two of them breaks the property."""
    full, sliding = exemplar(Kind.FULL), exemplar(Kind.SLIDING_WINDOW)
    model = _model(full, RSWA_64, full, full, sliding, sliding)
    assert conformance_failures(vllm_adapter, model) == []
    grouping = expected_grouping(model.layers, model.spec_decode, hybrid_manager=True)
    assert [g.layer_names for g in grouping.groups][:2] == [
        ("model.layers.0", "model.layers.3"), ("model.layers.2", "model.layers.1")]
    assert layers_of_one_spec_keep_model_order(model, grouping) == []
    swapped = replace(grouping.groups[0], layer_names=("model.layers.3", "model.layers.0"))
    broken = replace(grouping, groups=(swapped, *grouping.groups[1:]))
    assert layers_of_one_spec_keep_model_order(model, broken)
