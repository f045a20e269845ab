"""The store sides (spec/stores.py, reference/stores.py, kvspec/gate/stores.py): the rules on
hand-worked examples, the reference's prediction, real vLLM's Mooncake store masks, the check
holding on clean vLLM and failing on the zoo's store bug."""

from __future__ import annotations

import pytest

from kvspec.cli import QUICK_SCALE
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.stores import check_stores, mooncake_store_conforms
from kvspec.impl.broken import VARIANTS
from kvspec.impl.broken_stores import NAME, mamba_states_put_positionally
from kvspec.impl.stores import mooncake_store_masks
from kvspec.reference.stores import dropping_groups, needed_blocks
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import LookupSetting
from kvspec.spec.stores import (
    StoreCase,
    StoreSave,
    store_block_range,
    store_completeness_gaps,
    store_safety_violations,
    stored_blocks,
)
from kvspec.tools import matrix

FULL64 = CacheGroup(Kind.FULL, 64)
MAMBA16 = CacheGroup(Kind.MAMBA, 16)


def window(size: int, block: int = 16, **kw) -> CacheGroup:
    return CacheGroup(Kind.SLIDING_WINDOW, block, window=size, **kw)


# ------------------------------------------------------------------ the rules, by hand
def test_a_save_covers_the_blocks_between_its_ends():
    setting = LookupSetting((FULL64, window(16)), 16)
    assert store_block_range(setting, 1, StoreSave(64, 192)) == range(4, 12)
    assert store_block_range(setting, 0, StoreSave(64, 192)) == range(1, 3)


def test_a_mask_past_the_computed_tokens_is_unsafe():
    setting, save = LookupSetting((FULL64, window(16)), 16), StoreSave(0, 64)
    assert store_safety_violations(setting, save, (None, (False, False, False, True))) == []
    [reason] = store_safety_violations(setting, save, (None, (False, False, False, True, True)))
    assert "putting blocks [4] past the computed tokens" in reason


def test_a_mamba_state_put_by_position_is_unsafe():
    setting, save = LookupSetting((FULL64, MAMBA16), 16), StoreSave(0, 64)
    assert store_safety_violations(setting, save, (None, (False,) * 4)) == []
    assert "Mamba group 1: states [0, 1, 2, 3]" in store_safety_violations(setting, save, (None, None))[0]


def test_one_mask_per_group():
    setting = LookupSetting((FULL64, window(16)), 16)
    assert "1 masks for 2 groups" in store_safety_violations(setting, StoreSave(0, 64), (None,))[0]


def test_a_gap_is_a_needed_block_never_stored():
    setting = LookupSetting((FULL64, window(16)), 16)
    stored = stored_blocks(setting, StoreSave(64, 128), (None, (False, False, False, True)))
    assert stored == {0: frozenset({1}), 1: frozenset({7})}
    assert store_completeness_gaps(setting, {1: frozenset({3, 7})}, stored) == {1: frozenset({3})}


# ------------------------------------------------------------------ the reference's prediction
def test_a_window_keeps_its_tail_before_each_boundary():
    # Window 33 reads two 16-token blocks before a hit; hits land every 64 tokens.
    assert needed_blocks(LookupSetting((FULL64, window(33)), 16), 256)[1] == frozenset({2, 3, 6, 7, 10, 11, 14, 15})


def test_an_eagle_window_also_keeps_the_block_after_each_boundary():
    needed = needed_blocks(LookupSetting((FULL64, window(16)), 16, use_eagle=True), 256)[1]
    assert needed == frozenset({3, 4, 7, 8, 11, 12, 15})  # block 16 proves 256: another request's


def test_full_attention_keeps_every_block_and_mamba_none_here():
    needed = needed_blocks(LookupSetting((FULL64, MAMBA16), 16), 128)
    assert needed == {0: frozenset({0, 1})}  # Mamba's states go by the hand-off


