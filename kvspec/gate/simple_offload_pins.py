"""The SimpleCPUOffload check's second phase: the connector's bookkeeping between a lookup and
the load it promises, on real vLLM (impl/simple_offload_pins.py), judged by
spec/simple_offload_pins.py (kvspec/oracles/simple_offload_pins.py). The fixed cases run first,
whatever the budget, then drawn ones (kvspec/draws/simple_offload_pins.py)."""

from __future__ import annotations

from collections import Counter

from kvspec.draws.simple_offload_pins import FIXED_PINS_CASES, pins_cases
from kvspec.gate.options import GateOptions
from kvspec.gate.result import run_property, scaled
from kvspec.impl.simple_offload_pins import run_pins_case
from kvspec.oracles.invariants import require_none
from kvspec.oracles.simple_offload_pins import pins_violations

PINS_EXAMPLES = 300
PINS_MINIMUMS = {"pin sequences": 300, "retried lookups with a match": 20, "skipping lookups the pool could match": 10,
                 "eager admissions past a held local prefix": 10, "lazy admissions past a held local prefix": 10,
                 "loads done": 40, "presses with a match waiting": 10}


def run_pins_phase(adapter, options: GateOptions, reached: Counter) -> list[str]:
    """The lines of a rule found broken ([] when every case held), counting into ``reached``."""

    def prop(case):
        situations, found = pins_violations(case, run_pins_case(adapter, case), adapter.rules)
        require_none(found, f"simple-offload pins: {case}")
        reached.update(situations)

    return run_property(prop, pins_cases(), seed=options.seed, fixed=FIXED_PINS_CASES,
                        examples=scaled(PINS_EXAMPLES, options.scale))
