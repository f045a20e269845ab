"""The SimpleCPUOffload check's second phase: the connector's bookkeeping between a lookup and
the load it promises, on real vLLM (impl/simple_offload_pins.py), judged by
spec/simple_offload_pins.py (kvspec/oracles/simple_offload_pins.py). The fixed cases run first,
whatever the budget, then drawn ones (kvspec/draws/simple_offload_pins.py). A case that breaks a
rule prints its plain-vLLM test (kvspec/emit/simple_offload_pins_test.py)."""

from __future__ import annotations

from collections import Counter

from kvspec.draws.simple_offload_pins import FIXED_PINS_CASES, pins_cases
from kvspec.emit.simple_offload_pins_test import pins_test
from kvspec.gate.options import GateOptions
from kvspec.gate.result import run_property, scaled
from kvspec.impl.simple_offload_pins import run_pins_case
from kvspec.oracles.invariants import most_severe, require_none
from kvspec.oracles.simple_offload_pins import first_broken, pins_violations

PINS_EXAMPLES = 300
PINS_MINIMUMS = {"pin sequences": 300, "retried lookups with a match": 20, "skipping lookups the pool could match": 10,
                 "eager admissions past a held local prefix": 10, "lazy admissions past a held local prefix": 10,
                 "loads done": 40, "presses with a match waiting": 10}


def run_pins_phase(adapter, options: GateOptions, reached: Counter) -> list[str]:
    """The lines of a rule found broken ([] when every case held), with the plain-vLLM test of
    the minimal case, counting into ``reached``."""
    last_case: list = []  # Hypothesis replays the minimal failing case last

    def prop(case):
        last_case[:] = [case]
        situations, found = pins_violations(case, run_pins_case(adapter, case), adapter.rules)
        require_none(found, f"simple-offload pins: {case}")
        reached.update(situations)

    failure = run_property(prop, pins_cases(), seed=options.seed, fixed=FIXED_PINS_CASES,
                           examples=scaled(PINS_EXAMPLES, options.scale))
    if failure and last_case:
        failure += ["as a vLLM test:", *failing_pins_test(adapter, last_case[0]).splitlines()]
    return failure


def failing_pins_test(adapter, case) -> str:
    """The plain-vLLM test of ``case``, which breaks a rule on this vLLM."""
    steps = run_pins_case(adapter, case)
    broken = first_broken(case, steps, adapter.rules)
    invariant = most_severe(pins_violations(case, steps[:broken + 1], adapter.rules)[1]).invariant
    return pins_test(case, steps, broken, invariant, adapter.rules, f"simple offload {invariant}")
