"""The hit-length spec (spec/hits.py) and the lookup model (reference/lookup.py) on hand-checked
cases. Pure Python: no vLLM. Each number is worked out in the comment above it."""

from __future__ import annotations

import pytest

from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.hits import blocks_read, is_safe_hit, max_safe_hit, unsafe_reason
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.resolution import (
    cache_hit_alignment,
    eagle_proof_margin,
    partial_hash_hits_enabled,
    scheduler_block_size,
)
from kvspec.spec.setting import CacheState, Hit, LookupSetting

FULL16, MAMBA16 = CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)


def dense(num_hashes: int, *group_ids: int) -> CacheState:
    return CacheState(num_hashes, frozenset((g, j) for g in group_ids for j in range(num_hashes)))


def entries(num_hashes: int, per_group: dict[int, set[int]]) -> CacheState:
    return CacheState(num_hashes, frozenset((g, j) for g, js in per_group.items() for j in js))


# ------------------------------------------------------------------------ the setting
def test_partial_hits_need_a_mamba_block_longer_than_the_hash_unit():
    mamba64 = CacheGroup(Kind.MAMBA, 64)
    assert partial_hash_hits_enabled(LookupSetting((FULL16, mamba64), 16))
    assert not partial_hash_hits_enabled(LookupSetting((FULL16, MAMBA16), 16))
    assert not partial_hash_hits_enabled(
        LookupSetting((FULL16, mamba64), 16, allow_partial_hash_hits=False)
    )
    # A window group cannot probe inside its blocks: only blocks of one hash unit keep it on.
    window16, window32 = (CacheGroup(Kind.SLIDING_WINDOW, bs, window=8) for bs in (16, 32))
    assert partial_hash_hits_enabled(LookupSetting((window16, mamba64), 16))
    assert not partial_hash_hits_enabled(LookupSetting((window32, mamba64), 16))


def test_alignment_is_the_hash_unit_with_partial_hits_else_the_lcm():
    assert cache_hit_alignment(LookupSetting((FULL16, CacheGroup(Kind.MAMBA, 64)), 16)) == 16
    groups = (CacheGroup(Kind.FULL, 48), CacheGroup(Kind.MAMBA, 32))
    setting = LookupSetting(groups, 16, allow_partial_hash_hits=False)
    assert scheduler_block_size(setting) == cache_hit_alignment(setting) == 96
    assert cache_hit_alignment(LookupSetting((CacheGroup(Kind.FULL, 32),), 32)) == 32


def test_eagle_margin_is_a_hash_unit_only_when_fine_grained():
    assert eagle_proof_margin(64, 16, fine_grained=True) == 16
    assert eagle_proof_margin(64, 16, fine_grained=False) == 64
    assert eagle_proof_margin(16, 16, fine_grained=True) == 16


def test_the_core_flags_every_group_when_none_is_annotated():
    annotated = CacheGroup(Kind.FULL, 16, is_eagle_group=True)
    core = DrafterPolicy.CORE
    assert drafter_groups((FULL16, MAMBA16), False, core) == frozenset()
    assert drafter_groups((FULL16, MAMBA16), True, core) == {0, 1}
    assert drafter_groups((MAMBA16, annotated), True, core) == {1}


# --------------------------------------------------------------------------- the seed
SEED = LookupSetting((FULL16, MAMBA16), 16, use_eagle=True)


def test_seed_hybrid_mamba_with_eagle_stops_at_the_attention_verified_48():
    # Full attention peeks to 64 (4 blocks), drops one: 48. Mamba gets no margin: state at 48.
    state = dense(4, 0, 1)
    for lookup in (coordinator_lookup, mooncake_lookup):
        assert lookup(SEED, state, 64) == Hit(48, ((True,) * 3, (False, False, True)))
    assert max_safe_hit(SEED, state, 64) == 48
    # 64 would resume Mamba past what attention verified: nothing proves token 64.
    assert "nothing proves token 64" in unsafe_reason(SEED, state, 64, 64)


def test_seed_without_eagle_reuses_all_64():
    setting = LookupSetting((FULL16, MAMBA16), 16)
    assert coordinator_lookup(setting, dense(4, 0, 1), 64).length == 64
    assert mooncake_lookup(setting, dense(4, 0, 1), 64).length == 64
    assert is_safe_hit(setting, dense(4, 0, 1), 64, 64)


