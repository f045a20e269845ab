"""The judge of a request's saves to the Mooncake store: the safety rules of spec/stores.py its
masks break, as data, and what it stores against the reference's prediction (reference/stores.py)
as gaps and unread blocks, which the gate files as divergences."""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.oracles.invariants import STORE_HELD, Violation
from kvspec.spec.stores import (
    StoreCase,
    store_completeness_gaps,
    store_safety_violations,
    store_unread_blocks,
    stored_blocks,
)


def store_violations(case: StoreCase, masks_per_save) -> list[Violation]:
    """Every save's masks put only blocks the request holds, in their own group."""
    return [
        Violation(STORE_HELD, f"save [{save.start}, {save.end}): {reason}")
        for save, masks in zip(case.saves, masks_per_save, strict=True)
        for reason in store_safety_violations(case.setting, save, masks)
    ]


@dataclass(frozen=True)
class StoreComparison:
    """What the saves put against what a later lookup reads (per group, block indices)."""

    stored: dict[int, frozenset[int]]
    gaps: dict[int, frozenset[int]]  # read by a later lookup, never put
    unread: dict[int, frozenset[int]]  # put, read by no later lookup at a boundary

    @property
    def exact(self) -> bool:
        return not self.gaps and not self.unread


def compare_with_reference(case: StoreCase, masks_per_save, needed: dict[int, frozenset[int]]) -> StoreComparison:
    """The union of the blocks the saves put, against ``needed`` (reference/stores.py)."""
    stored: dict[int, frozenset[int]] = {gid: frozenset() for gid in range(len(case.setting.groups))}
    for save, masks in zip(case.saves, masks_per_save, strict=True):
        for gid, blocks in stored_blocks(case.setting, save, masks).items():
            stored[gid] |= blocks
    return StoreComparison(
        stored,
        store_completeness_gaps(case.setting, needed, stored),
        store_unread_blocks(case.setting, needed, stored),
    )
