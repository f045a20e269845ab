"""The stateful speed benchmarks (benchmarks/stateful_speed.py, stateful_floor.py) still drive
the machine as the gate does, and the floor replays exactly what vLLM answered: a benchmark that
no longer runs, or a floor that replays other calls, would print figures that mean nothing."""

import importlib.util
from pathlib import Path

import pytest

from kvspec.gate.stateful import STATEFUL_STEPS
from kvspec.stateful.machine import make_cache_machine

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stateful_speed_measures_the_judged_machine_and_the_reference(vllm_adapter):
    figures = benchmark("stateful_speed").measure(vllm_adapter, examples=3, repeats=1)
    assert figures["steps"] > 0 and figures["operations"] > 0
    assert figures["vllm_steps_per_second"] > 0 and figures["reference_steps_per_second"] > 0


def test_the_floor_replays_every_call_of_the_judged_run_as_vllm_answered_it(vllm_adapter):
    floor = benchmark("stateful_floor")
    _seconds, steps, traces, _programs = floor.judged_run(vllm_adapter, seed=0, scale=0.05)
    assert steps > 0 and traces and all(calls for _, calls in traces)
    tests = floor.floor_tests(traces, vllm_adapter.rules)
    assert len(tests) == len(traces)
    assert floor.floor_seconds(tests) > 0  # each replay asserts every hit and allocation vLLM gave
    # A replay that parts from what vLLM answered fails: the recorded hit of one lookup, changed.
    setup, calls = next((s, c) for s, c in traces if any(call[0] == "get_computed_blocks" for call in c))
    index = next(i for i, call in enumerate(calls) if call[0] == "get_computed_blocks")
    changed = [*calls[:index], (*calls[index][:-1], calls[index][-1] + 1), *calls[index + 1:]]
    (wrong,) = floor.floor_tests([(setup, changed)], vllm_adapter.rules)
    with pytest.raises(AssertionError):
        wrong()


def test_the_programs_run_without_hypothesis_make_the_judged_runs_calls_and_no_others(vllm_adapter):
    floor = benchmark("stateful_floor")
    _seconds, _steps, traces, programs = floor.judged_run(vllm_adapter, seed=0, scale=0.05)
    assert len(programs) >= len(traces) and all(program for *_, program in programs)
    seconds, replayed = floor.without_hypothesis(programs)
    assert seconds > 0 and replayed == traces  # every rule and argument as Hypothesis drew them
    # A program with one argument changed makes other calls: the comparison would see it.
    index, (machine_class, config, documents, program) = next(
        (i, run) for i, run in enumerate(programs) if any(operation[0] == "add" for operation in run[3]))
    at = next(i for i, operation in enumerate(program) if operation[0] == "add")
    changed = [*program[:at], ("add", program[at][1], 10_000, [7, 7, 7], 2048), *program[at + 1:]]
    _seconds, other = floor.without_hypothesis([*programs[:index], (machine_class, config, documents, changed),
                                                *programs[index + 1:]])
    assert other != traces


def test_hypothesis_alone_draws_the_gates_rules_and_arguments_and_counts_every_step(vllm_adapter):
    floor = benchmark("stateful_floor")
    gate = make_cache_machine(vllm_adapter)
    machines = floor.empty_machines(gate)

    def drawn(machine) -> dict[str, set[str]]:  # the rules Hypothesis collects, with their arguments
        return {r.function.__name__: set(r.arguments) for r in machine.setup_state().rules}

    assert drawn(machines["the gate's rules and draws"]) == drawn(gate) and len(drawn(gate)) > 1
    assert drawn(machines["one argument-free rule"]) == {"step": set()}
    per_step = floor.hypothesis_alone(machines, seed=0, examples=5)
    assert set(per_step) == set(machines) and all(seconds > 0 for seconds in per_step.values())
    # Every run is at least the gate's step count long, and each step ran its (empty) rule.
    assert all(machine.steps >= 5 * STATEFUL_STEPS for machine in machines.values())