def test_unannotated_eagle_drops_every_group_annotated_only_its_spec_group():
    assert dropping_groups(LookupSetting((FULL64, window(16)), 16, use_eagle=True)) == {0, 1}
    annotated = LookupSetting((FULL64, window(16, is_eagle_group=True), window(16)), 16, use_eagle=True)
    assert dropping_groups(annotated) == {1, 2}  # equal specs merge


# ------------------------------------------------------------------ real vLLM
def test_vllm_puts_the_window_tails_the_reference_predicts(vllm_adapter):
    case = StoreCase(LookupSetting((FULL64, window(33), MAMBA16), 16), 256, (StoreSave(0, 128), StoreSave(128, 256)))
    masks = mooncake_store_masks(vllm_adapter, case.setting, case.saves, 256)
    assert masks[1][1] == (False, False, True, True, False, False, True, True)
    assert masks[1][2] == (False,) * 8  # Mamba: nothing by position
    comparison = mooncake_store_conforms(vllm_adapter, case)
    assert comparison.exact and comparison.stored[1] == frozenset({2, 3, 6, 7, 10, 11, 14, 15})


def test_the_bug_puts_mamba_states_and_the_check_fails(vllm_adapter):
    case = StoreCase(LookupSetting((FULL64, MAMBA16), 16), 64, (StoreSave(0, 64),))
    assert VARIANTS[NAME].caught_by == (Check.STORES,)
    undo = mamba_states_put_positionally(vllm_adapter)
    try:
        assert mooncake_store_masks(vllm_adapter, case.setting, case.saves, 64)[0][1] is None
        with pytest.raises(AssertionError, match="Mamba group 1: states"):
            mooncake_store_conforms(vllm_adapter, case)
        gate = check_stores(vllm_adapter, GateOptions(scale=QUICK_SCALE))
    finally:
        undo()
    assert not gate.holds and any("put positionally" in line for line in gate.details)
    assert mooncake_store_masks(vllm_adapter, case.setting, case.saves, 64)[0][1] == (False,) * 4


def test_the_check_holds_on_clean_vllm(vllm_adapter):
    result = check_stores(vllm_adapter, GateOptions(scale=QUICK_SCALE))
    recorded = [f.id for f in matrix.load() if f.check == Check.STORES and vllm_adapter.version in f.releases]
    if recorded:  # 0.33.0 and older store the chunk a request ended in error never computed
        assert recorded == ["offloading-store-error-finish-stores-uncomputed-chunk"]
        assert not result.holds and "then ends in error (FINISHED_ERROR)" in result.details[0], result.details
        return
    assert result.holds, result.details
    assert result.details[1].startswith("known divergences met: ")
    assert "offloading-store-" in result.details[1] and "OffloadingConnector requests" in result.covered


def test_an_unrecorded_store_divergence_fails_the_check(vllm_adapter, tmp_path):
    empty = tmp_path / "none.toml"
    empty.write_text("# nothing known\n")
    result = check_stores(vllm_adapter, GateOptions(divergences=empty))
    assert not result.holds
    if any(f.check == Check.STORES and vllm_adapter.version in f.releases for f in matrix.load()):
        # A safety violation ends the check before divergences are tallied: 0.33.0's recorded finding.
        assert "then ends in error (FINISHED_ERROR)" in result.details[0], result.details
        return
    assert any(line.startswith("NEW divergence: store-") for line in result.details)


# ------------------------------------------------------------------ the OffloadingConnector's store side
def _offload_case(groups, hash_unit, prompt, steps, per_chunk=1, eagle=False):
    from kvspec.spec.offloading import OffloadSetting
    from kvspec.spec.offloading_stores import OffloadStoreCase

    return OffloadStoreCase(OffloadSetting(tuple(groups), hash_unit, per_chunk, eagle), prompt, tuple(steps))


