"""The SimpleCPUOffload connector's bookkeeping (spec/simple_offload_pins.py): its properties on
hand-made pool views, the fixed cases on real vLLM, and broken copies of vLLM's lookup, each put
back with impl/patching.py, that the judge must catch."""

from __future__ import annotations

import pytest

from kvspec.draws.simple_offload_pins import FIXED_PINS_CASES, _fixed
from kvspec.emit.vllm_style import style_problems
from kvspec.gate.simple_offload_pins import PINS_MINIMUMS, failing_pins_test
from kvspec.impl import patching
from kvspec.impl import vllm_symbols as S
from kvspec.impl.simple_offload_pins import run_pins_case
from kvspec.oracles.invariants import PINNED_MATCH, PINS_RELEASED, REFRESH_ORDER
from kvspec.oracles.simple_offload_pins import PINS_SITUATIONS, pins_violations
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload import SimpleOffloadCase
from kvspec.spec.simple_offload_pins import (
    Admit,
    LoadDone,
    Lookup,
    PoolView,
    Press,
    a_lookup_that_skips_external_reads_pins_nothing,
    an_admission_refreshes_only_the_local_prefix,
    an_outstanding_match_stays_in_the_pool,
    no_pin_outlives_its_request,
)

A, B, C, D = (0, 0), (0, 1), (0, 2), (0, 3)
FULL_4 = LookupSetting((CacheGroup(Kind.FULL, 4),), 4)


def judged(adapter, case):
    return pins_violations(case, run_pins_case(adapter, case), adapter.rules)


def view(order, **pins) -> PoolView:
    return PoolView({entry: pins.get(f"p{entry[1]}", 0) for entry in (A, B, C, D)}, tuple(order))


def test_a_skipping_lookup_may_release_but_never_take_a_pin():
    assert a_lookup_that_skips_external_reads_pins_nothing(view([A], p1=1), view([A, B])) == []
    assert a_lookup_that_skips_external_reads_pins_nothing(view([A, B]), view([A], p1=1)) == [
        "entry (0, 1) pinned 0 -> 1 by a lookup that skips external reads"]


def test_a_waiting_match_needs_the_target_kv_it_promised():
    held = SimpleOffloadCase(FULL_4, CacheState(4, frozenset({A, B, C})), 16, 0)
    assert an_outstanding_match_stays_in_the_pool(held, 12) == []
    lost = SimpleOffloadCase(FULL_4, CacheState(4, frozenset({A, C})), 16, 0)
    assert "group 0 (full) lacks KV for tokens [0, 12)" in an_outstanding_match_stays_in_the_pool(lost, 12)[0]
    # Past a local prefix of 8 the match reads only block 2: blocks 0-1 are on the GPU.
    past_local = SimpleOffloadCase(FULL_4, CacheState(4, frozenset({C})), 16, 8)
    assert an_outstanding_match_stays_in_the_pool(past_local, 4) == []


def test_no_pin_may_be_left_once_nothing_waits():
    assert no_pin_outlives_its_request(view([A, B, C, D])) == []
    assert no_pin_outlives_its_request(view([A, B, D], p2=1)) == [
        "entry (0, 2) still pinned 1 times with no request waiting or loading"]


def test_an_admission_moves_only_the_local_prefix_to_the_recent_end():
    before = view([A, B, D], p2=1)
    refreshed = frozenset({A, B})
    assert an_admission_refreshes_only_the_local_prefix(before, view([D, B, A], p2=1), refreshed) == []
    # Not refreshed, though due.
    assert an_admission_refreshes_only_the_local_prefix(before, before, refreshed)
    # Refreshed, though not due.
    assert an_admission_refreshes_only_the_local_prefix(before, view([D, B, A], p2=1), frozenset())
    # A released pin joins the recent end after the refreshed copy without breaking the rule.
    assert an_admission_refreshes_only_the_local_prefix(before, view([D, B, A, C]), refreshed) == []


