"""The stateful check: scheduler-made operation sequences on a real ``KVCacheManager``
(kvspec/stateful/machine.py) judged after every step (kvspec/stateful/judge.py), the fixed runs
first (kvspec/stateful/fixed.py)."""

from __future__ import annotations

from collections import Counter

import hypothesis

from kvspec.emit.stateful_test import Expected, stateful_test
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, failure_lines, gate_settings, not_a_rule_verdict, scaled
from kvspec.impl.watchdog import VllmHung
from kvspec.oracles.invariants import STATEFUL_BLOCKS, STATEFUL_WRITES
from kvspec.spec.layers import Kind
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES
from kvspec.stateful.config import STATEFUL_KINDS
from kvspec.stateful.fixed import fixed_runs, run_fixed
from kvspec.stateful.machine import make_cache_machine, run_machine
from kvspec.stateful.shadow import NULL_BLOCK

STATEFUL_EXAMPLES, STATEFUL_STEPS = 500, 30
# Runs holding each kind the stateful draws reach, and lookups that hit beside it (seeds 0-4 at
# the full budget on 0.34.0 and 0.33.0, seed 0 on 0.32.0 and 0.31.0: each over 95 and 130; a
# quick run's 25 at seed 0: each at least 3 and 3, its minimums 2).
# Chunked local has none: it is left out wherever it cannot align or would be asked to drop for
# EAGLE, so it reaches 20 to 70 runs at the full budget but none in a quick run's 25.
MINIMUM_KINDS = tuple(kind for kind in STATEFUL_KINDS if kind != Kind.CHUNKED_LOCAL)
# Runs under multi-module MTP, a re-prefillable tail held back (kvspec/stateful/config.py): at the
# full budget 63 to 100 (seeds 0-4, 0.34.0 and 0.33.0; 56 at seed 0 on 0.32.0 and 0.31.0, where
# lookahead hashes are not drawn), a quick run's 5 to 9 at seeds 0-2, 4 of them the fixed runs.
MTP_RUNS = "runs with multi-module MTP"
STATEFUL_MINIMUMS = {
    **{f"stateful kind {kind}": 40 for kind in MINIMUM_KINDS},
    **{f"hits with {kind}": 40 for kind in MINIMUM_KINDS},
    MTP_RUNS: 40,
}


def check_stateful_manager(adapter, options: GateOptions) -> CheckResult:
    """Scheduler-made operation sequences on a real KVCacheManager (kvspec/stateful/machine.py):
    every read and hit safe against the shadow of block contents and by spec/hits.py, every
    hit equal to the reference's over the reference cache model, the pool (free queue, ref
    counts, cached keys) equal to the reference cache model's after every step, and what each
    step publishes and frees equal to reference/published.py's prediction (spec/caching.py)."""
    stats: Counter = Counter()
    findings: dict[str, str] = {}
    machine = make_cache_machine(adapter, stats, findings=findings, known=options.known())
    machine = hypothesis.seed(options.seed)(machine)
    failure: list[str] = []
    try:
        for fixed in fixed_runs(adapter.rules):
            run_fixed_noted(machine, fixed)
        run_machine(machine, gate_settings(scaled(STATEFUL_EXAMPLES, options.scale)), STATEFUL_STEPS)
    except VllmHung as hung:  # not shrunk (impl/watchdog.py): the run's program is its input
        run = machine.current
        hung.add_note(f"in the run configured {run.config}, documents of {[len(d) for d in run.documents]} tokens, "
                      f"after the operations {run.program}")
        raise
    except Exception as exc:  # noqa: BLE001 - a violated rule is the check's verdict; the rest the registry's
        if not_a_rule_verdict(exc):
            raise
        failure = failure_lines(exc) + replay_lines(machine.current, exc, adapter.rules)
    shapes = sum(1 for key in stats if key.startswith("shape "))
    has_lookahead = adapter.has(LOOKAHEAD_BLOCK_HASHES)  # else never drawn (kvspec/stateful/config.py)
    lookahead = (stats['hits, EAGLE lookahead, annotated'] + stats['hits, EAGLE lookahead, unannotated']
                 if has_lookahead else "not in this release")
    covered = (
        f"{stats['examples']} runs ({shapes} group shapes, {stats[MTP_RUNS]} under multi-module MTP), "
        f"{stats['steps']} steps ({stats['steps scheduled']} scheduled), {stats['evictions']} evictions, "
        f"{stats['preemptions']} preemptions, "
        f"{stats['lookups']} lookups ({stats['hits']} hits: Mamba {stats['hits with mamba']}, sliding window "
        f"{stats['hits with sliding_window']}, chunked local {stats['hits with chunked_local']}, hidden state "
        f"{stats['hits with hidden_state']}, beside a circular buffer {stats['hits with circular_buffer']}, partial "
        f"{stats['partial hits']}, EAGLE drop {stats['hits, EAGLE drop, annotated'] + stats['hits, EAGLE drop, unannotated']}"
        f", lookahead {lookahead}; "
        f"{stats['hits below the longest safe hit']} below the longest safe hit)"
    )
    # The invariant runs after every step; leave it out of the printed program.
    failure = [line for line in failure if "blocks_are_accounted_for()" not in line]
    details = failure or ["every read and hit safe; hits and the pool equal the reference cache model's; "
                          "what each step caches and frees equals spec/caching.py's prediction"]
    # Short and drafter-unproven hits in recorded situations are counted, not failed (MachineJudge).
    details += [f"known divergence {name} met, first: {first}" for name, first in findings.items()]
    return CheckResult(Check.STATEFUL, covered, holds=not failure, details=details, coverage=dict(stats),
                       minimums=STATEFUL_MINIMUMS, not_in_release=[] if has_lookahead else ["EAGLE lookahead hashes"])


