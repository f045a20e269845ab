"""The grouping reference on hand-checked examples (no vLLM): the strided splits asserted in
vLLM's test_get_kv_cache_config_one_worker (docs/vllm-rules.md §2.3), page-size unification,
the hybrid-manager-off promotion, the EAGLE annotation and the unannotated-EAGLE warning."""

from dataclasses import replace

import pytest

from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Group, Grouping, Refusal, Route, format_of, group_size, grouping_route
from kvspec.spec.grouping_properties import Model, property_violations
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode


def full(block_size=16, **kw):
    return LayerSpec(Kind.FULL, block_size, **kw)


def sliding(block_size=16, window=128, **kw):
    return LayerSpec(Kind.SLIDING_WINDOW, block_size, window=window, **kw)


def mla(block_size=16, **kw):
    return LayerSpec(Kind.MLA, block_size, **kw)


def mamba(block_size=16, state_bytes=8192, **kw):
    return LayerSpec(Kind.MAMBA, block_size, state_bytes=state_bytes, **kw)


def model(*runs):
    """Layers named by kind letter and 1-based position, e.g. F1 F2 S3: runs of (letter, layer)."""
    layers, position = {}, 0
    for letter, layer, count in runs:
        for _ in range(count):
            position += 1
            layers[f"{letter}{position}"] = layer
    return layers


def grouped(layers, spec_decode=SpecDecode(), hybrid_manager=True) -> Grouping:
    result = expected_grouping(layers, spec_decode, hybrid_manager=hybrid_manager)
    assert isinstance(result, Grouping), result
    assert property_violations(Model(layers, spec_decode, hybrid_manager), result) == []
    return result


def names(grouping):
    return [list(g.layer_names) for g in grouping.groups]


UNANNOTATED = "Speculative decoding (method={}) is enabled but no KV cache group could be identified as the draft model's."


# ----------------------------------------------------------------------------- §2.3 examples


def test_two_full_four_sliding_split_into_three_groups_of_two():
    g = grouped(model(("F", full(), 2), ("S", sliding(), 4)))
    assert names(g) == [["F1", "F2"], ["S3", "S5"], ["S4", "S6"]]
    assert g.warnings == ()
    assert [grp.spec_class for grp in g.groups] == ["FullAttentionSpec", "SlidingWindowSpec", "SlidingWindowSpec"]


def test_three_full_seven_sliding_pads_the_sliding_bucket():
    g = grouped(model(("F", full(), 3), ("S", sliding(), 7)))
    assert names(g) == [["F1", "F2", "F3"], ["S4", "S7", "S10"], ["S5", "S8"], ["S6", "S9"]]
    assert g.warnings == ("Add 2 padding layers, may waste at most 28.57% KV cache memory",)


def test_six_full_five_sliding_use_the_larger_bucket_as_group_size():
    g = grouped(model(("F", full(), 6), ("S", sliding(), 5)))
    assert names(g) == [["F1", "F2", "F3", "F4", "F5", "F6"], ["S7", "S8", "S9", "S10", "S11"]]
    assert g.warnings == ("Add 1 padding layers, may waste at most 20.00% KV cache memory",)


@pytest.mark.parametrize(
    ("sizes", "expected"), [([2, 4], 2), ([3, 7], 3), ([6, 5], 6), ([12, 13], 13), ([2, 3], 2), ([4, 5], 5), ([7], 7)]
)
def test_group_size_is_the_smallest_bucket_unless_the_largest_is_under_one_and_a_half_times_it(sizes, expected):
    assert group_size(sizes) == expected


# ----------------------------------------------------------------------------- the ladder


def test_one_spec_is_one_group_and_the_draft_tag_does_not_split_it():
    layers = {**model(("F", full(), 3)), "draft": full(is_draft=True)}
    g = grouped(layers, SpecDecode("eagle"))
    assert g.groups == (Group(tuple(layers), "FullAttentionSpec", (Kind.FULL,), 16, 4096, True),)


def test_full_and_mla_of_one_block_size_are_one_uniform_type_group():
    g = grouped({"F1": full(head_size=128), "A2": mla(head_size=576)})
    assert g.groups == (Group(("F1", "A2"), "UniformTypeKVCacheSpecs", (Kind.FULL, Kind.MLA), 16, 8192 + 18432, False),)


def test_a_page_that_divides_the_largest_grows_its_block_size():
    g = grouped({"F1": full(head_size=128), "S2": sliding(head_size=64)})
    assert [(grp.block_size, grp.page_size_bytes) for grp in g.groups] == [(16, 8192), (32, 8192)]


def test_mamba_and_a_non_dividing_attention_page_are_padded():
    layers = {"F1": full(head_size=96), "S2": sliding(head_size=64), "M3": mamba(state_bytes=5000)}
    g = grouped(layers)
    # full 6144 is the largest page; sliding 4096 does not divide it, so it is padded
    assert [(grp.block_size, grp.page_size_bytes) for grp in g.groups] == [(16, 6144)] * 3


def test_an_mla_page_that_cannot_reach_the_largest_is_refused():
    layers = {"A1": mla(head_size=576), "F2": full(head_size=100, block_size=64)}
    assert expected_grouping(layers) == Refusal(NotImplementedError, "A1: MLA page 18432 cannot reach page 25600")


def test_mla_with_sliding_window_falls_back_to_one_full_allocation_group():
    layers = {"A1": mla(head_size=576), "S2": sliding(head_size=100, block_size=64)}
    g = grouped(layers)
    assert g.groups == (Group(("A1", "S2"), "UniformTypeKVCacheSpecs", (Kind.MLA, Kind.FULL), 16, 18432 + 6400, False),)
    assert g.warnings[0].startswith("KV cache page sizes cannot be unified")


