"""The judge of the OffloadingConnector's load bound: every rule of spec/offloading_load_bound.py
and reference/offloading_load_bound.py that vLLM's bound, and the load it leads to, break."""

from __future__ import annotations

from kvspec.oracles.invariants import DRAFTER_PROVEN, EQUALS_REFERENCE, SAFE_HIT, Violation
from kvspec.spec.offloading_load_bound import (
    a_load_bound_keeps_loads_within_the_unoffloaded_groups,
    a_load_never_reaches_past_the_unoffloaded_groups,
)
from kvspec.spec.setting import CacheState, LookupSetting


def load_bound_violations(local: LookupSetting, state: CacheState, num_computed: int, num_tokens: int,
                          bounding: tuple[int, ...], bound: int | None, loaded: int,
                          reference: tuple[tuple[int, ...], int | None]) -> list[Violation]:
    """vLLM's groups left out, its bound and the tokens its lookup then loads break:

    * safety: the bound lets no load past what each group left out can resume at, and the load
      does not reach past it (spec/offloading_load_bound.py), the target's KV (SAFE_HIT) before a
      drafter group's proof (DRAFTER_PROVEN);
    * the reference: the same groups and the same bound as reference/offloading_load_bound.py.
    """
    def broken(drafter: bool) -> list[str]:
        return [*a_load_bound_keeps_loads_within_the_unoffloaded_groups(local, state, bounding, num_computed,
                                                                        num_tokens, bound, drafter),
                *a_load_never_reaches_past_the_unoffloaded_groups(local, state, bounding, num_computed, loaded,
                                                                  drafter)]

    # The target's KV first; only where it is all there, the drafter's proof (spec/hits.py's tiers).
    target = broken(drafter=False)
    found = [Violation(SAFE_HIT, d) for d in target] or [Violation(DRAFTER_PROVEN, d) for d in broken(drafter=True)]
    expected_groups, expected_bound = reference
    if bounding != expected_groups:
        found.append(Violation(EQUALS_REFERENCE, f"groups not offloaded: vLLM {bounding} != reference {expected_groups}"))
    elif bound != expected_bound:
        found.append(Violation(EQUALS_REFERENCE, f"load bound: vLLM {bound} != reference {expected_bound}"))
    return found
