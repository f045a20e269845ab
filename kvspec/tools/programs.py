"""Operation sequences on a real KVCacheManager as plain data, so that one sequence can be drawn
once and run on two vLLMs (kvspec review). Hypothesis's stateful runs cannot be shared that way:
which rule runs next depends on what vLLM answered. Here a program is fixed in advance (the
machine's configurations and rules, with the machine's argument strategies), and an operation
whose precondition fails when it comes (nothing to schedule, say) is skipped.

The program runs on the gate's own machine (kvspec/stateful/machine.py), calling its rules
directly, so every hit and read is judged by the gate's judges and every step is followed by
the gate's pool accounting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from hypothesis import strategies as st

from kvspec.draws.codec import register
from kvspec.gate.names import Outcome
from kvspec.impl.failures import CannotDrive, classify
from kvspec.impl.failures import describe as describe_failure
from kvspec.impl.watchdog import VllmHung
from kvspec.oracles.invariants import HUNG, most_severe, violations_of
from kvspec.stateful.config import MachineConfig, machine_configs, pool_need
from kvspec.stateful.machine import (
    BUDGETS,
    LENGTHS,
    MAX_PROMPT,
    PICKS,
    VOCABULARY,
    documents_from,
    make_cache_machine,
)

MAX_OPERATIONS = 30  # the gate's stateful_step_count
register(MachineConfig)  # a program's configuration crosses to the review's workers as data

# The machine's rules, with the machine's own argument strategies.
OPERATIONS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), LENGTHS, st.lists(VOCABULARY, max_size=12), st.none() | BUDGETS | BUDGETS),
    st.tuples(st.just("schedule"), PICKS, BUDGETS, VOCABULARY, st.booleans()),
    st.tuples(st.just("stop"), PICKS, st.booleans()),
    st.tuples(st.just("look_up_prompt"), st.integers(0, 2), LENGTHS),
    st.tuples(st.just("reset_prefix_cache")),
)


@st.composite
def programs(draw) -> dict:
    """A configuration as the machine draws it (groups, EAGLE mode, hash unit, pool), its
    documents, and up to MAX_OPERATIONS operations."""
    config = draw(machine_configs())
    longest = min(MAX_PROMPT, 12 * config.scheduler_block_size)
    shapes = st.tuples(st.integers(config.scheduler_block_size, longest), st.integers(0, longest), st.integers(0, 2**16))
    documents = documents_from(draw(st.lists(shapes, min_size=1, max_size=3)))
    need = pool_need(config, max(map(len, documents)) + 16)
    config = dataclasses.replace(config, num_blocks=max(need, round(need * config.pool_scale)))
    return {"config": config, "documents": documents,
            "operations": draw(st.lists(OPERATIONS, min_size=1, max_size=MAX_OPERATIONS))}


def recording_machine(adapter):
    """The gate's machine class, also recording every hit it judges."""

    class RecordingMachine(make_cache_machine(adapter)):
        def __init__(self):
            super().__init__()
            self.hits: list[int] = []

        def _judge_hit(self, who, prompt, hit, *args, **kwargs):
            self.hits.append(hit)
            super()._judge_hit(who, prompt, hit, *args, **kwargs)

    return RecordingMachine


def run_program(machine_class, program: dict) -> dict:
    """Run ``program``; returns the hits judged, the operations run and the first violation
    (invariant, message) or None. An operation whose precondition fails is skipped, as
    Hypothesis would never have drawn it."""
    machine = machine_class()
    done, violation = 0, None
    try:
        for _ in driven(machine, program["config"], program["documents"], program["operations"]):
            done += 1
    except VllmHung as exc:
        violation = (HUNG, str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken rule, or vLLM crashing on a valid sequence, is a verdict
        if classify(exc) is Outcome.CANNOT_DRIVE:
            raise CannotDrive(describe_failure(exc)) from None
        violation = most_severe(violations_of(exc))
    return {"hits": machine.hits, "operations_run": done, "violation": violation}


def driven(machine, config, documents, operations) -> Iterator[None]:
    """``operations`` run on ``machine`` as Hypothesis's runner calls its rules, one per step:
    set up, the invariant, then each operation whose precondition holds and the invariant after it."""
    machine.setup(config, documents)
    machine.blocks_are_accounted_for()
    for name, *args in operations:
        if _precondition_holds(machine, name):
            getattr(machine, name)(*args)
        machine.blocks_are_accounted_for()
        yield


def _precondition_holds(machine, rule_name: str) -> bool:
    """The rule's own preconditions, if it has any (Hypothesis keeps them on the rule)."""
    rule = getattr(getattr(type(machine), rule_name), "hypothesis_stateful_rule", None)
    return all(condition(machine) for condition in getattr(rule, "preconditions", ()))


def describe(program: dict) -> str:
    """The configuration, then the operations one per line."""
    config = program["config"]
    groups = ", ".join(
        f"{g.kind.value} {g.block_size}" + (f" window {g.window}" if g.window else "")
        + (f" chunk {g.chunk}" if g.chunk else "") + (" [EAGLE group]" if g.is_eagle_group else "")
        for g in config.groups
    )
    docs = "; ".join(f"{len(d)} tokens" for d in program["documents"])
    lines = [f"groups [{groups}], hash unit {config.hash_block_size}, EAGLE {config.eagle or 'off'}, "
             f"{config.num_blocks} blocks, documents: {docs}"]
    lines += [" ".join(str(a) for a in op) for op in program["operations"]]
    return "\n".join(lines)
