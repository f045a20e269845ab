"""The coverage a check must reach before its "holds" says anything: per situation (a KV-cache
kind, a lookup path, a hybrid pair), the least number of examples that must reach it.

A check declares its minimums beside its coverage counts (``CheckResult.minimums``). A check
that holds but left a situation below its minimum did not exercise what it promises; that is
kvspec's failure, not vLLM's, so the row becomes "cannot drive" (exit 3) and names the
situation. A smoke run (``--quick``) scales each minimum by its budget's factor.
"""

from __future__ import annotations

import math
from typing import Mapping


def scaled_minimum(minimum: int, scale: float) -> int:
    """The minimum under an example budget scaled by ``scale``: never below one example."""
    return max(1, math.ceil(minimum * min(scale, 1.0)))


def shortfalls(coverage: Mapping[str, int], minimums: Mapping[str, int], scale: float = 1.0) -> list[str]:
    """One line per situation the run reached fewer times than its minimum, in the minimums' order."""
    lines = []
    for situation, minimum in minimums.items():
        needed = scaled_minimum(minimum, scale)
        reached = coverage.get(situation, 0)
        if reached < needed:
            lines.append(f"coverage: {situation!r} reached {reached} times, below its minimum {needed} "
                         "(kvspec's draws did not reach it; not a vLLM finding)")
    return lines
