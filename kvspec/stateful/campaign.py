"""What a fuzzing campaign knows while it runs, and the stateful machine it runs: the gate's
``KVCacheManager`` machine, letting the campaign's known finds pass. ``kvspec check`` replays a
saved stateful find with this same class, since Hypothesis keys its example database by the
class's source (kvspec/gate/saved_finds.py)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from hypothesis.stateful import invariant

from kvspec.oracles.invariants import most_severe, violations_of
from kvspec.oracles.situations import stateful_situation
from kvspec.stateful.machine import make_cache_machine

KNOWN: set[tuple[str, str]] = set()  # (invariant, situation) of every saved find
LAST: dict = {}  # target -> the last input tried (Hypothesis replays the minimal failing one last)
REACHED: Counter = Counter()  # (target, situation) -> inputs tried
OBSERVERS: list[Callable[[str], None]] = []  # called with the target after every input
_adapter = None


def observe(target: str, situation: str) -> None:
    REACHED[(target, situation)] += 1
    for observer in OBSERVERS:
        observer(target)


def use(adapter, known: set[tuple[str, str]]) -> None:
    global _adapter
    _adapter = adapter
    KNOWN.clear()
    KNOWN.update(known)


def current_adapter():
    """The adapter ``use`` gave, or None before a campaign started."""
    return _adapter


def campaign_machine(vllm_adapter=None):
    """The gate's KVCacheManager machine, letting known finds pass and remembering the groups
    of the run in progress."""
    class CampaignMachine(make_cache_machine(vllm_adapter or current_adapter())):
        def setup(self, config, documents):
            LAST["stateful"] = config
            observe("stateful", stateful_situation(config.groups, config.eagle))
            super().setup(config, documents)

        def _judge_hit(self, *args, **kwargs):
            try:
                super()._judge_hit(*args, **kwargs)
            except AssertionError as exc:
                if (stateful_invariant(exc), stateful_situation(self.config.groups, self.config.eagle)) not in KNOWN:
                    raise

        @invariant()
        def blocks_are_accounted_for(self):
            try:
                super().blocks_are_accounted_for()
            except AssertionError as exc:
                if (stateful_invariant(exc), stateful_situation(self.config.groups, self.config.eagle)) not in KNOWN:
                    raise

    return CampaignMachine


def stateful_invariant(exc: BaseException) -> str:
    """The most severe invariant a stateful failure broke."""
    return most_severe(violations_of(exc)).invariant