def test_an_offloaded_chunk_past_the_computed_tokens_is_unsafe():
    from kvspec.spec.offloading_stores import offload_store_safety_violations

    case = _offload_case([CacheGroup(Kind.FULL, 16)], 16, 64, [(0, 40), (40, 64)])
    assert offload_store_safety_violations(case, 0, {0: (0, 1)}) == []
    [reason] = offload_store_safety_violations(case, 0, {0: (0, 1, 2)})
    assert "chunks [2] of 16 tokens, past the 40 tokens computed" in reason
    assert offload_store_safety_violations(case, 2, {0: (3,)}) == []  # the finishing step: all 64 computed
    assert "group 1, which the request lacks" in offload_store_safety_violations(case, 1, {1: (0,)})[0]
    assert "holding a null block" in offload_store_safety_violations(case, 1, {0: (3,)}, frozenset({(0, 3)}))[0]


def test_a_window_needs_the_chunks_before_every_hit_full_attention_all():
    from kvspec.reference.offloading_stores import needed_chunks

    # Hits land every 4 tokens; a window of 2 reads the one 2-token chunk before each, one of 3 both.
    case = _offload_case([window(2, block=2), CacheGroup(Kind.FULL, 4)], 2, 8, [(0, 8)])
    assert needed_chunks(case.setting, 8) == {0: frozenset({1, 3}), 1: frozenset({0, 1})}
    case = _offload_case([window(3, block=2), CacheGroup(Kind.FULL, 4)], 2, 8, [(0, 8)])
    assert needed_chunks(case.setting, 8) == {0: frozenset({0, 1, 2, 3}), 1: frozenset({0, 1})}
    mamba = _offload_case([CacheGroup(Kind.FULL, 16), MAMBA16], 16, 64, [(0, 64)])
    assert needed_chunks(mamba.setting, 64) == {0: frozenset({0, 1, 2, 3})}  # Mamba's by the hand-off


def test_vllm_offloads_whole_computed_chunks_step_by_step(vllm_adapter):
    from kvspec.gate.offloading_stores import offloading_store_conforms
    from kvspec.impl.offloading_stores import offloading_stored_chunks

    case = _offload_case([CacheGroup(Kind.FULL, 16)], 16, 64, [(0, 40), (40, 64)])
    stored = offloading_stored_chunks(vllm_adapter, case.setting, case.saves, 64)
    # Which chunks, not in which order a release lists its store jobs (0.33 lists them backwards).
    assert [{g: tuple(sorted(c)) for g, c in step.items()} for step in stored] == [{0: (0, 1)}, {0: (2, 3)}, {}]
    assert offloading_store_conforms(vllm_adapter, case).exact


def test_vllm_keeps_a_window_tail_only_at_the_replay_boundary(vllm_adapter):
    # The recorded divergence offloading-store-window-tail-only-at-replay-boundary, by hand.
    from kvspec.gate.offloading_stores import offloading_store_conforms

    comparison = offloading_store_conforms(vllm_adapter, _offload_case([window(3, block=2)], 2, 8, [(0, 8)]))
    assert comparison.stored[0] == frozenset({2}) and comparison.gaps == {0: frozenset({0, 1, 3})}


def test_the_offloading_bug_stores_an_unheld_chunk_and_the_check_fails(vllm_adapter):
    from kvspec.gate.offloading_stores import offloading_store_conforms
    from kvspec.impl.broken_stores import OFFLOAD_NAME, offloading_stores_unheld_chunk
    from kvspec.impl.offloading_stores import offloading_stored_chunks

    case = _offload_case([CacheGroup(Kind.FULL, 2)], 2, 2, [(0, 1)])
    assert VARIANTS[OFFLOAD_NAME].caught_by == (Check.STORES,)
    undo = offloading_stores_unheld_chunk(vllm_adapter)
    try:
        assert offloading_stored_chunks(vllm_adapter, case.setting, case.saves, 2)[0] == {0: (0,)}
        with pytest.raises(AssertionError, match="past the 1 tokens computed"):
            offloading_store_conforms(vllm_adapter, case)
        gate = check_stores(vllm_adapter, GateOptions(scale=QUICK_SCALE))
    finally:
        undo()
    assert not gate.holds and any("past the" in line for line in gate.details)
    assert offloading_stored_chunks(vllm_adapter, case.setting, case.saves, 2)[0] == {}


