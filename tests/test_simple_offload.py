"""The SimpleCPUOffload connector's lookup (SimpleCPUOffloadScheduler.get_num_new_matched_tokens):
hand-checked answers on real vLLM and the reference, the safety rule on its own, the check's
verdict and coverage, and its broken variant caught."""

import pytest

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

HYBRID = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16)
CPU = CacheState(4, frozenset({(0, 0), (0, 1), (0, 2), (1, 2)}))  # full 3 blocks, Mamba's state at 48
# Read by hand from manager.py: the CPU hit is 48 (full attention's 3 blocks, Mamba's state at
# 48); past a local prefix of 16 it is 32 more; a local chunk of 32 ending inside... none here.
BY_HAND = {0: 48, 16: 32, 32: 16, 48: 0}


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


def test_the_check_holds_above_its_minimums(vllm_adapter):
    result = check_simple_offload(vllm_adapter, GateOptions())
    assert result.holds, result.details
    assert shortfalls(result.coverage, SIMPLE_OFFLOAD_MINIMUMS) == []


def test_the_broken_variant_is_caught(vllm_adapter):
    with applied(vllm_adapter, ["simple-offload-counts-the-local-prefix"]):
        result = check_simple_offload(vllm_adapter, GateOptions(scale=0.1))
    assert result.outcome is Outcome.RULE_VIOLATED, result.details