def test_unitary_eagle_has_no_peek_margin_so_it_loses_two_blocks():
    # N=48 cached, M=47: the finder sees 2 blocks (32), drops one: 16. Safe would be 32.
    unitary = LookupSetting((FULL16,), 16, use_eagle=True)
    assert coordinator_lookup(unitary, dense(3, 0), 47) == Hit(16, ((True,),))
    assert max_safe_hit(unitary, dense(3, 0), 47) == 32
    # Hybrid peeks to min(47 + 16, 48) = 48, 3 blocks, drops one: 32.
    assert coordinator_lookup(SEED, dense(3, 0, 1), 47).length == 32


def test_mooncake_gives_one_merged_spec_group_no_margin():
    # Two equal full-attention groups: the core reconciles them (with margin) -> 32; Mooncake
    # sees one spec group and calls the finder directly, as the core's Unitary does -> 16.
    twins = LookupSetting((FULL16, FULL16), 16, use_eagle=True)
    assert coordinator_lookup(twins, dense(3, 0, 1), 47).length == 32
    assert mooncake_lookup(twins, dense(3, 0, 1), 47).length == 16


def test_mooncake_drops_for_an_annotated_group_even_without_eagle():
    annotated = LookupSetting((CacheGroup(Kind.FULL, 16, is_eagle_group=True), MAMBA16), 16)
    assert coordinator_lookup(annotated, dense(4, 0, 1), 64).length == 64
    assert mooncake_lookup(annotated, dense(4, 0, 1), 64).length == 48


# ----------------------------------------------------------------------- per finder
def test_fine_grained_full_attention_and_mamba():
    # FULL 64 / MAMBA 64, hash 16 (partial on). Full attention: block 0 (key 3) and a partial
    # entry at unit 5 (96 tokens); Mamba: states at units 3 (64) and 5 (96).
    setting = LookupSetting((CacheGroup(Kind.FULL, 64), CacheGroup(Kind.MAMBA, 64)), 16)
    state = entries(8, {0: {3, 5}, 1: {3, 5}})
    # Phase 1: block 0 -> 64; phase 2 probes units 6, 5: 96. Mamba's state at 96: hit 96.
    assert coordinator_lookup(setting, state, 127) == Hit(96, ((True, True), (False, True)))
    # EAGLE: peek to 128 finds 96 again, drops one unit: 80. Mamba has no state at 80 -> 64.
    eagle = LookupSetting(setting.groups, 16, use_eagle=True)
    assert coordinator_lookup(eagle, state, 127).length == 64
    assert max_safe_hit(eagle, state, 127) == 64
    assert "no state cached at exactly 80" in unsafe_reason(eagle, state, 80, 127)


def test_coarse_mamba_skips_states_off_the_lcm():
    # FULL 48 + MAMBA 32, lcm 96. Mamba states at 32 and 64 only: neither is a multiple of 96.
    groups = (CacheGroup(Kind.FULL, 48), CacheGroup(Kind.MAMBA, 32))
    state = entries(6, {0: {2, 5}, 1: {1, 3}})
    coarse = LookupSetting(groups, 16, allow_partial_hash_hits=False)
    assert coordinator_lookup(coarse, state, 96).length == 0
    # With partial hits (alignment 16) the state at 64 serves: full attention's 96 covers it.
    fine = LookupSetting(groups, 16)
    assert coordinator_lookup(fine, state, 96) == Hit(64, ((True, True), (False, True)))
    assert max_safe_hit(fine, state, 96) == 64


def test_sliding_window_reads_only_its_window_and_peeks_one_block_with_eagle():
    # W=33, blocks of 16: the window needs ceil(32/16) = 2 blocks, 3 with the EAGLE peek.
    setting = LookupSetting((FULL16, CacheGroup(Kind.SLIDING_WINDOW, 16, window=33)), 16, use_eagle=True)
    # Full attention peeks to 96, drops: 80. The window run 3..5 ends at 96, pops: 80.
    expected = Hit(80, ((True,) * 5, (False,) * 3 + (True,) * 2))
    assert coordinator_lookup(setting, dense(6, 0, 1), 95) == expected
    assert list(blocks_read(setting, 1, 80)) == [3, 4]
    # Evict the window group's block 5 (the peek at 80): the run must end at 64 instead.
    holed = entries(6, {0: set(range(6)), 1: {0, 1, 2, 3, 4}})
    assert coordinator_lookup(setting, holed, 95).length == 64
    assert "nothing proves token 80" in unsafe_reason(setting, holed, 80, 95)


def test_sliding_window_short_prompt_counts_the_run_from_block_0():
    # W=100 needs 7 blocks; only 3 exist, all cached: the whole prompt is in the window.
    setting = LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=100),), 16)
    assert coordinator_lookup(setting, dense(3, 0), 48) == Hit(48, ((True,) * 3,))