@pytest.mark.parametrize(
    ("layers", "route"),
    [
        ({}, Route.NO_LAYERS),
        ({"F1": full(), "F2": full(is_draft=True)}, Route.ONE_SPEC),
        ({"F1": full(), "A2": mla()}, Route.ONE_UNIFORM_TYPE),
        ({"F1": full(), "M2": mamba()}, Route.SPLIT_BUCKETS),
        ({"A1": mla(head_size=576), "S2": sliding(head_size=100, block_size=64)}, Route.FULL_ALLOCATION),
        ({"A1": mla(head_size=576), "F2": full(head_size=100, block_size=64)}, Refusal),
    ],
    ids=lambda v: v.name if isinstance(v, Route) else "",
)
def test_each_rung_of_the_ladder(layers, route):
    got = grouping_route({name: format_of(layer) for name, layer in layers.items()})
    assert got == route or (route is Refusal and isinstance(got, Refusal))


# ----------------------------------------------------------------------------- hybrid manager off


def test_without_the_hybrid_manager_sliding_layers_join_full_attention():
    layers = model(("F", full(), 2), ("S", sliding(block_size=32), 4))
    g = grouped(layers, hybrid_manager=False)
    assert g.groups == (Group(tuple(layers), "FullAttentionSpec", (Kind.FULL,), 16, 4096, False),)
    assert g.warnings[0].startswith("Hybrid KV cache manager is disabled")


@pytest.mark.parametrize(
    "layers",
    [
        {"F1": full(), "M2": mamba()},
        {"F1": full(), "S2": sliding(window=64), "S3": sliding(window=128)},
        {"S1": sliding(window=64), "S2": sliding(window=128)},
        {"F1": full(), "F2": full(block_size=32)},
    ],
    ids=["mamba", "two-windows", "no-full", "two-block-sizes"],
)
def test_without_the_hybrid_manager_a_model_that_cannot_be_one_type_is_refused(layers):
    result = expected_grouping(layers, hybrid_manager=False)
    assert isinstance(result, Refusal) and result.error is ValueError
    assert isinstance(expected_grouping(layers, hybrid_manager=True), Grouping)


# ----------------------------------------------------------------------------- EAGLE


def qwen_next_like(draft_tagged: bool):
    layers = {}
    for i in range(8):
        layers[f"layers.{i}"] = full(head_size=256) if i % 4 == 3 else mamba(state_bytes=16384)
    layers["mtp.0"] = full(head_size=256, is_draft=draft_tagged)
    return layers


def test_the_group_holding_the_draft_layer_is_annotated():
    g = grouped(qwen_next_like(draft_tagged=True), SpecDecode("mtp"))
    # six Mamba layers in two groups of three, then the two full layers with the MTP layer
    assert names(g)[-1] == ["layers.3", "layers.7", "mtp.0"]
    assert [grp.is_eagle_group for grp in g.groups] == [False, False, True]
    assert g.warnings == ()


def test_an_untagged_draft_next_to_mamba_warns():
    g = grouped(qwen_next_like(draft_tagged=False), SpecDecode("eagle"))
    assert not any(grp.is_eagle_group for grp in g.groups)
    assert g.warnings == (UNANNOTATED.format("eagle"),)


def test_an_untagged_draft_without_mamba_stays_silent():
    g = grouped({"A1": mla(head_size=576), "A2": mla(head_size=576)}, SpecDecode("mtp"))
    assert g.warnings == () and not g.groups[0].is_eagle_group


@pytest.mark.parametrize(
    "spec_decode",
    [SpecDecode(), SpecDecode("ngram"), SpecDecode("dflash"), SpecDecode("dspark"), SpecDecode("eagle3", disable_eagle_block_drop=True)],
    ids=str,
)
def test_without_the_block_drop_nothing_is_annotated_and_nothing_warns(spec_decode):
    for tagged in (True, False):
        g = grouped(qwen_next_like(tagged), spec_decode)
        assert not any(grp.is_eagle_group for grp in g.groups)
        assert g.warnings == ()


def test_promoted_draft_layers_keep_their_tag():
    layers = {"F1": full(), "S2": sliding(is_draft=True)}
    g = grouped(layers, SpecDecode("eagle"), hybrid_manager=False)
    assert [grp.is_eagle_group for grp in g.groups] == [True]


# ----------------------------------------------------------------------------- the properties bite


def test_properties_reject_a_broken_grouping():
    layers = model(("F", full(), 2), ("S", sliding(), 4))
    good = grouped(layers, SpecDecode("eagle"))
    lost_layer = replace(good, groups=(replace(good.groups[0], layer_names=("F1",)), *good.groups[1:]))
    too_big = replace(good, groups=(good.groups[0], replace(good.groups[1], layer_names=("S3", "S4", "S5", "S6"))))
    false_flag = replace(good, groups=(replace(good.groups[0], is_eagle_group=True), *good.groups[1:]))
    stray_warning = replace(good, warnings=(UNANNOTATED.format("eagle"),))
    spec_decode = SpecDecode("eagle")
    for broken, prop in [
        (lost_layer, "every_layer_in_exactly_one_group"),
        (too_big, "no_group_exceeds_the_group_size"),
        (false_flag, "annotated_where_the_release_finds_the_drafter"),
        (stray_warning, "warns_iff_unannotated_eagle_meets_mamba"),
    ]:
        assert any(v.startswith(prop) for v in property_violations(Model(layers, spec_decode), broken)), prop
