"""What every check of ``kvspec check`` returns, and how a check runs a Hypothesis property
seeded by the gate's ``--seed`` so that a reported failure replays from the printed seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import hypothesis


@dataclass
class CheckResult:
    name: str
    covered: str
    holds: bool
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    coverage: dict[str, int] = field(default_factory=dict)  # situations reached, for a coverage table

    @property
    def verdict(self) -> str:
        return "holds" if self.holds else "FAILS"


def scaled(examples: int, scale: float) -> int:
    """A check's example budget under ``kvspec check --quick`` (scale < 1)."""
    return max(1, round(examples * scale))


def gate_settings(examples: int, **overrides) -> hypothesis.settings:
    """Reproducible from the seed alone: no example database, no deadline, one bug reported."""
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=list(hypothesis.HealthCheck),
        **overrides,
    )


def failure_lines(exc: BaseException) -> list[str]:
    """The failure's message, then the minimal failing input Hypothesis attached as notes."""
    lines = str(exc).splitlines() or [""]
    if not isinstance(exc, AssertionError):  # vLLM (or the harness) crashed on a valid input
        lines[0] = f"{type(exc).__name__} raised: {lines[0]}"
    notes = [line for note in getattr(exc, "__notes__", []) for line in note.splitlines()]
    # Hypothesis's explanation of which lines only failing cases ran is noise in a report.
    if "Explanation:" in notes:
        notes = notes[: notes.index("Explanation:")]
    return lines + notes


def run_property(
    prop: Callable[[object], None],
    strategy,
    *,
    seed: int,
    examples: int,
    fixed: Iterable[object] = (),
) -> list[str]:
    """Run ``prop`` on ``examples`` values drawn from ``strategy`` (after the ``fixed`` ones),
    seeded; returns the failure's lines, or [] when it held throughout."""

    def test(value):
        prop(value)

    test = hypothesis.given(strategy)(test)
    for value in reversed(list(fixed)):
        test = hypothesis.example(value)(test)
    test = hypothesis.seed(seed)(gate_settings(examples)(test))
    try:
        test()
    except Exception as exc:  # noqa: BLE001 - any failure of the property is the check's verdict
        return failure_lines(exc)
    return []
