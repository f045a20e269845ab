"""HiSparse's grouping as the spec predicts it, and an obviously-correct statement of its packing.

``expected_hisparse_grouping`` chains the rules of spec/hisparse_grouping.py with the ordinary
grouping of reference/grouping.py, in the order of vllm.v1.hisparse.layout:
get_hisparse_kv_cache_groups (the MLA layers checked, the regular layers grouped, then the
layout). ``packing_by_definition`` states the hot-unit packing without its loop: of every way to
cut the units into consecutive groups, the one whose groups each fit the budget (or are one unit
alone) and could not take the next group's first unit; it is checked against
spec/hisparse_grouping.py:pack_units by tests/test_hisparse_grouping.py.
"""

from __future__ import annotations

from itertools import combinations

from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Refusal
from kvspec.spec.hisparse_grouping import (
    HiSparseSetting,
    RoledGroup,
    hisparse_applies,
    laid_out_groups,
    mla_refusal,
    regular_layers,
)
from kvspec.spec.layers import LayerSpec
from kvspec.spec.releases import NEWEST_RULES


def consecutive_partitions(n: int) -> list[list[list[int]]]:
    """Every way to cut ``range(n)`` into non-empty runs, in order (2 ** (n - 1) of them)."""
    if n == 0:
        return [[]]
    partitions = []
    for k in range(n):
        for cuts in combinations(range(1, n), k):
            bounds = (0, *cuts, n)
            partitions.append([list(range(a, b)) for a, b in zip(bounds, bounds[1:])])
    return partitions


def fits(pages: list[int], run: list[int], budget: int) -> bool:
    """A run fits when its summed page is within the budget; one unit alone always may stand."""
    return len(run) == 1 or sum(pages[i] for i in run) <= budget


def maximal(pages: list[int], run: list[int], next_run: list[int], budget: int) -> bool:
    """A run is full when its next unit would take it past the budget."""
    return sum(pages[i] for i in run) + pages[next_run[0]] > budget


def packing_by_definition(pages: list[int], budget: int) -> list[list[int]]:
    """The one consecutive partition whose runs all fit and all but the last are full."""
    chosen = [
        p for p in consecutive_partitions(len(pages))
        if all(fits(pages, run, budget) for run in p)
        and all(maximal(pages, run, after, budget) for run, after in zip(p, p[1:]))
    ]
    assert len(chosen) == 1, f"{len(chosen)} partitions fit the definition"
    return chosen[0]


def expected_hisparse_grouping(layers: dict[str, LayerSpec], setting: HiSparseSetting,
                               rules=NEWEST_RULES) -> tuple[RoledGroup, ...] | Refusal | None:
    """vLLM's groups for ``layers`` with HiSparse configured as ``setting``, its refusal, or None
    when HiSparse does not group the model (spec/hisparse_grouping.py:hisparse_applies)."""
    if not hisparse_applies(layers, setting):
        return None
    if refusal := mla_refusal(layers):
        return refusal
    regular = regular_layers(layers)
    grouping = expected_grouping(regular, rules=rules) if regular else None
    if isinstance(grouping, Refusal):
        return grouping
    laid_out = laid_out_groups(layers, setting, rules)
    if isinstance(laid_out, Refusal):
        return laid_out
    return (*laid_out, *(RoledGroup(g) for g in (grouping.groups if grouping else ())))
