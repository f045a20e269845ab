"""``kvspec check --junit FILE`` read back with a JUnit parser, as a CI system reads it: one test
case per check; a finding is a failure carrying its minimal case, "cannot drive" an error, a
part of a check the release lacks a skipped case."""

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped
from vllm_copies import run_kvspec

from kvspec.gate.names import Outcome
from kvspec.gate.result import CheckResult
from kvspec.tools.junit_report import junit_xml


def _cases(path):
    (suite,) = JUnitXml.fromfile(str(path))
    return suite, {case.name: case for case in suite}


@pytest.mark.release_independent
def test_a_holding_run_is_one_passing_case_per_check(tmp_path):
    out = tmp_path / "gate.xml"
    proc = run_kvspec("check", "--quick", "--check", "seed: hybrid coordinator", "--check", "block sizes",
                      "--junit", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suite, cases = _cases(out)
    assert set(cases) == {"seed: hybrid coordinator", "block sizes"}
    assert all(case.is_passed for case in cases.values())
    assert suite.tests == 2 and suite.failures == 0 and suite.errors == 0
    assert "vLLM" in suite.name


@pytest.mark.release_independent
def test_a_broken_variant_is_a_failure_with_its_message_and_minimal_case(tmp_path):
    out = tmp_path / "gate.xml"
    proc = run_kvspec("check", "--quick", "--check", "grouping", "--inject", "group-size-one-per-layer",
                      "--junit", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    suite, cases = _cases(out)
    (failure,) = cases["grouping"].result
    assert isinstance(failure, Failure) and suite.failures == 1
    assert failure.message.startswith("FAILS: ") and "groups, expected" in failure.message
    assert "Failing test case" in failure.text  # Hypothesis's minimal case
    assert "replay: " in failure.text and "--inject group-size-one-per-layer" in failure.text


def test_cannot_drive_is_an_error_a_crash_a_failure_and_a_missing_part_skipped(tmp_path):
    results = [
        CheckResult("grouping", "stopped", holds=False, outcome=Outcome.CANNOT_DRIVE,
                    details=["kvspec cannot drive: vllm.v1.core.kv_cache_utils has no get_kv_cache_groups"]),
        CheckResult("prefix-cache lookups", "stopped", holds=False, outcome=Outcome.VLLM_CRASHED,
                    details=["IndexError raised: list index out of range"]),
        CheckResult("stateful KVCacheManager", "20 runs", holds=True, not_in_release=["EAGLE lookahead hashes"]),
    ]
    out = tmp_path / "made.xml"
    out.write_text(junit_xml(results, "vLLM 0.30.0 (release)", replays={}))
    suite, cases = _cases(out)
    assert isinstance(cases["grouping"].result[0], Error)
    assert isinstance(cases["prefix-cache lookups"].result[0], Failure)
    assert cases["stateful KVCacheManager"].is_passed
    (skipped,) = cases["stateful KVCacheManager: EAGLE lookahead hashes"].result
    assert isinstance(skipped, Skipped)
    assert (suite.tests, suite.errors, suite.failures, suite.skipped) == (4, 1, 1, 1)


@pytest.mark.release_independent
def test_an_unwritable_junit_path_is_refused_before_vllm_is_imported(tmp_path):
    proc = run_kvspec("check", "--quick", "--check", "grouping", "--junit", str(tmp_path / "missing" / "gate.xml"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--junit" in proc.stderr and "does not exist" in proc.stderr
    assert "importing" not in proc.stderr
