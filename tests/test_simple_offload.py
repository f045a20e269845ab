"""The SimpleCPUOffload connector's lookup (SimpleCPUOffloadScheduler.get_num_new_matched_tokens):
hand-checked answers on real vLLM and the reference, the safety rule on its own, the check's
verdict and coverage (its recorded finding where a release has it), the plain-vLLM test it
prints for a match that breaks a rule, and its broken variant caught."""

import pytest

from kvspec.draws.simple_offload import SPLIT_LOCAL_CHUNK
from kvspec.emit.simple_offload_test import failing_match_test, safe_matches
from kvspec.emit.vllm_style import style_problems
from kvspec.gate.coverage import shortfalls
from kvspec.gate.names import Outcome
from kvspec.gate.options import GateOptions
from kvspec.gate.simple_offload import SIMPLE_OFFLOAD_MINIMUMS, check_simple_offload
from kvspec.impl.broken import applied
from kvspec.impl.simple_offload import simple_offload_matched
from kvspec.reference.simple_offload import simple_offload_matched as reference_matched
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload import SimpleOffloadCase, matched_tokens_unsafe_reason
from kvspec.tools import matrix

HYBRID = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16)
CPU = CacheState(4, frozenset({(0, 0), (0, 1), (0, 2), (1, 2)}))  # full 3 blocks, Mamba's state at 48
# Read by hand from manager.py: the CPU hit is 48 (full attention's 3 blocks, Mamba's state at
# 48); past a local prefix of 16 it is 32 more; a local chunk of 32 ending inside... none here.
BY_HAND = {0: 48, 16: 32, 32: 16, 48: 0}
# [full 4, chunked local 4 (chunk 8)], a local prefix of 4 inside chunk [0, 8), the CPU pool
# without the local group's [8, 12): docs/findings/simple-offload-splits-a-local-chunk-before-0.33.md.
SPLIT_CHUNK = SPLIT_LOCAL_CHUNK  # one of the check's fixed cases
SPLIT_CHUNK_FAILURE = "SimpleCPUOffload matches 8 past 4: group 1 (chunked_local) lacks KV for tokens [8, 12)"


def split_chunk_recorded(version: str) -> bool:
    return any(f.id == "simple-offload-splits-a-local-chunk" and version in f.releases for f in matrix.load())


@pytest.mark.parametrize("num_computed", sorted(BY_HAND))
def test_vllm_and_the_reference_match_as_read_by_hand(vllm_adapter, num_computed):
    case = SimpleOffloadCase(HYBRID, CPU, 64, num_computed)
    assert simple_offload_matched(vllm_adapter, case) == (BY_HAND[num_computed], BY_HAND[num_computed] > 0)
    assert reference_matched(case) == BY_HAND[num_computed]


def test_the_spec_rejects_a_match_past_what_the_cpu_holds():
    case = SimpleOffloadCase(HYBRID, CPU, 64, 16)
    assert matched_tokens_unsafe_reason(case, 32) is None
    assert "mamba" in matched_tokens_unsafe_reason(case, 16)  # no Mamba state at 32
    assert matched_tokens_unsafe_reason(case, 48)  # past the prompt less its last token


def test_a_split_local_chunk_matches_as_read_by_hand(vllm_adapter):
    """0.32 and older look the suffix up as if it began the request: 8 tokens, which need the
    local group's [8, 12) at 12 in all; 0.33 refuses. The spec allows 0 or 4."""
    recorded = split_chunk_recorded(vllm_adapter.version)
    assert simple_offload_matched(vllm_adapter, SPLIT_CHUNK) == ((8, True) if recorded else (0, False))
    assert reference_matched(SPLIT_CHUNK, vllm_adapter.rules) == (8 if recorded else 0)
    assert safe_matches(SPLIT_CHUNK) == [0, 4]
    assert "lacks KV for tokens [8, 12)" in matched_tokens_unsafe_reason(SPLIT_CHUNK, 8)


def test_the_check_holds_above_its_minimums_or_fails_with_its_recorded_finding(vllm_adapter):
    result = check_simple_offload(vllm_adapter, GateOptions())
    if split_chunk_recorded(vllm_adapter.version):  # its fixed case, whatever the seed
        assert not result.holds and result.details[0].startswith("fixed case"), result.details
        assert result.details[1].startswith(SPLIT_CHUNK_FAILURE)
        assert result.details[2:3] == ["as a vLLM test:"] and "    assert matched in (0, 4)" in result.details
        return
    assert result.holds, result.details
    assert shortfalls(result.coverage, SIMPLE_OFFLOAD_MINIMUMS) == []


def test_an_unsafe_match_prints_a_paste_ready_test_of_the_safe_ones(tmp_path):
    source = failing_match_test(SPLIT_CHUNK, 8, 8, "simple offload unsafe match")
    assert "get_num_new_matched_tokens(request, 4)" in source
    assert source.rstrip().endswith("assert matched in (0, 4)")
    (tmp_path / "test_printed.py").write_text(source)
    assert not style_problems([tmp_path / "test_printed.py"])
    # A safe match off the reference asserts the reference's.
    assert failing_match_test(SPLIT_CHUNK, 0, 4, "off").rstrip().endswith("assert matched == 0")


def test_the_broken_variant_is_caught(vllm_adapter):
    with applied(vllm_adapter, ["simple-offload-counts-the-local-prefix"]):
        result = check_simple_offload(vllm_adapter, GateOptions(scale=0.1))
    assert result.outcome is Outcome.RULE_VIOLATED, result.details
    # The match it caught is unsafe: the test it prints asserts the safe matches.
    assert "as a vLLM test:" in result.details and any(
        line.startswith("    assert matched in ") for line in result.details), result.details
