"""The judge of a request's store steps on the OffloadingConnector: the safety rules of
spec/offloading_stores.py its store jobs break, as data, and what it stores against the
reference's prediction (reference/offloading_stores.py) as gaps and unread chunks, which the gate
files as divergences."""

from __future__ import annotations

from kvspec.oracles.invariants import STORE_HELD, Violation
from kvspec.oracles.stores import StoreComparison
from kvspec.spec.offloading_stores import (
    OffloadStoreCase,
    offload_store_completeness_gaps,
    offload_store_safety_violations,
    offload_store_unread_chunks,
)


def offload_store_violations(case: OffloadStoreCase, stored_per_step) -> list[Violation]:
    """Every step stores only whole chunks the request has computed, of its own groups."""
    return [
        Violation(STORE_HELD, f"offloading: {reason}")
        for step, stored in enumerate(stored_per_step)
        for reason in offload_store_safety_violations(case, step, stored)
    ]


def compare_offload_store(case: OffloadStoreCase, stored_per_step, needed) -> StoreComparison:
    """The union of the chunks the steps store, against ``needed`` (reference/offloading_stores.py)."""
    stored = {gid: frozenset() for gid in range(len(case.setting.groups))}
    for step in stored_per_step:
        for gid, chunks in step.items():
            stored[gid] = stored.get(gid, frozenset()) | frozenset(chunks)
    return StoreComparison(stored, offload_store_completeness_gaps(needed, stored), offload_store_unread_chunks(needed, stored))
