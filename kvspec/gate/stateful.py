"""The stateful check: scheduler-made operation sequences on a real ``KVCacheManager``
(kvspec/stateful/machine.py) judged after every step (kvspec/stateful/judge.py)."""

from __future__ import annotations

from collections import Counter

import hypothesis

from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, failure_lines, gate_settings, not_a_rule_verdict, scaled
from kvspec.impl.watchdog import VllmHung
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES
from kvspec.stateful.machine import make_cache_machine, run_machine

STATEFUL_EXAMPLES, STATEFUL_STEPS = 500, 30


def check_stateful_manager(adapter, options: GateOptions) -> CheckResult:
    """Scheduler-made operation sequences on a real KVCacheManager (kvspec/stateful/machine.py):
    every read and hit safe against the shadow of block contents and by spec/hits.py, every
    hit equal to the reference's over the reference cache model, the pool (free queue, ref
    counts, cached keys) equal to the reference cache model's after every step."""
    stats: Counter = Counter()
    findings: dict[str, str] = {}
    machine = make_cache_machine(adapter, stats, findings=findings, known=options.known())
    machine = hypothesis.seed(options.seed)(machine)
    failure: list[str] = []
    try:
        run_machine(machine, gate_settings(scaled(STATEFUL_EXAMPLES, options.scale)), STATEFUL_STEPS)
    except VllmHung as hung:  # not shrunk (impl/watchdog.py): the run's program is its input
        run = machine.current
        hung.add_note(f"in the run configured {run.config}, documents of {[len(d) for d in run.documents]} tokens, "
                      f"after the operations {run.program}")
        raise
    except Exception as exc:  # noqa: BLE001 - a violated rule is the check's verdict; the rest the registry's
        if not_a_rule_verdict(exc):
            raise
        failure = failure_lines(exc)
    shapes = sum(1 for key in stats if key.startswith("shape "))
    has_lookahead = adapter.has(LOOKAHEAD_BLOCK_HASHES)  # else never drawn (kvspec/stateful/config.py)
    lookahead = (stats['hits, EAGLE lookahead, annotated'] + stats['hits, EAGLE lookahead, unannotated']
                 if has_lookahead else "not in this release")
    covered = (
        f"{stats['examples']} runs ({shapes} group shapes), {stats['steps']} steps "
        f"({stats['steps scheduled']} scheduled), {stats['evictions']} evictions, {stats['preemptions']} preemptions, "
        f"{stats['lookups']} lookups ({stats['hits']} hits: Mamba {stats['hits with mamba']}, sliding window "
        f"{stats['hits with sliding_window']}, chunked local {stats['hits with chunked_local']}, partial "
        f"{stats['partial hits']}, EAGLE drop {stats['hits, EAGLE drop, annotated'] + stats['hits, EAGLE drop, unannotated']}"
        f", lookahead {lookahead}; "
        f"{stats['hits below the longest safe hit']} below the longest safe hit)"
    )
    # The invariant runs after every step; leave it out of the printed program.
    failure = [line for line in failure if "blocks_are_accounted_for()" not in line]
    details = failure or ["every read and hit safe; hits and the pool equal the reference cache model's"]
    # Short and drafter-unproven hits in recorded situations are counted, not failed (MachineJudge).
    details += [f"known divergence {name} met, first: {first}" for name, first in findings.items()]
    return CheckResult(Check.STATEFUL, covered, holds=not failure, details=details, coverage=dict(stats),
                       not_in_release=[] if has_lookahead else ["EAGLE lookahead hashes"])
