"""The stateful check of a real KVCacheManager (kvspec/stateful/machine.py), its judges (the shadow
of block contents, the reference cache model) and the variants it must catch."""

import random
from collections import Counter

import hypothesis
import pytest
from hypothesis import Phase
from hypothesis import strategies as st

from kvspec.divergences.known import load
from kvspec.gate.result import gate_settings
from kvspec.gate.stateful import STATEFUL_EXAMPLES
from kvspec.impl.broken import VARIANTS, applied
from kvspec.oracles.invariants import STATEFUL_REFERENCE, STATEFUL_SAFE, STATEFUL_WRITES, Violated
from kvspec.reference.cache_model import CacheModel, replay
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES
from kvspec.stateful.config import MachineConfig
from kvspec.stateful.judge import DRAFTER_KNOWN, _dropped_by_frees
from kvspec.stateful.machine import documents_from, make_cache_machine, run_machine

FULL_MAMBA = (CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16))


def machine(adapter, config: MachineConfig, documents, **options):
    """One run of the machine, set up by hand, to call its rules one by one."""
    state = make_cache_machine(adapter, Counter(), st.just(config), **options)()
    state.setup(config, documents)
    return state


def run(adapter, examples: int, *, seed: int = 0, configs=None, **options) -> Counter:
    stats: Counter = Counter()
    state_machine = hypothesis.seed(seed)(make_cache_machine(adapter, stats, configs, **options))
    run_machine(state_machine, gate_settings(examples, phases=[Phase.generate]), steps=30)
    return stats


# ----------------------------------------------------------------------------- clean vLLM
def test_every_run_has_thirty_steps_and_holds(vllm_adapter):
    stats = run(vllm_adapter, 40)
    # The 40 examples Hypothesis counts run 30 steps each; a few more that it discards (its
    # choice sequence ran out) may stop short. Without run_machine's minimum, most stop after one.
    assert stats["examples"] >= 40 and 40 * 30 <= stats["steps"] <= stats["examples"] * 30
    assert stats["steps scheduled"] > 100 and stats["lookups"] > 40


def test_a_full_attention_prompt_is_reused_and_judged(vllm_adapter):
    config = MachineConfig((CacheGroup(Kind.FULL, 16),), 16, None, 0, None, 16)
    state = machine(vllm_adapter, config, [list(range(8)) * 9])
    state.add(document=0, length=65, suffix=[], budget=2048)  # computes 65 tokens, samples one
    state.stop(pick=0, preempt=False)
    state.add(document=0, length=65, suffix=[], budget=2048)
    assert state.live.requests["r1"].hit_length == 64
    state.blocks_are_accounted_for()


# ----------------------------------------------------------------------------- Mamba schedules
def test_a_mamba_hit_resumes_the_state_of_a_scheduler_made_chunk(vllm_adapter):
    config = MachineConfig(FULL_MAMBA, 16, None, 0, None, 24)
    state = machine(vllm_adapter, config, [random.Random(1).choices(range(8), k=100)])
    # Budget 20: the scheduler's block-aligned split cuts every chunk at a multiple of 16.
    state.add(document=0, length=100, suffix=[], budget=20)
    state.schedule(pick=0, budget=20, token=0, to_end=True)
    assert [end for _, _, end in state.chunks] == [16, 32, 48, 64, 80, 96, 100]
    state.stop(pick=0, preempt=False)
    state.look_up_prompt(document=0, length=97)  # M=96: full and Mamba both at 96
    assert state.judge.stats["hits"] == 1


