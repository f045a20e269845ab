"""Real vLLM's KV-cache grouping against the reference (reference/grouping.py), on model shapes
drawn by Hypothesis and on the shapes of real hybrid models; and proof that the comparison
bites: vLLM mutated in the warning gate or the group-size rule fails it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, event, example, find, given, settings
from hypothesis.errors import NoSuchExample

from kvspec.draws.models import models
from kvspec.draws.real_models import (
    DEEPSEEK_V3,
    GEMMA3,
    GPT_OSS_EAGLE,
    JAMBA,
    LLAMA4,
    MLA_WITH_SLIDING_DRAFT,
    QWEN3_NEXT,
    REAL_MODELS,
)
from kvspec.gate.grouping import assert_conforms, check_grouping, conformance_failures, vllm_grouping
from kvspec.gate.options import GateOptions
from kvspec.gate.release_findings import recorded_departure
from kvspec.impl.broken import applied
from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Refusal, format_of, grouping_route
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode


@settings(derandomize=True, max_examples=300, deadline=None)
@given(model=models())
@example(model=QWEN3_NEXT)
@example(model=GEMMA3)
@example(model=DEEPSEEK_V3)
@example(model=JAMBA)
@example(model=GPT_OSS_EAGLE)
@example(model=LLAMA4)
@example(model=MLA_WITH_SLIDING_DRAFT)
@example(model=replace(GEMMA3, hybrid_manager=False))
@example(model=replace(JAMBA, hybrid_manager=False))
def test_vllm_groups_as_the_reference_predicts(vllm_adapter, model):
    # A release with the recorded promotion crash (release-findings.toml) raises it, and only it.
    problems = conformance_failures(vllm_adapter, model)
    assume(recorded_departure(vllm_adapter.version, "grouping", problems) is None)
    assert_conforms(vllm_adapter, model)
    expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager)
    # What the draws reached, for --hypothesis-show-statistics.
    if model.hybrid_manager:
        route = grouping_route({name: format_of(layer) for name, layer in model.layers.items()})
        event(f"route: {route.error.__name__ if isinstance(route, Refusal) else route.value}")
    if isinstance(expected, Refusal):
        event(f"refused with {expected.error.__name__}")
    else:
        event("one group" if len(expected.groups) == 1 else "several groups")
        event(f"warnings: {sorted({w.split(' ')[0] for w in expected.warnings})}")
        event(f"annotated groups: {sum(g.is_eagle_group for g in expected.groups)}")


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_model_shapes_group_as_expected(vllm_adapter, name):
    """The real shapes above, with the facts a reader would check by hand."""
    model = REAL_MODELS[name]
    assert_conforms(vllm_adapter, model)
    grouping = vllm_grouping(vllm_adapter, model)
    sizes = [len(g.layer_names) for g in grouping.groups]
    annotated = [g.is_eagle_group for g in grouping.groups]
    expected_sizes, expected_annotated, warns = {
        "qwen3-next": ([12] * 3 + [13], [False] * 3 + [True], False),
        "gemma3": ([9] * 4 + [8] * 2 + [10], [False] * 7, False),
        "deepseek-v3": ([62], [True], False),
        "jamba": ([4] * 8, [False] * 8, True),
        "gpt-oss": ([12, 13], [False, True], False),
        "llama4": ([12] * 4, [False] * 4, False),
        "mla-sliding-draft": ([62], [True], False),
        "whisper-like": ([32, 32], [False, False], False),
        "pangu-sinks-like": ([32], [False], False),
        "ocr-rswa-like": ([12], [False], False),
        "glm5-ring-like": ([24, 24], [False, False], False),
    }[name]
    warned = any("identified as the draft model's" in w for w in grouping.warnings)
    assert (sizes, annotated, warned) == (expected_sizes, expected_annotated, warns)


# vLLM's own test_unidentifiable_draft_without_mamba_does_not_warn: two MLA layers, no tag.
UNTAGGED_MLA = Model({f"a.{i}": LayerSpec(Kind.MLA, 64, head_size=576) for i in range(2)}, SpecDecode("mtp"))
# each broken variant of impl/broken.py that the grouping check must catch, with a shape exposing it
EXPOSED_BY = {
    "warning-without-mamba-gate": UNTAGGED_MLA,
    "warning-silent-with-mamba": JAMBA,
    "group-size-always-smallest": GPT_OSS_EAGLE,
}


@pytest.mark.parametrize("variant", EXPOSED_BY)
def test_the_comparison_fails_on_broken_vllm(vllm_adapter, variant):
    exposing_model = EXPOSED_BY[variant]
    assert_conforms(vllm_adapter, exposing_model)  # unbroken vLLM passes on the same shape
    with applied(vllm_adapter, [variant]):
        assert conformance_failures(vllm_adapter, exposing_model)
        try:
            minimal = find(
                models(),
                lambda model: bool(conformance_failures(vllm_adapter, model)),
                settings=settings(derandomize=True, max_examples=300, deadline=None, database=None),
            )
        except NoSuchExample:
            pytest.fail(f"Hypothesis found no shape on which {variant} departs from the reference")
        print(f"\n{variant}: minimal failing shape {minimal}")
        print("\n".join(v.detail for v in conformance_failures(vllm_adapter, minimal)))


def test_the_gate_check_fails_on_broken_vllm_and_prints_the_shape(vllm_adapter):
    with applied(vllm_adapter, ["group-size-always-smallest"]):
        result = check_grouping(vllm_adapter, GateOptions())
    assert not result.holds
    assert any("Failing test case" in line for line in result.details), result.details
    assert any("model.layers.0" in line for line in result.details)  # the minimal shape is printed
