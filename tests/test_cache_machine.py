"""The stateful check of a real KVCacheManager (kvspec/cache_machine.py)."""

import pytest
from hypothesis import Phase, settings

from kvspec.cache_machine import make_cache_machine
from kvspec.impl.broken import applied


def test_kv_cache_manager_hits_are_safe_and_blocks_accounted(vllm_adapter):
    machine = make_cache_machine(vllm_adapter)
    machine.TestCase.settings = settings(
        max_examples=60, stateful_step_count=30, deadline=None, derandomize=True
    )
    machine.TestCase().runTest()


def test_short_sliding_window_run_is_caught(vllm_adapter):
    machine = make_cache_machine(vllm_adapter)
    machine.TestCase.settings = settings(
        max_examples=200, stateful_step_count=30, deadline=None, derandomize=True,
        report_multiple_bugs=False,
        phases=[Phase.generate],  # caught is enough here; the gate shrinks (slowly) to a minimal run
    )
    with applied(vllm_adapter, ["sliding-window-short-run"]):
        with pytest.raises(AssertionError, match="unsafe hit"):
            machine.TestCase().runTest()
