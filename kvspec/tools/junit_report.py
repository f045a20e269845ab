"""``kvspec check --junit FILE``: the gate's results as JUnit XML, the format Buildkite's test
analytics, GitHub Actions' test reporters and Jenkins read.

* one ``<testcase>`` per check, in the suite ``kvspec check`` named after the target;
* a finding (a violated rule, vLLM crashed, vLLM hung) is a ``<failure>``: its message is the
  row's first line, its text the whole story (the minimal case Hypothesis found, the plain-vLLM
  test that replays it, the ``kvspec check`` command that does);
* "cannot drive" is an ``<error>``: kvspec's own failure to drive this vLLM, never vLLM's;
* each part of a check this release lacks (spec/releases.py) is a ``<testcase>`` of its own,
  ``<skipped>``: neither run nor passed.

The XML comes from ``junitparser`` (a kept JUnit library that also reads it back in the tests);
kvspec only maps outcomes to its elements.
"""

from __future__ import annotations

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from kvspec.gate.names import Outcome


def junit_xml(results, target_label: str, replays: dict[str, str]) -> str:
    """The JUnit document for ``results`` (CheckResult), as text."""
    suite = TestSuite(f"kvspec check ({target_label})")
    for result in results:
        suite.add_testcase(_case(result, target_label, replays.get(result.name)))
        for part in result.not_in_release:
            skipped = TestCase(f"{result.name}: {part}", classname=_classname(target_label))
            skipped.result = [Skipped(f"not in this release: {part}")]
            suite.add_testcase(skipped)
    suite.update_statistics()
    document = JUnitXml()
    document.add_testsuite(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + document.tostring().decode() + "\n"


def _classname(target_label: str) -> str:  # the suite names the target; CI groups cases by class
    return "kvspec.check"


def _case(result, target_label: str, replay: str | None) -> TestCase:
    case = TestCase(result.name, classname=_classname(target_label), time=round(result.seconds, 3))
    if result.outcome is Outcome.HOLDS:
        return case
    first = result.details[0] if result.details else result.verdict
    story = "\n".join(result.details + ([f"replay: {replay}"] if replay else []))
    kind = Error if result.outcome is Outcome.CANNOT_DRIVE else Failure
    verdict = kind(f"{result.verdict}: {first}", type_=result.verdict)
    verdict.text = story
    case.result = [verdict]
    return case
