"""The spec's shared rules agree with every restatement of them: the Z3 encoding of the drafter
groups with spec/drafter.py on every small case, the resolution rules of a DcpSetting at one
rank with a LookupSetting's, one page-size formula for layers and formats, and the release
rules with the releases kvspec supports."""

from __future__ import annotations

import dataclasses
import pickle
from itertools import product

import pytest
import z3

from kvspec.draws.codec import encode
from kvspec.impl.target import supported_versions
from kvspec.proofs.encoding import drops, scenario
from kvspec.spec.caching import publishing_eagle_groups
from kvspec.spec.dcp import DcpSetting
from kvspec.spec.drafter import DrafterPolicy, drafter_groups, drafter_kv_groups
from kvspec.spec.grouping import format_of, format_page_bytes
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, page_size_bytes
from kvspec.spec.releases import READ_RELEASES, RELEASE_RULES, ReleaseRule, rules_of
from kvspec.spec.resolution import cache_hit_alignment, partial_hash_hits_enabled, scheduler_block_size
from kvspec.spec.setting import LookupSetting


@pytest.mark.parametrize("policy", list(DrafterPolicy))
def test_the_z3_drafter_groups_are_the_spec_s_on_every_small_case(policy):
    for num_groups in (1, 2, 3):
        sc = scenario("d", num_groups, 1)
        for eagle, annotated in product((False, True), product((False, True), repeat=num_groups)):
            pinned = [(sc.eagle, z3.BoolVal(eagle))] + [
                (g.annotated, z3.BoolVal(a)) for g, a in zip(sc.groups, annotated)
            ]
            by_z3 = {i for i, g in enumerate(sc.groups) if z3.is_true(z3.simplify(z3.substitute(drops(sc, g, policy), *pinned)))}
            groups = tuple(CacheGroup(Kind.FULL, 16, is_eagle_group=a) for a in annotated)
            assert by_z3 == drafter_groups(groups, eagle, policy), (policy, eagle, annotated)


def test_mamba_is_flagged_by_the_core_but_never_owes_the_drafter_s_proof():
    groups = (CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16))
    assert drafter_groups(groups, True, DrafterPolicy.CORE) == {0, 1}
    assert drafter_kv_groups(groups, True, DrafterPolicy.CORE) == {0}
    assert drafter_groups(groups, True, DrafterPolicy.OFFLOADING) == frozenset()  # vLLM #52735


def test_a_dcp_setting_at_one_rank_resolves_as_a_lookup_setting():
    kinds = (Kind.FULL, Kind.MAMBA, Kind.SLIDING_WINDOW, Kind.MLA)
    sized = list(product(kinds, (4, 8, 16)))
    for (k1, b1), (k2, b2), unit, partial in product(sized, sized, (2, 4), (False, True)):
        groups = tuple(CacheGroup(k, b, window=4 if k == Kind.SLIDING_WINDOW else None) for k, b in ((k1, b1), (k2, b2)))
        plain = LookupSetting(groups, unit, allow_partial_hash_hits=partial)
        dcp = DcpSetting(groups, unit, 1, allow_partial_hash_hits=partial)
        for rule in (scheduler_block_size, partial_hash_hits_enabled, cache_hit_alignment):
            assert rule(dcp) == rule(plain), (rule.__name__, groups, unit, partial)


def test_one_page_size_formula_for_layers_and_their_formats():
    layers = [LayerSpec(Kind.MAMBA, 16, state_bytes=4096)] + [
        LayerSpec(kind, block, num_kv_heads=heads, head_size=head, dtype_bytes=dtype,
                  window=64 if kind == Kind.SLIDING_WINDOW else None, chunk=64 if kind == Kind.CHUNKED_LOCAL else None)
        for kind, block, heads, head, dtype in product(
            (Kind.FULL, Kind.MLA, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL), (1, 16), (1, 8), (64, 576), (1, 2)
        )
    ]  # fmt: skip
    for layer in layers:
        assert format_page_bytes(format_of(layer)) == page_size_bytes(layer), layer
    assert page_size_bytes(LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=128)) == 16 * 8 * 2 * 128 * 2


def test_every_supported_release_was_read_for_every_release_rule():
    assert set(supported_versions()) <= set(READ_RELEASES)
    for rule in RELEASE_RULES:
        assert rule.source and rule.description and set(rule.holds_for) <= set(READ_RELEASES)
    with pytest.raises(ValueError):
        ReleaseRule("never read", ("0.1.0",), "nowhere", "a release kvspec never read")


def test_a_checkout_has_the_newest_release_s_rules():
    assert rules_of("0.35.0.dev3+gabc") == rules_of(READ_RELEASES[-1])
    assert all(rules_of(release) <= set(RELEASE_RULES) for release in READ_RELEASES)


def test_a_remembered_rule_answers_for_its_own_setting_only_and_leaves_the_fields_alone():
    mamba = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 64)), 16, use_eagle=True)
    before = (encode(mamba), repr(mamba), hash(mamba))
    assert (cache_hit_alignment(mamba), scheduler_block_size(mamba), publishing_eagle_groups(mamba)) == (16, 64, {0, 1})
    assert (encode(mamba), repr(mamba), hash(mamba)) == before
    assert pickle.loads(pickle.dumps(mamba)) == mamba
    # A setting made from it is asked afresh: no partial hits, so the scheduler block.
    no_partial = dataclasses.replace(mamba, allow_partial_hash_hits=False)
    assert no_partial != mamba and cache_hit_alignment(no_partial) == 64
    one_group = dataclasses.replace(mamba, groups=(CacheGroup(Kind.FULL, 16),))
    assert (scheduler_block_size(one_group), publishing_eagle_groups(one_group)) == (16, {0})
    assert cache_hit_alignment(mamba) == 16  # and the first setting still answers its own
