"""The stateful check against vLLM's own floor, side by side in one run (issue 17): the gate's
stateful check at the full budget (Hypothesis drawing the runs, the shadow, the reference cache
model, the judges), and the same operation sequences driven on ``KVCacheManager`` with nothing
else: each run's recorded calls (impl/call_trace.py) as the plain-vLLM test kvspec prints for a
failure (kvspec/emit/stateful_test.py, unformatted), compiled first and then called. That test
asserts every hit and allocation as vLLM gave it, so the floor also shows the replay is faithful.

Between the two, the split: each run's program (its configuration, documents and rules with
their arguments, as the machine records them) run again on the gate's machine, every rule and
the accounting invariant called as kvspec/tools/programs.py:driven calls them, every judge on, and
no Hypothesis. The gate's seconds less these are Hypothesis's (its engine, the rule choice and
the argument draws); these less the floor are the judges', the reference's and the machine's.
The replay must make the very calls the gate's runs made on vLLM (compared, or it exits).

And what a step of Hypothesis's RuleBasedStateMachine costs with nothing to run, under the gate's
settings and step count: a machine of one argument-free rule with an empty body (the least a step
in this style costs), and one with the gate's rules, their argument strategies and the invariant,
every body empty (the gate's per-step draws; its configuration draw left out).

Steps are the machine's scheduler steps (the check's own count), the same work on both sides.

    .venv/bin/python benchmarks/stateful_floor.py [--vllm 0.34.0] [--seed 0] [--repeats 3] [--json F]
"""

import argparse
import json
import re
import statistics
import time
from pathlib import Path

import hypothesis
from hypothesis import Phase
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvspec.emit.stateful_test import Expected, stateful_test
from kvspec.gate import stateful as gate_stateful
from kvspec.gate.options import GateOptions
from kvspec.gate.result import gate_settings
from kvspec.gate.stateful import STATEFUL_EXAMPLES, STATEFUL_STEPS, check_stateful_manager
from kvspec.impl import live
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.stateful.machine import make_cache_machine, run_machine
from kvspec.tools.programs import driven

RESULTS = Path(__file__).parent / "results" / "stateful_floor.json"


def judged_run(adapter, seed: int, scale: float = 1.0) -> tuple[float, int, list, list]:
    """(seconds, steps, traces, programs) of the gate's stateful check (``scale``: its budget's
    factor); every manager it built, traced, and every run's program, with its machine class."""
    managers: list = []
    runs: list = []
    original, original_machine = live.LiveManager.__init__, gate_stateful.make_cache_machine

    def traced(self, *args, **kwargs):
        original(self, *args, **kwargs)
        managers.append(self)

    def recording_machine(*args, **kwargs):
        machine = original_machine(*args, **kwargs)

        class RecordedMachine(machine):  # a run's program, not the run: the machines are not kept
            def setup(self, config, documents):
                super().setup(config, documents)
                runs.append((machine, config, documents, self.program))

        return RecordedMachine

    live.LiveManager.__init__, gate_stateful.make_cache_machine = traced, recording_machine
    try:
        started = time.perf_counter()
        result = check_stateful_manager(adapter, GateOptions(seed=seed, scale=scale))
        seconds = time.perf_counter() - started
    finally:
        live.LiveManager.__init__, gate_stateful.make_cache_machine = original, original_machine
    if not result.holds:
        raise SystemExit(f"stateful_floor: the stateful check does not hold here: {result.details[:1]}")
    steps = int(re.search(r"(\d+) steps", result.covered).group(1))
    traces = [(m.trace.setup, list(m.trace.calls)) for m in managers if m.trace.calls]
    return seconds, steps, traces, runs


def without_hypothesis(programs: list) -> tuple[float, list]:
    """(seconds, traces) of every program run again on its machine with no Hypothesis, each
    rule and the invariant called as the runner calls them (kvspec/tools/programs.py:driven)."""
    machines = []
    started = time.perf_counter()
    for machine_class, config, documents, program in programs:
        machines.append(machine_class())
        for _ in driven(machines[-1], config, documents, program):
            pass
    seconds = time.perf_counter() - started
    return seconds, [(m.live.trace.setup, list(m.live.trace.calls)) for m in machines if m.live.trace.calls]


def floor_tests(traces: list, rules) -> list:
    """Each trace as a compiled plain-vLLM test function (formatting skipped: it is not printed)."""
    emit = stateful_test.__wrapped__
    tests = []
    for index, (setup, calls) in enumerate(traces):
        source = emit(setup, calls, Expected("the floor: every call as vLLM answered it"), rules, f"floor {index}")
        namespace: dict = {}
        exec(compile(source, f"<floor {index}>", "exec"), namespace)  # noqa: S102 - our own emitted test
        tests.append(next(v for k, v in namespace.items() if k.startswith("test_")))
    return tests


