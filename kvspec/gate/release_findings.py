"""The vLLM bugs recorded per release (``release-findings.toml``, each with its report under
``docs/findings/``): what ``kvspec matrix`` expects of an older release's gate, and what a check
sets aside on a release that has one so that it still finds every other departure there."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from kvspec.gate.names import Check, Outcome
from kvspec.impl.target import PROJECT_ROOT, TargetError

FINDINGS_FILE = PROJECT_ROOT / "release-findings.toml"
FIELDS = ("id", "releases", "check", "verdict", "report", "fixed_in")


@dataclass(frozen=True)
class ReleaseFinding:
    id: str
    releases: tuple[str, ...]  # where vLLM has it
    check: str
    verdict: str
    report: str  # docs/findings/<id>.md: the upstream-style report with its plain-vLLM replays
    fixed_in: str


def load(path: Path = FINDINGS_FILE) -> list[ReleaseFinding]:
    """The recorded findings; a malformed file is a one-line TargetError."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TargetError(f"release findings: {path}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TargetError(f"release findings: {path}: {exc}") from None
    findings = []
    for i, entry in enumerate(data.get("finding", [])):
        if not (isinstance(entry, dict) and set(entry) == set(FIELDS) and isinstance(entry["releases"], list)
                and all(isinstance(v, str) for v in [*entry["releases"], *(entry[f] for f in FIELDS if f != "releases")])):
            raise TargetError(f"release findings: {path}: entry {i + 1} needs exactly the fields {', '.join(FIELDS)}, "
                              "releases a list of versions and the others text")
        finding = ReleaseFinding(**{**entry, "releases": tuple(entry["releases"])})
        if finding.check not in set(Check) or finding.verdict not in {o.value for o in Outcome if o.is_finding}:
            raise TargetError(f"release findings: {path}: {finding.id}: no check {finding.check!r} "
                              f"with a finding's verdict {finding.verdict!r}")
        if not (PROJECT_ROOT / finding.report).is_file():
            raise TargetError(f"release findings: {path}: {finding.id}: no report {finding.report}")
        findings.append(finding)
    return findings


# The words of vLLM's failure that tell a recorded finding apart from any other departure, for
# the findings a check sets aside: Hypothesis stops at a property's first failure, so a finding
# met on every run would otherwise hide, on its releases, every bug the same check could find.
SIGNATURES = {
    "sliding-window-mla-promotion-keeps-bounded-replay": "unexpected keyword argument 'bounded_replay'",
}


def recorded_departure(version: str, check: str, problems: list, findings: list[ReleaseFinding] | None = None) \
        -> ReleaseFinding | None:
    """The finding recorded for ``version`` on ``check`` that ``problems`` (a judge's
    violations) are, every one of them, or None: a departure with anything else in it is new."""
    for finding in load() if findings is None else findings:
        signature = SIGNATURES.get(finding.id)
        if signature and version in finding.releases and finding.check == check and problems \
                and all(signature in str(problem) for problem in problems):
            return finding
    return None
