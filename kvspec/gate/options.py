"""What a gate run is asked for, passed to every check as a value. The command line builds it;
an environment variable is at most the default of a flag (kvspec/cli.py), never read here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvspec.divergences.known import KNOWN_FILE, KnownDivergence, load
from kvspec.impl.watchdog import DEFAULT_DEADLINE_SECONDS

# A smoke run's budget (`--quick`), and the first pass of `--quick-first` and of the zoo: a
# twentieth of each check's examples.
QUICK_SCALE = 0.05


@dataclass(frozen=True)
class GateOptions:
    seed: int = 0
    scale: float = 1.0  # the example budgets' factor: 1 is the gate, below 1 a smoke run
    divergences: Path = KNOWN_FILE
    strict_drafter: bool = False  # fail on every drafter-unproven hit, recorded or not
    deadline: float = DEFAULT_DEADLINE_SECONDS  # per call into vLLM; past it, "vLLM hung"
    _known: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def quick(self) -> bool:
        return self.scale < 1

    def known(self) -> dict[tuple[str, str], KnownDivergence]:
        """The recorded divergences by (kind, where), read once per run."""
        if not self._known:
            self._known.update(load(self.divergences, strict_drafter=self.strict_drafter))
        return self._known
