"""The write side of the prefix cache: spec/caching.py's rules on hand-worked examples (each
worked from the vLLM code the rule names), reference/published.py's prediction of one request's
table, and the stateful check's write judge (kvspec/stateful/writes.py) on real vLLM: it holds
on clean vLLM and fails on each write-side bug of the zoo."""

import pytest

from kvspec.gate.options import GateOptions
from kvspec.gate.stateful import check_stateful_manager
from kvspec.impl.broken import VARIANTS, applied
from kvspec.reference.published import RequestFacts, predict
from kvspec.spec.caching import (
    cacheable_tokens,
    hashed_units,
    keeps_block,
    mamba_checkpoint_entry,
    mamba_checkpoint_position,
    partial_tail_entry,
    publishing_eagle_groups,
    reachable_boundaries,
    replay_boundaries,
    reprefillable_tokens,
    skipped_tokens,
    window_tail,
)
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import (
    EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION,
    MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP,
    MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY,
    NEWEST_RULES,
    PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN,
)
from kvspec.spec.setting import LookupSetting

FULL_32, FULL_16 = CacheGroup(Kind.FULL, 32), CacheGroup(Kind.FULL, 16)
WINDOW = CacheGroup(Kind.SLIDING_WINDOW, 8, window=9)  # a hit needs one block of 8
MAMBA_16 = CacheGroup(Kind.MAMBA, 16)


def setting(*groups, unit=None, eagle=False):
    return LookupSetting(tuple(groups), unit or min(g.block_size for g in groups), eagle)


# ----------------------------------------------------------------------------- what is cacheable
def test_one_group_publishes_everything_computed():
    assert cacheable_tokens(setting(FULL_16), 0, 37) == 37


def test_a_hybrid_publishes_down_to_the_scheduler_block():
    hybrid = setting(FULL_32, WINDOW)  # scheduler block 32, hash unit 8, no partial hits
    assert cacheable_tokens(hybrid, 0, 63) == 32
    assert cacheable_tokens(hybrid, 1, 63) == 32


def test_an_eagle_group_publishes_its_peek_block_past_the_aligned_prefix():
    hybrid = setting(FULL_32, WINDOW, eagle=True)  # unannotated: every group drops
    assert publishing_eagle_groups(hybrid) == {0, 1}
    assert cacheable_tokens(hybrid, 0, 63) == 63  # min(63, 32 + 32)
    assert cacheable_tokens(hybrid, 1, 63) == 40  # min(63, 32 + 8)
    assert cacheable_tokens(hybrid, 1, 31) == 0  # nothing aligned yet, so no peek block


def test_multi_module_mtp_re_prefills_all_but_one_token_of_its_lookahead():
    assert [reprefillable_tokens(k) for k in (0, 1, 2, 3)] == [0, 0, 1, 2]


def test_one_group_holds_the_re_prefillable_tail_back():
    one = setting(FULL_16)
    assert cacheable_tokens(one, 0, 37, prefill_lookahead=3) == 35
    assert cacheable_tokens(one, 0, 37, prefill_lookahead=1) == 37  # an eagle-family drafter
    assert cacheable_tokens(one, 0, 1, prefill_lookahead=3) == 0  # never below nothing


def test_a_hybrid_holds_the_tail_back_only_in_its_eagle_groups():
    plain = setting(FULL_32, WINDOW)  # no group drops: the aligned computed tokens, tail and all
    assert cacheable_tokens(plain, 0, 33, prefill_lookahead=3) == 32
    eagle = setting(FULL_32, WINDOW, eagle=True)
    assert cacheable_tokens(eagle, 0, 63, prefill_lookahead=3) == 61  # min(61, 32 + 32)
    assert cacheable_tokens(eagle, 1, 63, prefill_lookahead=3) == 40  # min(61, 32 + 8)
    # The peek block sits past the finalized tokens' boundary (32), not the computed ones' (64).
    assert cacheable_tokens(eagle, 1, 65, prefill_lookahead=3) == 40
    # 33 computed open the branch (32 aligned); 31 finalized align to 0, so one block of 8.
    assert cacheable_tokens(eagle, 1, 33, prefill_lookahead=3) == 8
    assert cacheable_tokens(eagle, 0, 33, prefill_lookahead=3) == 31


def test_an_annotated_group_shares_its_eagle_bit_with_its_spec_group():
    annotated = CacheGroup(Kind.FULL, 16, is_eagle_group=True)
    groups = (annotated, FULL_16, CacheGroup(Kind.SLIDING_WINDOW, 16, window=17))
    assert publishing_eagle_groups(setting(*groups, eagle=True)) == {0, 1}