def test_a_request_ended_in_error_mid_prefill_stores_only_what_it_computed(vllm_adapter):
    """A 2-token prompt with 1 token computed, then FINISHED_ERROR (a failed KV load under the
    "fail" policy): its only chunk was never computed. 0.33.0 and older store it anyway
    (release-findings.toml); an abort never did."""
    from kvspec.impl.offloading_stores import offloading_stored_chunks

    case = _offload_case([CacheGroup(Kind.FULL, 2)], 2, 2, [(0, 1)])
    recorded = any(f.id == "offloading-store-error-finish-stores-uncomputed-chunk" and vllm_adapter.version in f.releases
                   for f in matrix.load())
    errored = offloading_stored_chunks(vllm_adapter, case.setting, case.saves, 2, ends_in_error=True)
    aborted = offloading_stored_chunks(vllm_adapter, case.setting, case.saves, 2)
    assert errored[-1] == ({0: (0,)} if recorded else {})
    assert aborted[-1] == {}


def test_an_eagle_window_keeps_the_proof_of_a_zero_hit_and_no_lookup_reads_it(vllm_adapter):
    """Seeds 2, 7, 9 of the issue-16 grid on 0.34.0: a prompt shorter than the store's alignment
    plus one has its replay boundary aligned to 0, and reachable_block_mask's EAGLE shift keeps
    block 0 of a drafter's window. A one-token or two-token window beside 3-token chunks reads
    only the chunks just before a hit at 3, 6, ..., so vLLM's own lookup over a store holding
    every chunk never loses a token without chunk 0; a three-token window reads it at 3. Filed
    under its own cause, whatever the window (known-divergences.toml:
    offloading-store-eagle-tail-at-a-zero-boundary-unread)."""
    from kvspec.divergences.stores import offload_store_where
    from kvspec.gate.offloading_stores import offloading_store_conforms
    from kvspec.impl.offloading import offloading_hit
    from kvspec.spec.offloading import chunk_key
    from kvspec.spec.setting import CacheState

    where = "offloading store: EAGLE window tail at a replay boundary aligned to 0"
    for size, unread in ((1, {1: frozenset({0})}), (2, {1: frozenset({0})}), (3, {})):
        case = _offload_case([window(7, block=3), window(size, block=1, is_eagle_group=True)], 1, 3, [(0, 1)],
                             eagle=True)
        comparison = offloading_store_conforms(vllm_adapter, case)
        assert comparison.stored[1] == frozenset({0}) and comparison.unread == unread, size
        if unread:
            assert offload_store_where(case.setting, unread, "store-unread", case.num_prompt_tokens) == where
        lowered = []
        for n in range(1, 14):
            every = frozenset((g, chunk_key(case.setting, g, c)) for g, c in ((0, c) for c in range(n // 3)))
            every |= frozenset((1, chunk_key(case.setting, 1, c)) for c in range(n))
            hits = [offloading_hit(vllm_adapter, list(case.setting.groups), CacheState(n, held), n, use_eagle=True,
                                   hash_block_size=1).length for held in (every, every - {(1, 0)})]
            lowered += [n] if hits[1] < hits[0] else []
        assert bool(lowered) == (not unread), (size, lowered)
    # A longer prompt aligns its replay boundary past 0: the window keeps no chunk 0 at all.
    longer = _offload_case([window(7, block=3), window(1, block=1, is_eagle_group=True)], 1, 4, [(0, 1)], eagle=True)
    assert offloading_store_conforms(vllm_adapter, longer).stored[1] == frozenset()