def test_a_schedule_the_scheduler_never_makes_caches_a_wrong_mamba_state(vllm_adapter, monkeypatch):
    """Not a finding: vLLM relies on the scheduler's block-aligned split, a rule of the write side
    (spec/caching.py:mamba_chunk_stops_where_a_state_is_kept). Forced to end a chunk mid-block
    (20 tokens, then 20 more), the Mamba block cached under the 32-token key holds the state
    after 20 tokens, and the next request with that prefix resumes from it."""
    config = MachineConfig(FULL_MAMBA, 16, None, 0, None, 24)
    state = machine(vllm_adapter, config, [random.Random(2).choices(range(8), k=40)])
    request_id = state.add_request(0, 40, [])
    live = state.live
    judge_chunk = state.judge.writes._judge_mamba_chunk
    monkeypatch.setattr(state.judge.writes, "_judge_mamba_chunk", lambda step, request: None)
    steps = []
    for chunk in (20, 20):
        steps.append(step := live.schedule(request_id, 2048, 0, chunk=chunk))
        state.judge.sync()
        state.judge.compute(step, list(live.requests[request_id].request.all_token_ids))
    assert live.requests[request_id].request.num_computed_tokens == 40
    with pytest.raises(AssertionError, match=r"the chunk \[0, 20\) of a 40-token prefill stops inside Mamba group 1"):
        judge_chunk(steps[0], live.requests[request_id].request)
    with pytest.raises(AssertionError, match=r"unsafe hit 32: group 1 \(mamba\) block 1 .* holds group 1's state after 20"):
        state.look_up_prompt(document=0, length=33)


# ----------------------------------------------------------------------------- EAGLE
def test_the_drafter_kv_of_a_first_inserted_copy_is_served_with_the_legacy_drop(vllm_adapter, monkeypatch):
    """A known divergence on clean vLLM (EAGLE's legacy last-block drop, no lookahead hashes):
    A's prompt P (4 tokens) is computed and A samples 0; B's prompt P + [4, ...] computes its own
    copy of P's block; C = B's prompt hits 4 tokens proven by B's next block, but is served A's
    copy, whose drafter KV at position 3 was computed with A's token 0, not C's token 4. Counted
    when recorded, failed when strict."""
    document = random.Random(0).choices(range(8), k=9)  # [6, 6, 3, 2, 4, 3, 6, 2, 3]
    for group in (CacheGroup(Kind.FULL, 4), CacheGroup(Kind.SLIDING_WINDOW, 4, window=2)):
        config = MachineConfig((group,), 4, "drop", 1, None, 16)
        for strict in (True, False):
            findings = {}
            # What `kvspec check --strict-drafter` passes: the recorded drafter-unproven entries left out.
            known = load(strict_drafter=strict)
            state = machine(vllm_adapter, config, [document], findings=findings, known=known)
            state.add(document=0, length=4, suffix=[], budget=4)  # A, samples token 0
            state.stop(pick=0, preempt=False)
            state.add(document=0, length=9, suffix=[], budget=8)  # B
            if strict:
                with pytest.raises(AssertionError, match="drafter KV at position 3 was computed with token 0.*NEW divergence"):
                    state.add(document=0, length=9, suffix=[], budget=1)  # C
            else:
                state.add(document=0, length=9, suffix=[], budget=1)
                assert state.judge.stats[DRAFTER_KNOWN] >= 1  # the hit, then the chunk reading it
                assert list(findings) == ["served-copy-drafter-kv-saw-another-token"]
                assert state.live.requests["r2"].hit_length == 4


def test_lookahead_hashes_prove_the_next_token(vllm_adapter):
    """The same sequence with lookahead hashes (vLLM's default): C's hit cannot use A's copy."""
    document = random.Random(0).choices(range(8), k=9)
    config = MachineConfig((CacheGroup(Kind.FULL, 4),), 4, "lookahead", 1, None, 16)
    state = machine(vllm_adapter, config, [document], strict_drafter=True)
    state.add(document=0, length=4, suffix=[], budget=4)
    state.stop(pick=0, preempt=False)
    state.add(document=0, length=9, suffix=[], budget=8)
    state.add(document=0, length=9, suffix=[], budget=1)
    state.blocks_are_accounted_for()