def run_fixed_noted(machine, fixed) -> None:
    """One fixed run; a failure notes which, with its program (Hypothesis's notes say it for a drawn one)."""
    try:
        run_fixed(machine, fixed)
    except VllmHung:
        raise  # the check notes the run in progress itself
    except Exception as exc:
        run = machine.current
        exc.add_note(f"in the fixed run {fixed.name!r}: {run.config}, documents of "
                     f"{[len(d) for d in run.documents]} tokens, after the operations {run.program}")
        raise


def replay_lines(run, exc: BaseException, rules) -> list[str]:
    """The failing run as a plain-vLLM test that replays every call it made on the
    KVCacheManager (kvspec/emit/stateful_test.py) and asserts what kvspec expected at the
    failing step; [] when no number or pool state says what that was."""
    expected = None if run is None else expectation(run, exc)
    if expected is None:
        return []
    trace = run.live.trace
    test = stateful_test(trace.setup, trace.calls, expected, rules, run.config.shape.replace("+", " "))
    return ["as a vLLM test replaying the whole run (every call on the KVCacheManager):", *test.splitlines()]


def expectation(run, exc: BaseException) -> Expected | None:
    """What kvspec expected where ``run`` failed: a lookup's hit length, else the blocks its
    hit must read that vLLM left null; for a pool that parted from the reference cache model,
    the model's ref counts and free queue."""
    if judged := getattr(exc, "judged_lookup", None):  # set by MachineJudge.hit
        hit, claimed, expected = judged
        wanted = run.judge.wanted_hit(hit, expected)
        if wanted is not None and wanted[0] != hit:
            return Expected(f"{wanted[0]} is {wanted[1]}; vLLM hit {hit}", hit=wanted[0])
        missing = {gid: [i for i, (real, block) in enumerate(zip(reals, table)) if real and block == NULL_BLOCK]
                   for gid, (reals, table) in enumerate(zip(expected[0].real_blocks, claimed))}
        if missing := {gid: indices for gid, indices in missing.items() if indices}:
            where = "; ".join(f"group {gid} ({run.config.groups[gid].kind.value}) block {', '.join(map(str, indices))}"
                              for gid, indices in missing.items())
            return Expected(f"a hit of {hit} reads real blocks where vLLM claimed the null block: {where}",
                            real_blocks=missing)
        return None
    if any(v.invariant == STATEFUL_WRITES for v in getattr(exc, "violations", ())) and run.judge.writes.judged_write:
        request, gid, column, missing, extra = run.judge.writes.judged_write
        return Expected(f"what spec/caching.py publishes on group {gid}'s column {column} "
                        f"({len(missing)} key(s) missing, {len(extra)} extra)",
                        published=(request, gid, column, missing, extra))
    if any(v.invariant == STATEFUL_BLOCKS for v in getattr(exc, "violations", ())):
        reference, live = run.judge.reference, run.live
        if live.ref_counts() != reference.ref_counts or live.free_block_ids() != reference.free_queue:
            return Expected("the pool the reference cache model (reference/cache_model.py) holds",
                            ref_counts=[reference.ref_counts[b] for b in sorted(reference.ref_counts)],
                            free_queue=list(reference.free_queue))
    return None
