"""The gate on a release older than the suite's two (impl/vllm-versions.txt), run as a user runs
it: its own process, since one process imports one vLLM. The grouping is taken where that
release plans it (impl/grouping_entry.py) and judged by its own rules, and a feature it lacks is
said to be not in this release, never passed. `make matrix` runs every check at the full budget."""

import json
import os
import subprocess
import sys

import pytest

from kvspec.impl.target import releases_home, supported_versions
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES, rules_of
from kvspec.tools import matrix

OLDER = [v for v in supported_versions()[2:] if LOOKAHEAD_BLOCK_HASHES not in rules_of(v)]
CHECKS = ("grouping", "warning gate", "stateful KVCacheManager")


@pytest.mark.every_release
@pytest.mark.parametrize("version", OLDER)
def test_an_older_release_is_grouped_by_its_own_rules_and_lacks_lookahead(version, tmp_path):
    if not (releases_home() / version).is_dir():
        pytest.skip(f"vLLM {version} is not installed (scripts/setup.sh {version})")
    report = tmp_path / "check.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPEC_VLLM")}
    command = [sys.executable, "-m", "kvspec.cli", "check", "--vllm", version, "--quick", "--json", str(report)]
    for check in CHECKS:
        command += ["--check", check]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    rows = {row["check"]: row for row in json.loads(report.read_text())["checks"]}
    # A finding recorded for this release (release-findings.toml) is reported as any: the
    # grouping of 0.31-0.33 crashes on a sliding-window MLA promotion wherever the draws reach it.
    recorded = {(f.check, f.verdict) for f in matrix.load() if version in f.releases}
    verdicts = {c: rows[c]["verdict"] for c in CHECKS}
    assert {c: v for c, v in verdicts.items() if v != "holds" and (c, v) not in recorded} == {}
    assert done.returncode == (0 if set(verdicts.values()) == {"holds"} else 1), done.stdout + done.stderr
    if verdicts["grouping"] == "holds":  # the workers' phase runs after the drawn shapes
        assert "two workers" in rows["grouping"]["covered"]  # several workers merged by vLLM itself
    assert rows["stateful KVCacheManager"]["not_in_release"] == ["EAGLE lookahead hashes"]
    assert "not in this release" in done.stdout
