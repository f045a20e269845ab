"""The checks ``kvspec check`` runs against the target vLLM, each a function of the adapter
that returns what it covered and whether vLLM held. Later checks (grouping, hit length,
proofs) join the list in ``CHECKS``."""

from __future__ import annotations

import inspect
import time
from collections import Counter
from typing import Callable, Iterable

import hypothesis

from kvspec.gate.block_sizes import check_block_sizes
from kvspec.stateful.machine import make_cache_machine, run_machine
from kvspec.gate.result import CheckResult, failure_lines, gate_settings, scaled
from kvspec.divergences.known import load as load_known
from kvspec.gate.saved_finds import check_saved_finds
from kvspec.gate.grouping import check_grouping
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.gate.lookups import check_lookups
from kvspec.gate.offloading import check_offloading
from kvspec.spec.hits import CacheState
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode

# The seed scenario (vLLM #43559 / #48361): full attention and Mamba, block 16, four blocks
# cached in both groups, a 65-token prompt so the hit is capped at 64.
SEED_GROUPS = [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)]
SEED_STATE = CacheState.full_prefix(num_groups=2, num_hashes=4)
SEED_MAX_LENGTH = 64
# With EAGLE, full attention drops its last block (48) and Mamba must resume at that same
# verified prefix; without EAGLE every cached block is usable (64).
SEED_EXPECTED = {True: 48, False: 64}
SEED_COVERED = "[full 16, mamba 16], 4 blocks cached, M=64, EAGLE on/off"


def _seed_check(name: str, lookup: Callable[..., object]) -> CheckResult:
    outcomes, holds = [], True
    for use_eagle, expected in SEED_EXPECTED.items():
        got = lookup(SEED_GROUPS, SEED_STATE, SEED_MAX_LENGTH, use_eagle=use_eagle).length
        label = "EAGLE" if use_eagle else "no EAGLE"
        holds &= got == expected
        outcomes.append(f"{label}: hit {got}" if got == expected else f"{label}: vLLM hit {got}, expected {expected}")
    return CheckResult(name, SEED_COVERED, holds=holds, details=["; ".join(outcomes)])


def check_seed_hybrid(adapter: VllmAdapter) -> CheckResult:
    return _seed_check("seed: hybrid coordinator", adapter.coordinator_hit)


def check_seed_mooncake(adapter: VllmAdapter) -> CheckResult:
    return _seed_check("seed: Mooncake store", adapter.mooncake_hit)


def check_warning_gate(adapter: VllmAdapter) -> CheckResult:
    """The unannotated-eagle warning fires with a Mamba group and stays silent without one."""
    full, mamba = LayerSpec(Kind.FULL, 16), LayerSpec(Kind.MAMBA, 16, state_bytes=4096)
    cases = {
        "attention + Mamba": (
            {"model.layers.0.attn": full, "model.layers.1.mixer": mamba},
            True,
        ),
        "attention only": (
            {"model.layers.0.attn": full, "model.layers.1.attn": full},
            False,
        ),
    }
    covered = "eagle, no draft layer: attention + Mamba / attention only"
    outcomes, holds = [], True
    for label, (layers, should_warn) in cases.items():
        warned = adapter.group_layers(layers, SpecDecode("eagle")).warned_unannotated_eagle
        holds &= warned == should_warn
        got, expected = ("warns" if w else "silent" for w in (warned, should_warn))
        outcomes.append(f"{label}: {got}" + ("" if got == expected else f", expected {expected}"))
    return CheckResult("warning gate", covered, holds=holds, details=["; ".join(outcomes)])


def check_live_manager(adapter: VllmAdapter) -> CheckResult:
    """A real KVCacheManager serves a finished request's prompt to the next identical one."""
    result = CheckResult("live KVCacheManager", "full 16, 65-token prompt twice", holds=True)
    manager = adapter.live_manager([CacheGroup(Kind.FULL, 16)], num_blocks=16)
    prompt = list(range(65))
    manager.add_request("first", prompt)
    first_hit = manager.admit("first", first_chunk=len(prompt))
    manager.finish("first")
    manager.add_request("second", prompt)
    second_hit = manager.admit("second", first_chunk=len(prompt))
    # 64 = four full blocks; the 65th token is always recomputed for its logits.
    result.holds = (first_hit, second_hit) == (0, 64)
    result.details.append(f"hits {first_hit} then {second_hit}, expected 0 then 64")
    return result


STATEFUL_EXAMPLES, STATEFUL_STEPS = 500, 30