def test_an_unannotated_eagle_mamba_hybrid_hits_past_its_proof(vllm_adapter):
    """A known divergence on clean vLLM (hybrid-unannotated-eagle-mamba-keeps-window-verification:
    EAGLE's legacy drop, no group annotated, so every group drops; retention 0, the engine
    default), first-come-first-served. r0 (192 tokens) runs in chunks of 48; r1's first 16 tokens
    are computed; a probe of 185 tokens then hits 16: the sliding window's peek finds blocks 9-10,
    Mamba shrinks the candidate to its state at 16, and as a dropping group it does not clear the
    window's verification, so the window takes 16 with no drop and nothing proving token 16
    (HybridKVCacheCoordinator.find_longest_cache_hit). When r1's token 16 differs, the drafter's
    KV at position 15 is really wrong. Failed when strict, counted when recorded."""
    config = MachineConfig((CacheGroup(Kind.SLIDING_WINDOW, 16, window=16), CacheGroup(Kind.MAMBA, 16)),
                           16, "drop", 1, 0, 19)
    document = documents_from([(185, 0, 0)])[0]
    cases = {(32, ()): r"drafter-unproven hit 16 by spec/hits.py: group 0 \(sliding_window\) may hold the drafter but "
                       r"nothing proves token 16",
             (16, ((document[16] + 1) % 8,) * 16): r"drafter-unproven hit 16 by spec/hits.py: .* nothing proves token 16"}
    for (length, suffix), failure in cases.items():
        for strict in (True, False):
            findings = {}
            state = machine(vllm_adapter, config, [document], strict_drafter=strict, fcfs=True, findings=findings)
            state.add(document=0, length=10_000, suffix=[0] * 7, budget=None)
            state.schedule(pick=0, budget=48, token=0, to_end=True)
            state.add(document=0, length=length, suffix=list(suffix), budget=16)
            assert [(start, end) for _, start, end in state.chunks] == [
                (0, 48), (48, 96), (96, 144), (144, 176), (176, 192), (0, 16)]  # the scheduler's split
            if strict:
                with pytest.raises(AssertionError, match=failure + ".*NEW divergence"):
                    state.look_up_prompt(document=0, length=10_000)
            else:
                state.look_up_prompt(document=0, length=10_000)
                assert list(findings) == ["hybrid-unannotated-eagle-mamba-keeps-window-verification"]



def test_a_block_promoted_after_a_copy_on_write_release_keeps_its_keys(vllm_adapter):
    """Issue 16's grid (seeds 4, 9, 11-15 on 0.34.0 and 0.33.0): [full 2, Mamba 2], hash unit 1,
    lookahead hashes. r1's hit takes r0's partial tail; the step copies it, releases the copy's
    retention (free_blocks), then update_from_output's cache_blocks promotes the block's partial
    entry to the full block, removing its key before inserting it again. The judge took that
    removal for one made by the free before it; only a removal inside free_blocks is."""
    if LOOKAHEAD_BLOCK_HASHES not in vllm_adapter.rules:
        pytest.skip("no lookahead hashes in this release")
    config = MachineConfig((CacheGroup(Kind.FULL, 2), CacheGroup(Kind.MAMBA, 2)), 1, "lookahead", 1, None, 16)
    state = machine(vllm_adapter, config, documents_from([(2, 0, 0)]))
    state.compute_first_prompt()
    state.stop(pick=0, preempt=False)
    state.compute_first_prompt()
    state.blocks_are_accounted_for()
    [request] = state.running
    full_block = state.live.block_ids(request)[0][0]
    hashes = state.live.requests[request].request.block_hashes
    assert {state.live.cache_key(hashes[0], 0), state.live.cache_key(hashes[1], 0)} <= state.live.keys_on(full_block)