# ----------------------------------------------------------------------------- where replays resume
def test_replay_boundaries_without_and_with_eagle():
    assert replay_boundaries(setting(FULL_32, WINDOW), 70) == (69,)
    # resend (69 // 32 * 32 = 64) and extension (70 // 32 * 32 = 64), a block below each
    assert replay_boundaries(setting(FULL_32, WINDOW, eagle=True), 70) == (32,)
    assert replay_boundaries(setting(FULL_32, WINDOW, eagle=True), 64) == (0, 32)


def test_the_junction_and_the_block_below_it_for_an_eagle_group():
    eagle = setting(FULL_32, WINDOW, eagle=True)
    assert reachable_boundaries(eagle, 1, 70, 48) == (32, 48, 40)
    assert reachable_boundaries(eagle, 1, 70, 48, NEWEST_RULES - {EAGLE_KEEPS_THE_TAIL_BELOW_THE_JUNCTION}) == (32, 48)
    assert reachable_boundaries(eagle, 1, 70, 0) == (32,)


# ----------------------------------------------------------------------------- which blocks are kept
def test_a_window_keeps_the_tail_before_each_aligned_boundary():
    hybrid = setting(FULL_32, WINDOW)  # 4 window blocks a segment, a hit reads the last one
    assert [c for c in range(12) if keeps_block(hybrid, 1, c, None, ())] == [3, 7, 11]
    assert window_tail(WINDOW, 32, eagle=False) == range(3, 4)


def test_an_eagle_window_keeps_its_peek_block_too():
    hybrid = setting(FULL_32, WINDOW, eagle=True)  # two blocks, ending one past the boundary
    assert [c for c in range(12) if keeps_block(hybrid, 1, c, None, ())] == [3, 4, 7, 8, 11]
    assert window_tail(WINDOW, 32, eagle=True) == range(3, 5)


def test_a_window_that_spans_its_segment_keeps_every_block():
    wide = CacheGroup(Kind.SLIDING_WINDOW, 8, window=40)  # needs 5 blocks of a 4-block segment
    assert all(keeps_block(setting(FULL_32, wide), 1, c, None, ()) for c in range(12))


def test_retention_zero_keeps_only_the_reachable_boundaries():
    hybrid = setting(FULL_32, WINDOW)
    assert [c for c in range(12) if keeps_block(hybrid, 1, c, 0, (69,))] == [7]  # 69 -> 64: block 7
    # A retention interval of 64 tokens: every 64-token segment's tail, and the boundary's.
    assert [c for c in range(12) if keeps_block(hybrid, 1, c, 64, (40,))] == [3, 7]


def test_full_attention_keeps_every_block_whatever_the_retention():
    assert all(keeps_block(setting(FULL_32, WINDOW), 0, c, 0, ()) for c in range(6))


def test_mamba_keeps_every_state_dense_and_one_per_segment_sparse():
    hybrid = setting(FULL_16, MAMBA_16)
    assert all(keeps_block(hybrid, 1, c, None, ()) for c in range(6))
    assert [c for c in range(8) if keeps_block(hybrid, 1, c, 64, ())] == [3, 7]
    assert [c for c in range(8) if keeps_block(hybrid, 1, c, 0, (50,))] == [2]  # 50 -> 48: the state at 48


# ----------------------------------------------------------------------------- partial entries
def test_full_attention_publishes_the_last_boundary_a_resend_can_hit():
    fine = setting(FULL_32, MAMBA_16, unit=8)
    # prompt 53: a resend hits at most 52 tokens, the last boundary of 8 below is 48 (inside block 1)
    assert partial_tail_entry(fine, 0, 53, 6, 53) == (1, 5)
    assert partial_tail_entry(fine, 0, 53, 6, 47) is None  # not yet published
    assert partial_tail_entry(fine, 0, 65, 8, 65) is None  # 64 ends a block: its full key serves
    # 0.30: the whole prompt's last boundary, which a resend of 56 tokens cannot hit
    assert partial_tail_entry(fine, 0, 56, 7, 56) == (1, 5)
    assert partial_tail_entry(fine, 0, 56, 7, 56, NEWEST_RULES - {PARTIAL_TAIL_LEAVES_THE_LOGITS_TOKEN}) == (1, 6)


