"""What every check of ``kvspec check`` returns, and how a check runs a Hypothesis property
seeded by the gate's ``--seed`` so that a reported failure replays from the printed seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import hypothesis

from kvspec.gate.names import Outcome
from kvspec.impl.failures import classify, describe
from kvspec.impl.watchdog import VllmHung


@dataclass
class CheckResult:
    name: str
    covered: str
    holds: bool
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    coverage: dict[str, int] = field(default_factory=dict)  # situations reached, for a coverage table
    # The least count each situation must reach (kvspec/gate/coverage.py); the registry enforces it.
    minimums: dict[str, int] = field(default_factory=dict)
    # Set by the registry for the outcomes a check does not decide itself (a crash, a hang, a
    # symbol kvspec cannot drive); else ``holds`` decides.
    outcome: Outcome | None = None
    longest_vllm_call: float = 0.0  # seconds, as the watchdog saw it (impl/watchdog.py)
    # Parts of the check this release lacks the feature for (spec/releases.py): neither run
    # nor passed, and said so in the row, the JSON and the tally.
    not_in_release: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.outcome is None:
            self.outcome = Outcome.HOLDS if self.holds else Outcome.RULE_VIOLATED
        elif self.holds != (self.outcome is Outcome.HOLDS):
            raise ValueError(f"{self.name}: holds={self.holds} contradicts outcome {self.outcome!r}")

    @property
    def verdict(self) -> str:
        return self.outcome.value


def scaled(examples: int, scale: float) -> int:
    """A check's example budget under ``kvspec check --quick`` (scale < 1)."""
    return max(1, round(examples * scale))


def gate_settings(examples: int, **overrides) -> hypothesis.settings:
    """Reproducible from the seed alone: no example database, no deadline, one bug reported, and
    no explain phase: its traced reruns of a failure only name the lines failing cases ran,
    which a report leaves out (note_lines)."""
    chosen = {
        "deadline": None,
        "database": None,
        "report_multiple_bugs": False,
        "suppress_health_check": list(hypothesis.HealthCheck),
        "phases": [hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink],
    }
    return hypothesis.settings(max_examples=examples, **(chosen | overrides))


def failure_lines(exc: BaseException) -> list[str]:
    """The failure's message, then the minimal failing input Hypothesis attached as notes."""
    lines = str(exc).splitlines() or [""]
    if not isinstance(exc, AssertionError):  # vLLM (or the harness) crashed on a valid input
        lines[0] = f"{type(exc).__name__} raised: {lines[0]}"
    return lines + note_lines(exc)


def note_lines(exc: BaseException) -> list[str]:
    """The notes on ``exc`` (the minimal input Hypothesis found, a replay kvspec attached),
    without Hypothesis's explanation of which lines only failing cases ran: noise in a report."""
    lines: list[str] = []
    for note in getattr(exc, "__notes__", []):
        if note.lstrip().startswith("Explanation:"):
            continue
        lines += note.splitlines()
    return lines


def run_property(
    prop: Callable[[object], None],
    strategy,
    *,
    seed: int,
    examples: int,
    fixed: Iterable[object] = (),
    replay: Callable[[object], str] | None = None,
) -> list[str]:
    """Run ``prop`` on ``examples`` values drawn from ``strategy`` (after the ``fixed`` ones),
    seeded; returns the lines of a rule it found violated, or [] when it held throughout.

    A crash, a hang or a failure to drive vLLM is not a rule's verdict: it is raised for the
    registry to report (impl/failures.py), a crash with ``replay`` of its minimal input (a
    plain-vLLM test) and a hang with the input it hung on."""
    last: list[object] = [None]

    def test(value):
        last[0] = value
        try:
            prop(value)
        except VllmHung as hung:  # Hypothesis lets it through unshrunk: say what it hung on
            hung.add_note(f"on the input {value!r}")
            raise

    test = hypothesis.given(strategy)(test)
    for value in reversed(list(fixed)):
        test = hypothesis.example(value)(test)
    test = hypothesis.seed(seed)(gate_settings(examples)(test))
    try:
        test()
    except Exception as exc:  # noqa: BLE001 - judged below: a rule's verdict, or raised on
        outcome = classify(exc)
        if outcome is Outcome.RULE_VIOLATED:
            return failure_lines(exc)
        if outcome is Outcome.VLLM_CRASHED and replay is not None:
            exc.add_note("as a vLLM test that reproduces the crash:\n" + replay(last[0]))
        raise
    return []


def not_a_rule_verdict(exc: BaseException) -> bool:
    """Whether ``exc`` is a crash, a hang or a failure to drive, for the registry to report."""
    return classify(exc) is not Outcome.RULE_VIOLATED


def outcome_result(name: str, exc: BaseException) -> CheckResult:
    """The row of a check that ended in ``exc``: its outcome, first line and notes (the minimal
    input Hypothesis found, the vLLM test that replays it)."""
    outcome = classify(exc)
    if outcome is Outcome.RULE_VIOLATED:
        return CheckResult(name, "stopped by a violated rule", holds=False, details=failure_lines(exc))
    return CheckResult(name, f"stopped: {outcome.value}", holds=False, outcome=outcome,
                       details=[describe(exc), *note_lines(exc)])
