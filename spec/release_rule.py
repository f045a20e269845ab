"""A release rule: a behaviour some of the vLLM releases kvspec reads have and others lack
(spec/releases.py holds the differences, spec/open_findings.py the vLLM bugs every release read
has)."""

from __future__ import annotations

from dataclasses import dataclass

# The releases every rule below was read against, oldest first.
READ_RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")


@dataclass(frozen=True)
class ReleaseRule:
    """One behaviour some releases have and others lack."""

    name: str
    holds_for: tuple[str, ...]  # of READ_RELEASES
    source: str  # the vLLM file:function it was read from
    description: str

    def __post_init__(self) -> None:
        if unknown := set(self.holds_for) - set(READ_RELEASES):
            raise ValueError(f"{self.name}: releases {sorted(unknown)} were never read")