def test_the_mamba_checkpoint_is_published_when_a_step_ends_on_it():
    fine = setting(FULL_16, MAMBA_16, unit=4)
    assert mamba_checkpoint_position(fine, 1, 23, 0) == 20
    eagle = setting(CacheGroup(Kind.FULL, 16, is_eagle_group=True), MAMBA_16, unit=4, eagle=True)
    assert mamba_checkpoint_position(eagle, 1, 23, 0) == 16
    # 0.30: only under the Mamba group's own drop, and the annotated full group holds it.
    oldest = NEWEST_RULES - {MAMBA_CHECKPOINT_FOLLOWS_THE_ENGINES_DROP, MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY}
    assert mamba_checkpoint_position(eagle, 1, 23, 0, oldest) == 20
    assert mamba_checkpoint_entry(fine, 1, 23, 0, (16, 20)) == (1, 4)
    assert mamba_checkpoint_entry(fine, 1, 23, 0, (16, 22)) is None
    # At a block end only from 0.32 on.
    assert mamba_checkpoint_entry(fine, 1, 17, 0, (16,)) == (0, 3)
    assert mamba_checkpoint_entry(fine, 1, 17, 0, (16,), NEWEST_RULES - {MAMBA_CHECKPOINT_PUBLISHED_AT_ANY_BOUNDARY}) is None


def test_lookahead_hashes_wait_for_the_tokens_after_their_unit():
    assert hashed_units(33, 16, 0) == 2
    assert hashed_units(33, 16, 1) == 2 and hashed_units(32, 16, 1) == 1


def test_the_blocks_a_window_and_a_chunk_free():
    assert skipped_tokens(WINDOW, 20) == 12
    assert skipped_tokens(CacheGroup(Kind.CHUNKED_LOCAL, 8, chunk=16), 20) == 16
    assert skipped_tokens(FULL_16, 1000) == 0
    # Under multi-module MTP (3 modules) a window keeps the re-prefillable tail's 2 tokens too.
    assert skipped_tokens(WINDOW, 20, prefill_lookahead=3) == 10
    assert skipped_tokens(CacheGroup(Kind.CHUNKED_LOCAL, 8, chunk=16), 20, prefill_lookahead=3) == 16


# ----------------------------------------------------------------------------- the prediction
def test_the_prediction_of_a_window_table_after_a_hit():
    hybrid = setting(FULL_32, WINDOW)
    facts = RequestFacts(num_prompt_tokens=80, num_hashes=10, num_computed=70, hit=32, freed_at=64,
                         shared_prefix_boundary=0)
    window = predict(hybrid, 1, facts, 9, frozenset(range(7)), None, NEWEST_RULES)
    assert window.null_columns == 7  # (64 - 9 + 1) // 8 columns freed before the last step
    assert window.columns[7].hash_indices == {7} and not window.columns[7].at_least
    assert window.columns[8].hash_indices == set()  # past the published 64 tokens
    full = predict(hybrid, 0, facts, 3, frozenset(), None, NEWEST_RULES)
    assert full.columns[0].at_least and full.columns[0].hash_indices == {3}  # the hit's block
    assert full.columns[1].hash_indices == {7} and full.columns[2].hash_indices == set()


def test_a_hits_null_placeholders_stay_null_within_a_retained_tail():
    hybrid = setting(FULL_32, WINDOW)
    facts = RequestFacts(num_prompt_tokens=80, num_hashes=10, num_computed=40, hit=32, freed_at=32,
                         shared_prefix_boundary=0, prefill_lookahead=3)
    # The window frees (32 - 9 + 1 - 2) // 8 = 2 columns, but the hit's placeholders were the
    # 3 columns before its window at 32 (find_longest_cache_hit).
    assert predict(hybrid, 1, facts, 5, frozenset(range(3)), None, NEWEST_RULES).null_columns == 3
    later = RequestFacts(num_prompt_tokens=80, num_hashes=10, num_computed=50, hit=32, freed_at=42,
                         shared_prefix_boundary=0, prefill_lookahead=3)
    assert predict(hybrid, 1, later, 7, frozenset(range(4)), None, NEWEST_RULES).null_columns == 4  # 32 // 8


# ----------------------------------------------------------------------------- on real vLLM
def test_the_write_judge_holds_on_clean_vllm_and_publishes_every_kind(vllm_adapter):
    row = check_stateful_manager(vllm_adapter, GateOptions(scale=0.2))
    assert row.holds, row.details
    for kind in ("full", "sliding_window", "chunked_local", "mamba"):
        assert row.coverage[f"blocks published, {kind}"] > 0, kind


WRITE_SIDE = [name for name, variant in VARIANTS.items() if "write-side" in variant.upstream]


def test_the_zoo_has_the_write_side_bugs():
    assert set(WRITE_SIDE) >= {"window-keeps-one-block-too-few", "mamba-state-cached-one-block-late",
                               "last-full-block-never-cached"}


@pytest.mark.parametrize("variant", WRITE_SIDE)
def test_each_write_side_bug_fails_the_write_judge(vllm_adapter, variant):
    with applied(vllm_adapter, [variant]):
        row = check_stateful_manager(vllm_adapter, GateOptions())
    assert not row.holds
    # The write judge's message (kvspec/stateful/writes.py), not a read or pool check's.
    assert any("spec/caching.py" in line for line in row.details), row.details[:3]
