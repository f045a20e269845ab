"""Every rule kvspec judges vLLM by, most severe first, and what a broken one looks like.

A judge (kvspec/oracles/*.py, kvspec/stateful/judge.py)
returns ``Violation`` values: the invariant broken and a detail for people. The gate asserts a
judge found none; review, fuzz, zoo and mutate read the same values, and a find is filed under
its most severe invariant. No verdict is ever taken from a message's wording: a failing
property raises ``Violated``, which carries its violations.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from kvspec.spec.grouping_properties import PROPERTIES

SAFE_HIT = "safe hit: every group can resume at the hit (spec/hits.py)"
DRAFTER_PROVEN = "drafter proven: a group that may hold the drafter proves the token at the hit (spec/hits.py)"
NULL_BLOCK = "no null block is read at the hit"
MAMBA_STATE = "Mamba adopts the state at the hit, not past it"
CAP_ALIGNED = "hit within the cap and on the alignment"
RESOLUTION = "the scheduler block, hash unit and hit alignment resolve as spec/resolution.py says"
EAGLE_MARGIN = "the EAGLE proof margin is spec/resolution.py's"
EQUALS_REFERENCE = "hit length equals the reference's (reference/lookup.py)"
BLOCKS_EQUAL = "reused blocks equal the reference's"
UNCACHED_PREFIX = "the uncached common prefix equals the reference's (reference/lookup.py)"
LOAD_MASK = "the Mooncake store loads, at its hit, exactly the blocks each group reads"
OFFLOAD_STORED = "the offloading connector loads only chunks the store holds"
STORE_HELD = "a store puts only blocks the request holds computed KV for, each in its own group (spec/stores.py)"
PINNED_MATCH = "a SimpleCPUOffload match stays in the CPU pool until its load is done (spec/simple_offload_pins.py)"
PINS_RELEASED = "SimpleCPUOffload pins only what a waiting match or a load holds (spec/simple_offload_pins.py)"
REFRESH_ORDER = "a SimpleCPUOffload admission refreshes only its local prefix's CPU copy (spec/simple_offload_pins.py)"
CRASHED = "vLLM does not crash on a valid input"
HUNG = "vLLM returns on a valid input within the deadline"
GROUPS_EQUAL = "groups equal the reference's (reference/grouping.py)"
WARNINGS_EQUAL = "warnings equal the reference's"
REFUSAL_EQUAL = "refuses exactly what the reference refuses"
STATEFUL_SAFE = "stateful: every hit and read finds the claimed prefix in its blocks"
STATEFUL_DRAFTER = "stateful: every hit's drafter KV was computed with the request's next token"
STATEFUL_CAP = "stateful: hit within the cap and on the alignment"
STATEFUL_REFERENCE = "stateful: hit equals the reference's over the reference cache model"
STATEFUL_BLOCKS = "stateful: the pool (ref counts, free queue, cached keys) equals the reference cache model's"
STATEFUL_WRITES = "stateful: what each step leaves cached and frees equals spec/caching.py (reference/published.py)"
STATEFUL_OTHER = "stateful: an assertion of kvspec/stateful/machine.py"
# A known divergence (kvspec/divergences/) met in a situation nobody recorded: safe, but new.
NEW_DIVERGENCE = "every divergence from the best the spec allows is recorded (known-divergences.toml)"


def property_invariant(prop) -> str:
    """The invariant of a spec/grouping_properties.py property: its name as a sentence."""
    return prop.__name__.replace("_", " ")


SEVERITY: tuple[str, ...] = (
    SAFE_HIT, NULL_BLOCK, MAMBA_STATE, STATEFUL_SAFE, STORE_HELD, PINNED_MATCH, CRASHED, HUNG, DRAFTER_PROVEN, STATEFUL_DRAFTER, CAP_ALIGNED,
    STATEFUL_CAP, RESOLUTION, EAGLE_MARGIN, STATEFUL_BLOCKS, PINS_RELEASED, REFRESH_ORDER, STATEFUL_WRITES, EQUALS_REFERENCE, STATEFUL_REFERENCE, STATEFUL_OTHER, BLOCKS_EQUAL,
    UNCACHED_PREFIX, LOAD_MASK, OFFLOAD_STORED, REFUSAL_EQUAL, GROUPS_EQUAL, WARNINGS_EQUAL,
    *(property_invariant(p) for p in PROPERTIES), NEW_DIVERGENCE,
)
_RANK = {name: rank for rank, name in enumerate(SEVERITY)}


class Violation(NamedTuple):
    invariant: str
    detail: str


def most_severe(violations: Iterable[Violation | tuple[str, str]]) -> Violation:
    return Violation(*min(violations, key=lambda v: _RANK.get(v[0], len(_RANK))))


def by_severity(violations: Iterable[Violation]) -> list[Violation]:
    return sorted(violations, key=lambda v: _RANK.get(v.invariant, len(_RANK)))


class Violated(AssertionError):
    """A property found violations. Its message is the most severe one's detail and the
    context, then the others' details, a line each; every verdict reads ``violations``."""

    def __init__(self, violations: Iterable[Violation], context: str = ""):
        self.violations = by_severity(violations)
        first, *rest = [v.detail for v in self.violations] or ["violated"]
        super().__init__("\n".join([first + (f"; {context}" if context else ""), *rest]))


def require_none(violations: list[Violation], context: str = "") -> None:
    """The gate's assertion over a judge's answer."""
    if violations:
        raise Violated(violations, context)


def fail(invariant: str, detail: str) -> None:
    raise Violated([Violation(invariant, detail)])


def violations_of(exc: BaseException, otherwise: str = STATEFUL_OTHER) -> list[Violation]:
    """What a failed property broke: its violations, or a crash of vLLM's on a valid input, or
    (an assertion kvspec makes outside any judge) ``otherwise``."""
    if isinstance(exc, Violated):
        return exc.violations
    first = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, AssertionError):
        return [Violation(otherwise, first)]
    return [Violation(CRASHED, f"{type(exc).__name__}: {first}")]