def test_every_situation_the_judge_counts_has_a_minimum():
    assert set(PINS_MINIMUMS) == set(PINS_SITUATIONS)


def test_the_fixed_cases_hold_and_reach_every_situation_on_real_vllm(vllm_adapter):
    reached = {}
    for case in FIXED_PINS_CASES:
        situations, found = judged(vllm_adapter, case)
        assert found == [], case
        for name, count in situations.items():
            reached[name] = reached.get(name, 0) + count
    assert all(reached.get(name, 0) > 0 for name in (
        "retried lookups with a match", "skipping lookups the pool could match", "loads done",
        "eager admissions past a held local prefix", "lazy admissions past a held local prefix",
        "presses with a match waiting"))


def _skip_flag(adapter) -> str:
    return "skip_reading_external_kv" if SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX in adapter.rules \
        else "skip_reading_prefix_cache"


# Broken copies of get_num_new_matched_tokens (survivors of kvspec mutate before the pins phase),
# each an (old, new) edit and the invariant the judge files it under. The refresh edits need the
# release that refreshes.
STALE_PIN_KEPT = ("if stale := self._pending_cpu_hits.pop(request.request_id, None):", "if False:")
NULL_BLOCKS_PINNED = ("if not blk.is_null", "if blk.is_null")  # the pin's list, its one null test
LAZY_REFRESHED = ("if num_computed_tokens and not self._lazy_mode:", "if num_computed_tokens:")
EAGER_NOT_REFRESHED = ("if num_computed_tokens and not self._lazy_mode:", "if False:")
BROKEN = {
    "a retry keeps the earlier pin": (lambda adapter: STALE_PIN_KEPT, PINS_RELEASED),
    "the null placeholders are pinned instead of the hit": (lambda adapter: NULL_BLOCKS_PINNED, PINNED_MATCH),
    "a request that skips external reads is pinned": (
        lambda adapter: (f"if request.{_skip_flag(adapter)}:", "if False:"), PINS_RELEASED),
    "the lazy mode refreshes too": (lambda adapter: LAZY_REFRESHED, REFRESH_ORDER),
    "the eager mode never refreshes": (lambda adapter: EAGER_NOT_REFRESHED, REFRESH_ORDER),
}


def _run(source: str) -> None:
    namespace: dict = {}
    exec(compile(source, "<emitted test>", "exec"), namespace)  # noqa: S102 - kvspec's own emitted test
    next(value for name, value in namespace.items() if name.startswith("test_"))()


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_the_judge_catches_a_broken_lookup_and_prints_a_test_that_fails_until_it_is_mended(
        vllm_adapter, broken, tmp_path):
    make_edit, invariant = BROKEN[broken]
    if "refresh" in broken and SIMPLE_OFFLOAD_REFRESHES_THE_LOCAL_PREFIX not in vllm_adapter.rules:
        pytest.skip("this release never refreshes (spec/releases.py)")
    undo = patching.edit(S.SIMPLE_CPU_OFFLOAD_MATCHED, [make_edit(vllm_adapter)])
    try:
        caught = [case for case in FIXED_PINS_CASES if judged(vllm_adapter, case)[1]]
        found = {v.invariant for case in caught for v in judged(vllm_adapter, case)[1]}
        test = failing_pins_test(vllm_adapter, caught[0])
        with pytest.raises(AssertionError):
            _run(test)
    finally:
        undo()
    assert invariant in found
    _run(test)  # vLLM as released passes it
    (tmp_path / "test_pins.py").write_text(test)
    assert not style_problems([tmp_path / "test_pins.py"])


def test_a_press_takes_the_unpinned_blocks_first(vllm_adapter):
    """The harness's press is the pool's own eviction: with a match of blocks 0-2 waiting, a press
    of every free block evicts block 3 and leaves the match."""
    case = _fixed(False, Lookup(0, 0), Press(6), Admit(0), LoadDone(0))
    situations, found = judged(vllm_adapter, case)
    assert found == [] and situations["presses with a match waiting"] == 1
