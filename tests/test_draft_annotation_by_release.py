"""How each release marks the drafter's group and warns when it can mark none
(spec/draft_annotation.py), on hand-checked models and no vLLM: 0.33 and later by the specs'
draft flag on every path, 0.32 by the last registered layer under MTP on the unified-page path
only, with its wider warning gate and DFlash's block drop. The gate compares the same rules with
real vLLM on every release (`make matrix`)."""

from dataclasses import replace

import pytest

from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Grouping
from kvspec.spec.grouping_properties import Model, property_violations
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode, block_drop_in_effect
from kvspec.spec.releases import rules_of

NEWER, OLDER = rules_of("0.34.0"), rules_of("0.32.0")
FULL = LayerSpec(Kind.FULL, 16)
DRAFT_FULL = LayerSpec(Kind.FULL, 16, is_draft=True)
MAMBA = LayerSpec(Kind.MAMBA, 16, state_bytes=8192)
WARNING = "could be identified as the draft model's"


def grouped(layers, spec_decode, rules) -> Grouping:
    result = expected_grouping(layers, spec_decode, rules=rules)
    assert isinstance(result, Grouping), result
    assert property_violations(Model(layers, spec_decode, rules=rules), result) == []
    return result


def flags(grouping) -> list[tuple[tuple[str, ...], bool]]:
    return [(g.layer_names, g.is_eagle_group) for g in grouping.groups]


def warned(grouping) -> bool:
    return any(WARNING in w for w in grouping.warnings)


# A hybrid whose draft layer registers last, as an MTP drafter's does.
HYBRID = {"m.0": FULL, "m.1": MAMBA, "m.2": DRAFT_FULL}


def test_with_the_draft_flag_the_flagged_layer_s_group_is_the_drafter_s():
    g = grouped(HYBRID, SpecDecode("mtp"), NEWER)
    assert flags(g) == [(("m.0",), False), (("m.2",), True), (("m.1",), False)]


def test_without_the_flag_mtp_s_drafter_is_the_group_of_the_last_registered_layer():
    untagged = {name: replace(layer, is_draft=False) for name, layer in HYBRID.items()}
    reordered = {"m.2": FULL, "m.0": FULL, "m.1": MAMBA}  # Mamba last: its group is marked
    assert flags(grouped(untagged, SpecDecode("mtp"), OLDER)) == [(("m.0",), False), (("m.2",), True), (("m.1",), False)]
    assert flags(grouped(reordered, SpecDecode("mtp"), OLDER)) == [(("m.2",), False), (("m.0",), False), (("m.1",), True)]


def test_without_the_flag_an_eagle_drafter_is_never_found_and_its_mamba_model_warns():
    g = grouped(HYBRID, SpecDecode("eagle"), OLDER)
    assert not any(flag for _, flag in flags(g))
    assert warned(g)
    assert not warned(grouped(HYBRID, SpecDecode("eagle"), NEWER))  # found by its flag there


def test_without_the_flag_a_one_spec_model_is_never_marked():
    layers = {"a.0": FULL, "a.1": DRAFT_FULL}
    assert flags(grouped(layers, SpecDecode("mtp"), OLDER)) == [(("a.0", "a.1"), False)]
    assert flags(grouped(layers, SpecDecode("mtp"), NEWER)) == [(("a.0", "a.1"), True)]


def test_the_older_warning_ignores_a_disabled_drop_but_not_the_path():
    disabled = SpecDecode("eagle", disable_eagle_block_drop=True)
    assert warned(grouped(HYBRID, disabled, OLDER))
    assert not warned(grouped(HYBRID, disabled, NEWER))
    mamba_only = {"m.0": MAMBA, "m.1": MAMBA}  # one spec: that path never warned before 0.33
    assert not warned(grouped(mamba_only, SpecDecode("eagle"), OLDER))
    assert warned(grouped(mamba_only, SpecDecode("eagle"), NEWER))


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_dflash_and_dspark_drop_only_where_the_release_says_they_need_it(method):
    assert block_drop_in_effect(SpecDecode(method), OLDER)
    assert not block_drop_in_effect(SpecDecode(method), NEWER)
    untagged = {"m.0": FULL, "m.1": MAMBA, "m.2": FULL}
    assert not any(flag for _, flag in flags(grouped(untagged, SpecDecode(method), OLDER)))  # not MTP


def test_the_annotation_property_holds_each_release_to_its_own_rule():
    newer = grouped(HYBRID, SpecDecode("mtp"), NEWER)
    as_older = Model(HYBRID, SpecDecode("mtp"), rules=OLDER)
    untagged_older = grouped({n: replace(layer, is_draft=False) for n, layer in HYBRID.items()}, SpecDecode("mtp"), OLDER)
    assert flags(newer) == flags(untagged_older)  # here both rules find the same group
    moved = replace(newer, groups=(replace(newer.groups[0], is_eagle_group=True),
                                   replace(newer.groups[1], is_eagle_group=False), newer.groups[2]))
    assert any(v.startswith("annotated_where_the_release_finds_the_drafter") for v in property_violations(as_older, moved))
