"""Every finding recorded against an older release (release-findings.toml) carries plain-vLLM
tests in its report under docs/findings/. Each, run alone by pytest with only that vLLM
importable, fails on every release the finding names and passes on the release that fixed it.
An open finding, which no release read has fixed, is a release rule (spec/releases.py): its
tests fail on every release the rule holds for. Every report's tests are paste-ready."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvspec.emit.vllm_style import style_problems
from kvspec.impl.target import TargetError, resolve
from kvspec.spec.releases import SINK_MANAGER_REFUSES_THE_ZEROING_FLAG
from kvspec.tools.matrix import load

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = load()
# Reports of findings no release read has fixed, by the rule that states them.
OPEN_FINDINGS = {"docs/findings/sink-full-attention-manager-cannot-be-built.md": SINK_MANAGER_REFUSES_THE_ZEROING_FLAG}


def report_tests(report: Path) -> list[str]:
    """The Python code blocks of a report that define a test."""
    blocks = re.findall(r"```python\n(.*?)```", report.read_text(), re.S)
    return [block for block in blocks if "def test_" in block]


def run_alone(source: str, version: str, where: Path) -> subprocess.CompletedProcess:
    try:
        tree = resolve(version).root
    except TargetError as exc:
        pytest.skip(f"vLLM {version} is not set up here: {exc}")
    where.mkdir(parents=True)
    (where / "pytest.ini").write_text("[pytest]\n")
    (where / "test_finding.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPEC_")} | {"PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "."],
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)


def test_every_report_has_a_plain_vllm_test():
    assert FINDINGS
    for finding in FINDINGS:
        assert report_tests(ROOT / finding.report), finding.id


@pytest.mark.every_release
@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f.id)
def test_a_findings_tests_fail_on_its_releases_and_pass_where_it_was_fixed(finding, tmp_path):
    for number, source in enumerate(report_tests(ROOT / finding.report)):
        for version in finding.releases:
            result = run_alone(source, version, tmp_path / f"{number}-{version}")
            assert result.returncode == 1, f"{finding.id} test {number} on {version}:\n{result.stdout[-2000:]}"
        fixed = run_alone(source, finding.fixed_in, tmp_path / f"{number}-{finding.fixed_in}")
        assert fixed.returncode == 0, f"{finding.id} test {number} on {finding.fixed_in}:\n{fixed.stdout[-2000:]}"


@pytest.mark.every_release
@pytest.mark.parametrize("report", sorted(OPEN_FINDINGS))
def test_an_open_findings_tests_fail_on_every_release_its_rule_holds_for(report, tmp_path):
    sources = report_tests(ROOT / report)
    assert sources
    for number, source in enumerate(sources):
        for version in OPEN_FINDINGS[report].holds_for:
            result = run_alone(source, version, tmp_path / f"{number}-{version}")
            assert result.returncode == 1, f"{report} test {number} on {version}:\n{result.stdout[-2000:]}"


def test_every_reports_tests_are_paste_ready(tmp_path):
    paths = []
    for number, report in enumerate(sorted({f.report for f in FINDINGS} | set(OPEN_FINDINGS))):
        for index, source in enumerate(report_tests(ROOT / report)):
            paths.append(tmp_path / f"test_report_{number}_{index}.py")
            paths[-1].write_text(source)
    assert len(paths) >= 4
    assert not style_problems(paths)
