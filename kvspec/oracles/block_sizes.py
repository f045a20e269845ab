"""The judge of the sizes the engine resolves before it builds the KV-cache manager: the
scheduler block, the hash unit and the hit alignment (or a refusal), and the EAGLE proof
margin, against spec/resolution.py, as data."""

from __future__ import annotations

from kvspec.oracles.invariants import EAGLE_MARGIN, RESOLUTION, Violation

Sizes = tuple[int, int, int]  # (scheduler block, hash unit, hit alignment)


def resolution_violations(expected: Sizes | None, got: Sizes | ValueError, context: str) -> list[Violation]:
    """``expected`` None: the spec refuses the groups; ``got`` a ValueError: vLLM refused them."""
    if isinstance(got, ValueError):
        return [] if expected is None else [Violation(RESOLUTION, f"vLLM refused {context}: {got}")]
    if expected is None:
        return [Violation(RESOLUTION, f"vLLM resolved {got}, the spec refuses: {context}")]
    if got != expected:
        return [Violation(RESOLUTION, f"(scheduler, hash, alignment): vLLM {got}, spec {expected} for {context}")]
    return []


def margin_violations(case: tuple[int, int, bool], got: int, expected: int) -> list[Violation]:
    if got == expected:
        return []
    return [Violation(EAGLE_MARGIN, f"eagle_proof_margin{case}: vLLM {got}, spec {expected}")]