def test_sliding_window_run_must_end_on_the_alignment():
    # SW 16 (W=17, one block) + FULL 32: lcm 32. The SW block ending at 48 is skipped.
    setting = LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=17), CacheGroup(Kind.FULL, 32)), 16)
    state = entries(4, {0: {0, 1, 2}, 1: {1, 3}})
    assert coordinator_lookup(setting, state, 64) == Hit(32, ((False, True), (True,)))
    assert not is_safe_hit(setting, state, 48, 64)  # off the alignment


def test_chunked_local_nulls_blocks_before_the_chunk():
    setting = LookupSetting((CacheGroup(Kind.CHUNKED_LOCAL, 16, chunk=32),), 16)
    # M=63: the chunk starts at 32; block 2 cached, block 3 is past M: hit 48.
    assert coordinator_lookup(setting, entries(4, {0: {2}}), 63) == Hit(48, ((False, False, True),))
    # M=64 on a chunk boundary: nothing to read, 64 tokens "computed" through null blocks.
    assert coordinator_lookup(setting, CacheState(4, frozenset()), 64).length == 64
    assert max_safe_hit(setting, CacheState(4, frozenset()), 64) == 64


def test_chunk_not_a_block_multiple_needs_the_previous_block():
    # Chunk 6, blocks of 4: the token at 4 is in chunk [0, 6) and reads block 0.
    setting = LookupSetting((CacheGroup(Kind.CHUNKED_LOCAL, 4, chunk=6),), 4)
    assert list(blocks_read(setting, 0, 4)) == [0]
    assert coordinator_lookup(setting, entries(2, {0: {0}}), 7) == Hit(4, ((False,),))


# ---------------------------------------------------------------- the fixed-point loop
def test_a_dropping_mamba_shrink_keeps_a_window_verification():
    # SW (W=16) + MAMBA, flag-all. SW peeks to 112, run 5-6, pops: 96. Mamba (state at 64
    # only) cuts to 64 and, as a dropping group, is marked verified instead of resetting the
    # marks; SW is looked up again at 64 without the drop. Its block 4 (the peek) is evicted.
    setting = LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=16), MAMBA16), 16, use_eagle=True)
    state = entries(7, {0: {0, 1, 2, 3, 5, 6}, 1: {3}})
    assert coordinator_lookup(setting, state, 112).length == 64
    assert "nothing proves token 64" in unsafe_reason(setting, state, 64, 112)
    # Annotate only the window group: Mamba's shrink now resets the marks, SW drops again.
    drafter_window = CacheGroup(Kind.SLIDING_WINDOW, 16, window=16, is_eagle_group=True)
    annotated = LookupSetting((drafter_window, MAMBA16), 16, use_eagle=True)
    assert coordinator_lookup(annotated, state, 112).length == 0


def test_simple_hybrid_stops_after_one_pass():
    # FULL + SW: one pass. Full attention gives 64; SW (W=17) at 64 finds block 2 -> 48.
    setting = LookupSetting((FULL16, CacheGroup(Kind.SLIDING_WINDOW, 16, window=17)), 16)
    state = entries(4, {0: set(range(4)), 1: {0, 2}})
    assert coordinator_lookup(setting, state, 64) == Hit(48, ((True,) * 3, (False, False, True)))


# ---------------------------------------------------------------------- safety alone
@pytest.mark.parametrize(
    ("hit", "reason"),
    [(80, "outside"), (24, "alignment"), (64, "no state cached at exactly 64")],
)
def test_unsafe_reasons(hit, reason):
    setting = LookupSetting((FULL16, MAMBA16), 8, allow_partial_hash_hits=False)  # alignment 16
    assert reason in unsafe_reason(setting, entries(8, {0: set(range(8)), 1: {3, 5}}), hit, 64)


def test_max_safe_hit_is_not_monotone_in_the_length():
    # Mamba states at 32 and 48: safe at 32 and 48, not at 64, nor at 16.
    setting = LookupSetting((FULL16, MAMBA16), 16)
    state = entries(4, {0: set(range(4)), 1: {1, 2}})
    assert [h for h in range(0, 65, 16) if is_safe_hit(setting, state, h, 64)] == [0, 32, 48]
    assert max_safe_hit(setting, state, 64) == 48


def test_a_partial_entry_proves_its_block_only_up_to_where_it_ends():
    # FULL 64, hash 16: a partial entry at unit 1 (32 tokens) proves [0, 32), not [0, 48).
    setting = LookupSetting((CacheGroup(Kind.FULL, 64), CacheGroup(Kind.MAMBA, 64)), 16)
    state = entries(4, {0: {1}, 1: {1, 2}})
    assert is_safe_hit(setting, state, 32, 64)
    assert "lacks KV for tokens [0, 48)" in unsafe_reason(setting, state, 48, 64)
