"""``kvspec check`` end to end, as a user runs it: each call is its own process with its own
vLLM, so the releases and a checkout are all exercised from one test run."""

import json
import subprocess

import pytest
from test_hits_conformance import judged_per_path
from vllm_copies import checkout_copy, rewrite, run_kvspec

from kvspec.gate.lookups import LOOKUP_EXAMPLES
from kvspec.gate.options import QUICK_SCALE
from kvspec.gate.result import scaled
from kvspec.impl.target import PROJECT_ROOT, releases_home, supported_versions
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES, rules_of
from kvspec.tools import matrix


@pytest.mark.every_release
@pytest.mark.parametrize("version", supported_versions())
def test_check_passes_on_every_supported_release(version, tmp_path):
    out = tmp_path / "check.json"
    proc = run_kvspec("check", "--quick", "--vllm", version, "--json", str(out))
    report = json.loads(out.read_text())
    # A finding recorded for an older release (release-findings.toml) is reported there, as any.
    recorded = any(version in f.releases for f in matrix.load())
    assert proc.returncode == (1 if recorded else 0), proc.stdout + proc.stderr
    # A quick run is a smoke run: it need not reach every recorded finding, but it meets no other.
    _code, lines = matrix.judge(version, report, matrix.load())
    assert not [line for line in lines if "a new finding" in line or "cannot drive" in line], proc.stdout
    assert f"vLLM {version} (release), seed 0, quick" in proc.stdout
    assert report["ok"] != recorded and report["target"]["version"] == version
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["seed: hybrid coordinator"]["details"] == ["EAGLE: hit 48; no EAGLE: hit 64"]
    assert checks["seed: Mooncake store"]["details"] == ["EAGLE: hit 48; no EAGLE: hit 64"]
    assert checks["warning gate"]["verdict"] == "holds"
    assert_both_lookup_paths_reach_the_budget(checks["prefix-cache lookups"])
    if LOOKAHEAD_BLOCK_HASHES not in rules_of(version):
        assert_a_release_without_lookahead_hashes_says_so(checks, proc.stdout)


def assert_a_release_without_lookahead_hashes_says_so(checks: dict, stdout: str) -> None:
    """An older release is grouped where it plans it (impl/grouping_entry.py), by its own rules,
    and a feature it lacks is said to be not in this release, never passed."""
    if checks["grouping"]["verdict"] == "holds":  # the workers' phase runs after the drawn shapes
        assert "two workers" in checks["grouping"]["covered"]  # several workers merged by vLLM itself
    assert checks["stateful KVCacheManager"]["not_in_release"] == ["EAGLE lookahead hashes"]
    assert "not in this release" in stdout


def assert_both_lookup_paths_reach_the_budget(lookups: dict) -> None:
    """The core and the store judge one stream of draws; each judges at least the budget (the
    store's own stream is drawn as well where the shared one leaves it short: 0.30 and 0.31)."""
    if lookups["covered"].startswith("stopped"):  # a crash recorded for this release (release-findings.toml)
        return
    core, store = judged_per_path(lookups["covered"])
    budget = scaled(LOOKUP_EXAMPLES, QUICK_SCALE)
    assert core >= budget and store >= budget, lookups["covered"]


@pytest.mark.release_independent
def test_check_fails_with_the_differing_numbers_when_the_mamba_gate_is_broken(tmp_path):
    out = tmp_path / "check.json"
    proc = run_kvspec("check", "--quick", "--inject", "mamba-peek-margin", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "EAGLE: vLLM hit 64, expected 48" in proc.stdout
    verdicts = {c["check"]: c["verdict"] for c in json.loads(out.read_text())["checks"]}
    assert verdicts["seed: hybrid coordinator"] == verdicts["seed: Mooncake store"] == "FAILS"


@pytest.mark.release_independent
def test_check_uses_the_checkout_files_and_catches_a_source_edit(tmp_path):
    checkout = checkout_copy(releases_home() / supported_versions()[0], tmp_path / "vllm-src")
    clean = run_kvspec("check", "--quick", "--vllm-src", str(checkout))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"vLLM checkout {checkout} (version dev)" in clean.stdout
    # The reviewer's change under test: the Mamba gate on the core coordinator's margin removed.
    rewrite(
        checkout / "vllm/v1/core/kv_cache_coordinator.py",
        "if drop_eagle_block and not isinstance(spec, MambaSpec):",
        "if drop_eagle_block:",
    )
    broken = run_kvspec("check", "--quick", "--vllm-src", str(checkout))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "seed: hybrid coordinator" in broken.stdout
    assert "EAGLE: vLLM hit 64, expected 48" in broken.stdout
    assert "seed: Mooncake store" in broken.stdout  # its own gate is intact: it still holds
    report_line = next(line for line in broken.stdout.splitlines() if line.startswith("seed: Mooncake"))
    assert "holds" in report_line


@pytest.mark.release_independent
@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "--vllm-src", "/nonexistent"], "--vllm-src /nonexistent: no such directory"),
        (["check", "--vllm", "0.35.0"], f"unsupported vLLM version '0.35.0' (supported: {', '.join(supported_versions())})"),
        (["check", "--vllm-src", str(PROJECT_ROOT / "spec")], "is not a vLLM checkout"),
        (["check", "--json", "/nonexistent/out.json"], "directory /nonexistent does not exist"),
        (["check", "--inject", "no-such-bug"], "unknown variant 'no-such-bug'"),
        (["check", "--vllm", "0.34.0", "--vllm-src", "/tmp"], "not allowed with argument"),
        (["chek"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_kvspec(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("kvspec: error: ")
    assert message in proc.stderr


@pytest.mark.release_independent
def test_unsupported_version_from_the_environment_is_refused_too():
    proc = run_kvspec("check", env_extra={"KVSPEC_VLLM": "0.29.0"})
    assert proc.returncode == 2 and "unsupported vLLM version '0.29.0'" in proc.stderr


@pytest.mark.release_independent
def test_setup_refuses_an_unsupported_version():
    proc = subprocess.run(
        ["bash", str(PROJECT_ROOT / "scripts/setup.sh"), "0.35.0"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"setup: error: unsupported vLLM version '0.35.0' (supported: {' '.join(supported_versions())})"
    )


def test_a_checkout_without_a_driven_module_cannot_drive_the_checks_that_need_it(tmp_path):
    checkout = checkout_copy(releases_home() / supported_versions()[0], tmp_path / "vllm-src")
    mooncake = checkout / "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/coordinator.py"
    mooncake.unlink()
    out = tmp_path / "check.json"
    proc = run_kvspec("check", "--quick", "--vllm-src", str(checkout), "--check", "seed: Mooncake store",
                      "--check", "seed: hybrid coordinator", "--json", str(out))
    # kvspec cannot drive this vLLM, which is not a vLLM bug: exit 3, the symbol named.
    assert proc.returncode == 3, proc.stdout + proc.stderr
    checks = {c["check"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["seed: Mooncake store"]["verdict"] == "cannot drive"
    first = checks["seed: Mooncake store"]["details"][0]
    assert "kvspec cannot drive vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator:" in first
    assert "(used at impl/vllm_adapter.py:" in first
    assert checks["seed: hybrid coordinator"]["verdict"] == "holds"
    assert "kvspec: 1 checks hold, 0 fail, 1 cannot drive" in proc.stdout
