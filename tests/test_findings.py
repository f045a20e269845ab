"""Every finding recorded against an older release (release-findings.toml) carries plain-vLLM
tests in its report under docs/findings/. Each, run alone by pytest with only that vLLM
importable, fails on every release the finding names and passes on the release that fixed it.
An open finding, which no release read has fixed, is a release rule (spec/releases.py): its
tests fail on every release the rule holds for. Every report's tests are paste-ready."""

import re
from pathlib import Path

import pytest
from plain_vllm import run_each

from kvspec.emit.vllm_style import style_problems
from kvspec.impl.target import TargetError, resolve, supported_versions
from kvspec.spec.open_findings import (
    LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES,
    MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD,
    RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS,
    SINK_MANAGER_REFUSES_THE_ZEROING_FLAG,
    SLIDING_WINDOW_MLA_MERGE_IGNORES_ATTENTION_FIELDS,
)
from kvspec.tools.matrix import load

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = load()
# Reports of findings no release read has fixed, by the rule that states them.
OPEN_FINDINGS = {
    "docs/findings/sink-full-attention-manager-cannot-be-built.md": SINK_MANAGER_REFUSES_THE_ZEROING_FLAG,
    "docs/findings/sliding-window-mla-merge-ignores-attention-fields.md": SLIDING_WINDOW_MLA_MERGE_IGNORES_ATTENTION_FIELDS,
    "docs/findings/rswa-decode-blocks-published-under-token-keys.md": RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS,
    "docs/findings/lookup-reads-past-the-lookahead-hashes.md": LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES,
    "docs/findings/mamba-prefill-stalls-under-multi-module-mtp.md": MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD,
}


def report_tests(report: Path) -> list[str]:
    """The Python code blocks of a report that define a test."""
    blocks = re.findall(r"```python\n(.*?)```", report.read_text(), re.S)
    return [block for block in blocks if "def test_" in block]


def expected_outcomes(version: str) -> dict[str, tuple[str, str]]:
    """(source, "failed" or "passed") of every report test with a verdict on ``version``, by a
    name that says whose test it is: it fails where its finding is, passes where it was fixed,
    and an open finding's fails wherever its rule holds."""
    expected = {}
    for report, failing, passing in [(f.report, f.releases, [f.fixed_in]) for f in FINDINGS] + [
            (report, rule.holds_for, []) for report, rule in OPEN_FINDINGS.items()]:
        verdict = "failed" if version in failing else "passed" if version in passing else None
        for number, source in enumerate(report_tests(ROOT / report) if verdict else []):
            expected[f"{Path(report).stem.replace('-', '_').replace('.', '_')}_{number}"] = (source, verdict)
    return expected


def test_every_report_has_a_plain_vllm_test():
    assert FINDINGS
    for finding in FINDINGS:
        assert report_tests(ROOT / finding.report), finding.id


@pytest.mark.every_release
@pytest.mark.parametrize("version", supported_versions())
def test_each_release_fails_the_tests_of_its_findings_and_passes_those_of_findings_it_fixed(version, tmp_path):
    """All the report tests with a verdict on ``version`` share one pytest process there."""
    expected = expected_outcomes(version)
    if not expected:
        pytest.skip(f"no finding names vLLM {version}")
    try:
        tree = resolve(version).root
    except TargetError as exc:
        pytest.skip(f"vLLM {version} is not set up here: {exc}")
    outcomes = run_each({name: source for name, (source, _) in expected.items()}, tree, tmp_path / version)
    wrong = {name: f"{outcomes[name].status}, expected {verdict}:\n{outcomes[name].text[-2000:]}"
             for name, (_, verdict) in expected.items() if outcomes[name].status != verdict}
    assert not wrong, "\n".join(f"{name}: {why}" for name, why in wrong.items())


def test_every_finding_and_open_finding_has_a_verdict_on_some_release():
    names = {name for version in supported_versions() for name in expected_outcomes(version)}
    for report in {f.report for f in FINDINGS} | set(OPEN_FINDINGS):
        assert any(name.startswith(Path(report).stem.replace("-", "_").replace(".", "_")) for name in names), report
    fixed = {f.fixed_in for f in FINDINGS}
    assert all(any(v == "passed" for _, v in expected_outcomes(version).values()) for version in fixed)


def test_every_reports_tests_are_paste_ready(tmp_path):
    paths = []
    for number, report in enumerate(sorted({f.report for f in FINDINGS} | set(OPEN_FINDINGS))):
        for index, source in enumerate(report_tests(ROOT / report)):
            paths.append(tmp_path / f"test_report_{number}_{index}.py")
            paths[-1].write_text(source)
    assert len(paths) >= 4
    assert not style_problems(paths)