def check_stateful_manager(adapter: VllmAdapter, seed: int = 0, scale: float = 1.0) -> CheckResult:
    """Scheduler-made operation sequences on a real KVCacheManager (kvspec/stateful/machine.py):
    every read and hit safe against the shadow of block contents and by spec/hits.py, every
    hit equal to the reference's over the reference cache model, the pool (free queue, ref
    counts, cached keys) equal to the reference cache model's after every step."""
    stats: Counter = Counter()
    findings: dict[str, str] = {}
    machine = hypothesis.seed(seed)(make_cache_machine(adapter, stats, findings=findings))
    failure: list[str] = []
    try:
        run_machine(machine, gate_settings(scaled(STATEFUL_EXAMPLES, scale)), STATEFUL_STEPS)
    except Exception as exc:  # noqa: BLE001 - any failure of a run is the check's verdict
        failure = failure_lines(exc)
    shapes = sum(1 for key in stats if key.startswith("shape "))
    covered = (
        f"{stats['examples']} runs ({shapes} group shapes), {stats['steps']} steps "
        f"({stats['steps scheduled']} scheduled), {stats['evictions']} evictions, {stats['preemptions']} preemptions, "
        f"{stats['lookups']} lookups ({stats['hits']} hits: Mamba {stats['hits with mamba']}, sliding window "
        f"{stats['hits with sliding_window']}, chunked local {stats['hits with chunked_local']}, partial "
        f"{stats['partial hits']}, EAGLE drop {stats['hits, EAGLE drop, annotated'] + stats['hits, EAGLE drop, unannotated']}"
        f", lookahead {stats['hits, EAGLE lookahead, annotated'] + stats['hits, EAGLE lookahead, unannotated']}; "
        f"{stats['hits below the longest safe hit']} below the longest safe hit)"
    )
    # The invariant runs after every step; leave it out of the printed program.
    failure = [line for line in failure if "blocks_are_accounted_for()" not in line]
    details = failure or ["every read and hit safe; hits and the pool equal the reference cache model's"]
    # Short and drafter-unproven hits in recorded situations are counted, not failed (MachineJudge).
    details += [f"known divergence {name} met, first: {first}" for name, first in findings.items()]
    return CheckResult("stateful KVCacheManager", covered, holds=not failure, details=details, coverage=dict(stats))


PROOF_BOUND = 16  # hash units per cache in the bounded proofs (benchmarks/proof_bound.py: time as it grows)


def check_proofs(adapter: VllmAdapter) -> CheckResult:
    """The Z3 theorems of proofs/ at the default bound: every one proved (or refuted with a
    counterexample replayed on this vLLM), never vacuous, every proof mutant refuted."""
    from kvspec.proofs.runner import ok, run_proofs  # noqa: PLC0415  (z3 loads only here)

    results = run_proofs(PROOF_BOUND, adapter)
    proved = sum(r.result == "proved" for r in results)
    refuted = [r.theorem for r in results if r.result == "refuted"]
    mutants = (sum(r.mutants_refuted for r in results), sum(r.mutants_total for r in results))
    covered = (f"{len(results)} theorems at N={PROOF_BOUND}: {proved} proved, {len(refuted)} refuted with a "
               f"vLLM replay; mutants refuted {mutants[0]}/{mutants[1]}")
    bad = [f"{r.theorem}: {r.result}, vacuity {'ok' if r.vacuity_ok else 'FAILED'}, "
           f"mutants {r.mutants_refuted}/{r.mutants_total}" for r in results if not ok([r])]
    # A refuted theorem is a divergence of vLLM's behaviour from a property the spec hoped for.
    known = load_known()
    bad += [f"NEW divergence: {name} refuted; record it in known-divergences.toml as kind "
            f"'non-monotone', where '{name}', once its replay (kvspec prove) is explained"
            for name in refuted if ("non-monotone", name) not in known]
    findings = [f"known divergence {known[('non-monotone', name)].id}: {name} refuted, replayed on vLLM"
                for name in refuted if ("non-monotone", name) in known]
    return CheckResult("proofs", covered, holds=not bad, details=bad + findings or ["every theorem proved"])


# A quick run leaves these out (tests/test_proofs.py runs the proofs in the suite).
SKIPPED_WHEN_QUICK = ("proofs",)

# Every check of the gate, by the name its result carries, in the order the gate runs them.
CHECKS: dict[str, Callable[..., CheckResult]] = {
    "saved finds": check_saved_finds,
    "seed: hybrid coordinator": check_seed_hybrid,
    "seed: Mooncake store": check_seed_mooncake,
    "warning gate": check_warning_gate,
    "live KVCacheManager": check_live_manager,
    "grouping": check_grouping,
    "block sizes": check_block_sizes,
    "prefix-cache lookups": check_lookups,
    "offloading connector lookups": check_offloading,
    "stateful KVCacheManager": check_stateful_manager,
    "proofs": check_proofs,
}


def run_checks(
    adapter: VllmAdapter, seed: int = 0, scale: float = 1.0, only: Iterable[str] | None = None
) -> list[CheckResult]:
    """Every check (or those whose result is named in ``only``), in order; the Hypothesis ones
    seeded and with their budgets times ``scale``."""
    results = []
    names = list(CHECKS) if only is None else list(only)
    if scale < 1 and only is None:  # a smoke run; the proofs have no smaller budget worth running
        names = [name for name in names if name not in SKIPPED_WHEN_QUICK]
    for name in names:
        check = CHECKS[name]
        started = time.perf_counter()
        randomized = "seed" in inspect.signature(check).parameters
        result = check(adapter, seed, scale) if randomized else check(adapter)
        result.seconds = time.perf_counter() - started
        results.append(result)
    return results
