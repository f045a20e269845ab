"""The OffloadingConnector under EAGLE lookahead hashes (spec/releases.py:
OFFLOADING_TAKES_LOOKAHEAD_HASHES, 0.34): a chunk's key covers the next token, so no group pops
its trailing chunk, and a unit is keyed, so stored, only once the token after it exists. The
spec and the reference on hand-made cases, the same cases on real vLLM, and the plain-vLLM tests
kvspec prints for them run on real vLLM."""

from __future__ import annotations

import pytest

from kvspec.emit.store_tests import offloading_store_test
from kvspec.emit.vllm_tests import offloading_test
from kvspec.gate.offloading import offloading_conforms, reference_offloading, vllm_offloading
from kvspec.impl import patching
from kvspec.impl import vllm_symbols as S
from kvspec.impl.offloading_stores import offloading_stored_chunks
from kvspec.impl.vllm_symbols import Symbol
from kvspec.oracles.invariants import Violated
from kvspec.reference.offloading import offloading_lookup
from kvspec.reference.offloading_stores import later_prompts
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.offloading import OffloadSetting, offload_unsafe_reason
from kvspec.spec.offloading_stores import OffloadStoreCase, offload_store_safety_violations
from kvspec.spec.releases import OFFLOADING_TAKES_LOOKAHEAD_HASHES
from kvspec.spec.setting import CacheState

ANNOTATED = (CacheGroup(Kind.FULL, 4, is_eagle_group=True),)
LEGACY = OffloadSetting(ANNOTATED, 4, use_eagle=True)
LOOKAHEAD = OffloadSetting(ANNOTATED, 4, use_eagle=True, lookahead_hashes=True)
THREE_CHUNKS = CacheState(3, frozenset({(0, 0), (0, 1), (0, 2)}))  # tokens [0, 12)


@pytest.fixture
def lookahead_adapter(vllm_adapter):
    if not vllm_adapter.has(OFFLOADING_TAKES_LOOKAHEAD_HASHES):
        pytest.skip("this release keeps the connector on legacy hashes (spec/releases.py)")
    return vllm_adapter


def test_a_lookahead_key_is_the_drafter_s_proof():
    # 12 tokens held, a 13-token prompt (under lookahead its 3 units are hashed once token 12 exists).
    assert offload_unsafe_reason(LOOKAHEAD, THREE_CHUNKS, 12, 13) is None
    assert "nothing proves token 12" in offload_unsafe_reason(LEGACY, THREE_CHUNKS, 12, 13)
    with pytest.raises(ValueError):
        OffloadSetting(ANNOTATED, 4, lookahead_hashes=True)  # lookahead hashes come only with EAGLE


def test_the_reference_pops_only_under_legacy_hashes():
    assert offloading_lookup(LOOKAHEAD, THREE_CHUNKS, 13).length == 12
    assert offloading_lookup(LEGACY, THREE_CHUNKS, 12).length == 8


def test_a_later_prompt_carries_its_last_unit_only_past_it():
    assert later_prompts(LEGACY, 3) == (12, 13)
    assert later_prompts(LOOKAHEAD, 3) == (13,)


def test_real_vllm_pops_only_under_legacy_hashes(lookahead_adapter):
    for setting, num_tokens, expected in ((LOOKAHEAD, 13, 12), (LEGACY, 12, 8)):
        hit = vllm_offloading(lookahead_adapter, setting, THREE_CHUNKS, num_tokens, None)
        assert hit.length == expected == reference_offloading(lookahead_adapter, setting, THREE_CHUNKS,
                                                              num_tokens, None).length


# Unannotated EAGLE (nothing held back while decoding): an 8-token prompt computed in one step.
UNANNOTATED = (CacheGroup(Kind.FULL, 4),)
PROMPT_IN_ONE_STEP = OffloadStoreCase(OffloadSetting(UNANNOTATED, 4, use_eagle=True, lookahead_hashes=True), 8,
                                      ((0, 8),))


def test_the_prompt_s_last_chunk_is_stored_once_its_next_token_exists(lookahead_adapter):
    case = PROMPT_IN_ONE_STEP
    steps = offloading_stored_chunks(lookahead_adapter, case.setting, case.saves, case.num_prompt_tokens)
    assert steps == [{0: (0,)}, {0: (1,)}]  # chunk 1 waits for the sampled token 8
    assert offload_store_safety_violations(case, 0, {0: (0, 1)})  # storing it earlier breaks the rule
    assert offload_store_safety_violations(case, 1, steps[1]) == []
    legacy = OffloadStoreCase(OffloadSetting(UNANNOTATED, 4, use_eagle=True), 8, ((0, 8),))
    assert offloading_stored_chunks(lookahead_adapter, legacy.setting, legacy.saves, 8)[0] == {0: (0, 1)}


# The lookup as vLLM wrote it, popping an annotated group's last chunk under lookahead hashes too.
LOOKUP = Symbol(S.OFFLOADING_SCHEDULER.module, "OffloadingConnectorScheduler._lookup_complete_chunks")
POPS_UNDER_LOOKAHEAD = ("group_config.is_eagle_group and not self.use_lookahead_block_hashes",
                        "group_config.is_eagle_group")


def test_the_check_catches_a_lookup_that_pops_under_lookahead_hashes(lookahead_adapter):
    case = (LOOKAHEAD, THREE_CHUNKS, 13, None)
    assert offloading_conforms(lookahead_adapter, case).length == 12
    undo = patching.edit(LOOKUP, [POPS_UNDER_LOOKAHEAD])
    try:
        with pytest.raises(Violated, match="hit: vLLM 8 != reference 12"):
            offloading_conforms(lookahead_adapter, case)
    finally:
        undo()


def _run(source: str) -> None:
    namespace: dict = {}
    exec(compile(source, "<emitted test>", "exec"), namespace)  # noqa: S102 - kvspec's own emitted test
    next(value for name, value in namespace.items() if name.startswith("test_"))()


def test_the_printed_tests_replay_lookahead_hashes_on_real_vllm(lookahead_adapter):
    _run(offloading_test(LOOKAHEAD, THREE_CHUNKS, 13, None, 12, "no pop under lookahead hashes", "lookahead"))
    with pytest.raises(AssertionError):  # the same test with the legacy drop's answer fails
        _run(offloading_test(LOOKAHEAD, THREE_CHUNKS, 13, None, 8, "the legacy drop's hit", "lookahead"))
    # Chunk 1 is stored, at the finishing step: the replay hashes the sampled token as vLLM does.
    _run(offloading_store_test("store-incomplete", PROMPT_IN_ONE_STEP, {0: frozenset({1})}, "lookahead store"))