def empty_machines(gate_machine) -> dict[str, type]:
    """The two machines of Hypothesis alone (the module docstring), each counting its steps."""

    def counted(name: str):
        def step(self, **_arguments):
            type(self).steps += 1

        step.__name__ = name
        return step

    same_draws = {r.function.__name__: rule(**r.arguments)(counted(r.function.__name__))
                  for r in gate_machine.setup_state().rules}  # the rules Hypothesis collects
    same_draws["invariant"] = invariant()(lambda self: None)
    one_rule = {"steps": 0, "step": rule()(counted("step"))}
    return {"one argument-free rule": type("OneEmptyRule", (RuleBasedStateMachine,), one_rule),
            "the gate's rules and draws": type("TheGatesDraws", (RuleBasedStateMachine,), {"steps": 0, **same_draws})}


def hypothesis_alone(machines: dict[str, type], seed: int, examples: int = STATEFUL_EXAMPLES) -> dict[str, float]:
    """Seconds per step of each empty machine, at the gate's budget, seed and step count."""
    per_step = {}
    for name, machine in machines.items():
        machine.steps = 0
        started = time.perf_counter()
        run_machine(hypothesis.seed(seed)(machine), gate_settings(examples, phases=[Phase.generate]), STATEFUL_STEPS)
        per_step[name] = (time.perf_counter() - started) / machine.steps
    return per_step


def floor_seconds(tests: list) -> float:
    started = time.perf_counter()
    for test in tests:
        test()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    adapter = VllmAdapter(resolve(args.vllm))
    runs = [judged_run(adapter, args.seed) for _ in range(args.repeats)]
    steps, traces, programs = runs[0][1], runs[0][2], runs[0][3]
    tests = floor_tests(traces, adapter.rules)
    judged = statistics.median(run[0] for run in runs)
    replays = [without_hypothesis(programs) for _ in range(args.repeats)]
    if any(replayed != traces for _, replayed in replays):
        raise SystemExit("stateful_floor: the programs run without Hypothesis made other calls on vLLM "
                         "than the gate's runs")
    unhypothesised = statistics.median(seconds for seconds, _ in replays)
    floor = statistics.median(floor_seconds(tests) for _ in range(args.repeats))
    empty = empty_machines(make_cache_machine(adapter))
    alone = [hypothesis_alone(empty, args.seed) for _ in range(args.repeats)]
    alone = {name: statistics.median(run[name] for run in alone) for name in alone[0]}
    calls = sum(len(c) for _, c in traces)
    figures = {
        "target": adapter.target.label, "seed": args.seed, "repeats": args.repeats, "steps": steps,
        "managers": len(traces), "calls_on_the_manager": calls,
        "judged_seconds": round(judged, 2), "without_hypothesis_seconds": round(unhypothesised, 2),
        "floor_seconds": round(floor, 2),
        "judged_steps_per_second": round(steps / judged, 1), "floor_steps_per_second": round(steps / floor, 1),
        "judged_over_floor": round(judged / floor, 2),
        "without_hypothesis_over_floor": round(unhypothesised / floor, 2),
        "hypothesis_over_floor": round((judged - unhypothesised) / floor, 2),
        "floor_microseconds_per_step": round(floor / steps * 1e6, 1),
        "hypothesis_alone_microseconds_per_step": {name: round(seconds * 1e6, 1) for name, seconds in alone.items()},
    }  # fmt: skip
    print(f"target: {figures['target']}, seed {args.seed}: the gate's stateful check, {steps} steps over "
          f"{len(traces)} managers ({calls} calls on them), median of {args.repeats}\n")
    print("| figure | the stateful check (judged) | its programs judged, no Hypothesis | vLLM's floor (the same "
          "calls, nothing else) |\n|---|---:|---:|---:|")
    print(f"| seconds | {judged:.2f} | {unhypothesised:.2f} | {floor:.2f} |")
    print(f"| steps/s | {steps / judged:,.0f} | {steps / unhypothesised:,.0f} | {steps / floor:,.0f} |")
    print(f"| over the floor | {judged / floor:.1f}x | {unhypothesised / floor:.1f}x | 1x |")
    print(f"\nHypothesis's share (judged less no Hypothesis): {judged - unhypothesised:.2f} s, "
          f"{(judged - unhypothesised) / floor:.1f}x the floor; the judges', reference's and machine's: "
          f"{unhypothesised - floor:.2f} s, {(unhypothesised - floor) / floor:.1f}x the floor")
    print(f"\nHypothesis alone, per step (the floor's: {floor / steps * 1e6:.0f} us): " + "; ".join(
        f"{name}, {seconds * 1e6:.0f} us ({seconds / (floor / steps):.1f}x the floor's)"
        for name, seconds in alone.items()))
    args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
