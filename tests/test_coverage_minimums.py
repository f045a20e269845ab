"""A check that holds but left a situation below its minimum is kvspec's failure to drive
(kvspec/gate/coverage.py), never a pass and never a vLLM finding."""

from kvspec.gate.coverage import scaled_minimum, shortfalls
from kvspec.gate.names import Outcome
from kvspec.gate.registry import _enforce_minimums
from kvspec.gate.result import CheckResult


def test_a_situation_below_its_minimum_is_named():
    lines = shortfalls({"kind rswa": 3, "kind full": 50}, {"kind rswa": 10, "kind full": 10, "kind sink": 1})
    assert len(lines) == 2
    assert "'kind rswa' reached 3 times, below its minimum 10" in lines[0]
    assert "'kind sink' reached 0 times" in lines[1]


def test_a_smoke_run_scales_each_minimum_but_never_to_zero():
    assert scaled_minimum(100, 0.1) == 10
    assert scaled_minimum(3, 0.1) == 1
    assert scaled_minimum(7, 2.0) == 7
    assert shortfalls({"kind rswa": 10}, {"kind rswa": 100}, scale=0.1) == []


def test_a_holding_check_short_of_coverage_becomes_cannot_drive():
    held = CheckResult("grouping", "100 models", holds=True, details=["every rule held"],
                       coverage={"kind rswa": 2}, minimums={"kind rswa": 5})
    judged = _enforce_minimums(held, scale=1.0)
    assert judged.outcome is Outcome.CANNOT_DRIVE and not judged.holds
    assert judged.details[0].startswith("coverage: 'kind rswa' reached 2 times")


def test_a_failing_check_keeps_its_finding():
    failed = CheckResult("grouping", "100 models", holds=False, details=["a rule broke"],
                         coverage={}, minimums={"kind rswa": 5})
    assert _enforce_minimums(failed, scale=1.0).outcome is Outcome.RULE_VIOLATED


def test_a_check_at_its_minimums_holds():
    held = CheckResult("grouping", "100 models", holds=True, coverage={"kind rswa": 5}, minimums={"kind rswa": 5})
    assert _enforce_minimums(held, scale=1.0).outcome is Outcome.HOLDS