def test_a_free_that_drops_a_key_fails(vllm_adapter):
    """The rule the previous test narrows still bites: a free_blocks that evicts (the zoo's
    freed-blocks-forget-their-keys) fails on finishing, and inside a step."""
    config = MachineConfig((CacheGroup(Kind.FULL, 4),), 4, None, 0, None, 16)
    with applied(vllm_adapter, ["freed-blocks-forget-their-keys"]):
        state = machine(vllm_adapter, config, documents_from([(9, 0, 0)]))
        state.compute_first_prompt()
        with pytest.raises(Violated, match="freeing dropped"):
            state.stop(pick=0, preempt=False)
        operations = [("free", [1]), ("uncache", b"k", 1, True)]
        assert _dropped_by_frees(operations, everything=False) == [1]
        assert _dropped_by_frees([("free", [1]), ("uncache", b"k", 1, False)], everything=False) == []



def test_a_block_shared_by_a_hit_carries_each_holders_partial_entry(vllm_adapter):
    """Issue 16's grid (seed 4 on 0.32.0; the same program on every release): [full 4, Mamba 2],
    hash unit 2. r0 (prompt 5) computes block 1 (tokens 0-3); r1 (its first 4 tokens) hits it
    whole and publishes its own prompt's partial entry (2 tokens) on it
    (FullAttentionManager._cache_partial_tail_block), beside r0's full key. r0's column 0
    carries that entry though r0 never published it: safe (the block holds those 2 tokens), and
    what the spec predicts for the block's other holder, so not an extra write."""
    config = MachineConfig((CacheGroup(Kind.FULL, 4), CacheGroup(Kind.MAMBA, 2)), 2, None, 0, None, 10)
    state = machine(vllm_adapter, config, documents_from([(4, 0, 0)]))
    state.add(budget=None, document=0, length=10_000, suffix=[0])
    state.add(budget=None, document=0, length=10_000, suffix=[])
    state.decode(pick=0, tokens=[0])
    state.schedule(budget=2, pick=1, to_end=True, token=0)
    state.reset_prefix_cache()
    state.schedule(budget=1, pick=1, to_end=False, token=0)
    state.decode(pick=0, tokens=[0])  # r0's step: judged against its prediction and r1's
    state.blocks_are_accounted_for()
    live = state.live
    assert live.block_ids("r0")[0][0] == live.block_ids("r1")[0][0] and live.requests["r1"].hit_length == 4
    r0_hashes = live.requests["r0"].request.block_hashes
    assert live.keys_on(live.block_ids("r0")[0][0]) == {live.cache_key(r0_hashes[j], 0) for j in (0, 1)}


# ----------------------------------------------------------------------------- it bites
# Caught at the gate's budget and seed (after 36, 36, 4 and 20 of its 500 examples; the
# budget itself steers Hypothesis's generation, so a smaller one is not a prefix of it).
BITES = ("mamba-peek-margin", "mamba-honours-eagle-drop", "sliding-window-short-run", "hybrid-loop-one-pass")


@pytest.mark.parametrize("variant", BITES)
def test_the_stateful_check_catches(vllm_adapter, variant):
    if variant not in VARIANTS:
        pytest.skip(f"{variant} is not in impl/broken.py yet")
    with applied(vllm_adapter, [variant]):
        with pytest.raises(Violated) as failure:
            run(vllm_adapter, STATEFUL_EXAMPLES)
    # The short window run also shrinks what a window caches, which the write judge sees first.
    assert failure.value.violations[0].invariant in (STATEFUL_SAFE, STATEFUL_REFERENCE, STATEFUL_WRITES), \
        failure.value.violations


