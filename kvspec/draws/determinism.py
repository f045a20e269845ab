"""One seed, one draw, whatever else is loaded.

Hypothesis (6.13x and later) mixes into its draws the literals of every *local* module loaded
so far: every module outside site-packages and the standard library. For kvspec that is its
own modules and the vLLM tree under ``.vllm/``. The same ``--seed`` therefore drew
differently in ``kvspec zoo`` (which loads the zoo's modules) than in ``kvspec check``, on
0.33.0 than on 0.34.0, and after any edit that added a constant to a kvspec module: a failure
found by one command did not replay with another, and a refactor changed what the gate drew.

``pin_constant_pool`` empties that pool for the whole process. Hypothesis's own global
constants (0, -1, boundary floats, ...) are still drawn. The hook is private, so a Hypothesis
that no longer has it is refused loudly rather than left to draw by what happens to be loaded.
"""

from __future__ import annotations

from hypothesis.internal.conjecture import providers

_EMPTY_POOL = providers.Constants()


def _no_local_constants() -> providers.Constants:
    return _EMPTY_POOL


def pin_constant_pool() -> None:
    """Draws depend on the seed alone, never on which local modules happen to be loaded."""
    if not callable(getattr(providers, "_get_local_constants", None)):
        raise RuntimeError(
            "kvspec: this Hypothesis has no providers._get_local_constants; kvspec cannot pin its "
            "constant pool, so its seeds would not replay (requirements/constraints.txt pins a good one)"
        )
    providers._get_local_constants = _no_local_constants
    providers.CONSTANTS_CACHE.cache.clear()


def constant_pool_is_pinned() -> bool:
    return providers._get_local_constants is _no_local_constants
