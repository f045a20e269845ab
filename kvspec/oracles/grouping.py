"""The judge of one grouping: how vLLM's grouping of a model (or its refusal) departs from the
reference's (reference/grouping.py), and which property of spec/grouping_properties.py it
breaks, as data."""

from __future__ import annotations

from kvspec.oracles.invariants import GROUPS_EQUAL, REFUSAL_EQUAL, WARNINGS_EQUAL, Violation, property_invariant
from kvspec.spec.grouping import Grouping, Refusal
from kvspec.spec.grouping_properties import PROPERTIES, Model


def grouping_violations(model: Model, actual: Grouping | BaseException, expected: Grouping | Refusal) -> list[Violation]:
    """``actual`` is vLLM's grouping of ``model``, or the exception it raised; a refusal agrees
    with the reference's when its class does."""
    if isinstance(actual, BaseException):
        if isinstance(expected, Refusal) and type(actual) is expected.error:
            return []
        return [Violation(REFUSAL_EQUAL, f"vLLM raised {type(actual).__name__}: {actual}; the reference expected {expected}")]
    if isinstance(expected, Refusal):
        return [Violation(REFUSAL_EQUAL, f"vLLM grouped {actual}; the reference expected "
                                         f"{expected.error.__name__}: {expected.reason}")]
    found = []
    if len(actual.groups) != len(expected.groups):
        found.append(Violation(GROUPS_EQUAL, f"{len(actual.groups)} groups, expected {len(expected.groups)}"))
    for i, (got, want) in enumerate(zip(actual.groups, expected.groups)):
        if got != want:
            found.append(Violation(GROUPS_EQUAL, f"group {i}: vLLM {got}\n          expected {want}"))
    if actual.warnings != expected.warnings:
        found.append(Violation(WARNINGS_EQUAL, f"warnings: vLLM {actual.warnings}, expected {expected.warnings}"))
    return found + [Violation(property_invariant(prop), f"{prop.__name__}: {problem}")
                    for prop in PROPERTIES for problem in prop(model, actual)]


def hisparse_grouping_violations(actual: tuple | BaseException, expected: tuple | Refusal) -> list[Violation]:
    """``actual`` is vLLM's HiSparse grouping (its groups with their roles,
    spec/hisparse_grouping.py:RoledGroup), or the exception it raised; ``expected`` the
    reference's (reference/hisparse_grouping.py). A refusal agrees when its class does and its
    message begins as the spec states, where it states one."""
    if isinstance(actual, BaseException) or isinstance(expected, Refusal):
        if isinstance(actual, BaseException) and isinstance(expected, Refusal) and type(actual) is expected.error \
                and str(actual).startswith(expected.message or ""):
            return []
        got = f"raised {type(actual).__name__}: {actual}" if isinstance(actual, BaseException) else f"grouped {actual}"
        want = f"{expected.error.__name__}: {expected.reason}" if isinstance(expected, Refusal) else f"{expected}"
        return [Violation(REFUSAL_EQUAL, f"with HiSparse, vLLM {got}; the reference expected {want}")]
    found = []
    if len(actual) != len(expected):
        found.append(Violation(GROUPS_EQUAL, f"with HiSparse, {len(actual)} groups, expected {len(expected)}"))
    for i, (got, want) in enumerate(zip(actual, expected)):
        if got != want:
            found.append(Violation(GROUPS_EQUAL, f"with HiSparse, group {i}: vLLM {got}\n          expected {want}"))
    return found