# (sliding-window-short-run fails the write judge first; tests/test_stateful_replay.py replays it.)
@pytest.mark.parametrize("variant", ["mamba-peek-margin", "mamba-honours-eagle-drop"])
def test_a_stateful_hit_failure_prints_a_plain_vllm_test_that_replays_it(vllm_adapter, variant):
    """The printed test imports only vLLM: it holds on clean vLLM and fails with the bug back in."""
    with applied(vllm_adapter, [variant]):
        with pytest.raises(AssertionError) as failure:
            run(vllm_adapter, STATEFUL_EXAMPLES)
    code = str(failure.value).split("(the same lookup over the same cached entries):\n", 1)[1]
    assert "kvspec" not in code.split("def test_")[0]  # its imports
    namespace: dict = {}
    exec(compile(code, "emitted_test.py", "exec"), namespace)  # noqa: S102 - the test kvspec printed
    [test] = [value for name, value in namespace.items() if name.startswith("test_")]
    test()
    with applied(vllm_adapter, [variant]), pytest.raises(AssertionError):
        test()


def test_the_reference_cache_model_catches_a_pool_that_queues_unkeyed_blocks_last(vllm_adapter):
    """A block pool that puts freed blocks without a key at the back of the free queue (they
    must be reused first) is caught by the reference cache model alone."""
    config = MachineConfig((CacheGroup(Kind.FULL, 4),), 4, None, 0, None, 12)
    state = machine(vllm_adapter, config, [list(range(8)) * 2])
    queue = state.live.manager.block_pool.free_block_queue
    queue.prepend_n = queue.append_n  # this pool instance only
    state.add(document=0, length=14, suffix=[], budget=16)  # blocks 0-2 keyed, block 3 not
    state.stop(pick=0, preempt=False)
    with pytest.raises(AssertionError, match="free queue .* differs from the reference"):
        state.blocks_are_accounted_for()


# ----------------------------------------------------------------------------- the reference cache model
def test_reference_cache_model_eviction_order_and_copies():
    model = CacheModel(6)  # block 0 is the null block
    assert model.allocate(3) == [1, 2, 3]
    model.cache("k1", 1)
    model.cache("k2", 2)
    model.free([3, 2, 1])  # tail first: unkeyed 3 to the front, keyed 2 and 1 to the back
    assert model.free_queue == [3, 4, 5, 2, 1]
    model.touch([2])
    assert model.free_queue == [3, 4, 5, 1] and model.ref_counts[2] == 1
    assert model.allocate(1) == [3]
    model.cache("k1", 3)  # a second copy of k1: never de-duplicated
    assert model.copies["k1"] == [1, 3] and model.served("k1") == 1
    assert model.allocate(3) == [4, 5, 1]  # evicts block 1's copy only
    assert model.copies["k1"] == [3] and model.served("k1") == 3
    assert not model.reset()  # blocks are in use


def test_reference_replay_reports_an_allocation_off_the_queue_head():
    model = CacheModel(4)
    assert replay(model, [("allocate", [2])]) == ["vLLM allocated blocks [2], the free queue's head is [1]"]


def test_a_short_hit_passes_only_as_a_recorded_divergence(vllm_adapter, tmp_path, monkeypatch):
    """One full/4 group, EAGLE's legacy drop: after an 8-token prompt is computed, its 8-token
    probe (M=7) hits 0, though block 1 proves token 4 (unitary-eagle-drop-without-peek). The
    stateful check counts it while it is recorded and fails when it is not."""
    document = random.Random(0).choices(range(8), k=9)
    config = MachineConfig((CacheGroup(Kind.FULL, 4),), 4, "drop", 1, None, 16)
    for divergences in (None, tmp_path / "none.toml"):
        if divergences is not None:
            divergences.write_text("# nothing known\n")
        findings = {}
        known = load() if divergences is None else load(divergences)
        state = machine(vllm_adapter, config, [document], findings=findings, known=known)
        state.add(document=0, length=8, suffix=[], budget=8)
        state.stop(pick=0, preempt=False)
        if divergences is None:
            state.look_up_prompt(document=0, length=8)
            assert "unitary-eagle-drop-without-peek" in findings
        else:
            with pytest.raises(AssertionError, match="probe: hit 0, 4 below .* NEW divergence: short-hit at 'core one group EAGLE'"):
                state.look_up_prompt(document=0, length=8)
