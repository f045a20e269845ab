"""The Z3 proofs (proofs/): every theorem holds at a small bound with its vacuity check and its
mutants refuted; the vacuity check bites; unknown is a failure; the counterexamples replay
on real vLLM with the numbers the issue names (the seed's 64 versus 48); and the proofs check
fails on a refuted theorem no recorded divergence explains."""

from __future__ import annotations

import pytest
import z3

from kvspec.gate.options import GateOptions
from kvspec.gate.proof_replays import lookup_lines, run_proofs_on_vllm, vllm_hit
from kvspec.gate.proofs import proofs_verdict
from kvspec.proofs import core, replay
from kvspec.proofs.core import Theorem, run_theorem, single
from kvspec.proofs.runner import ok, run_proofs, theorems

SMALL = 6
NAMES = [t.name for t in theorems(SMALL)]


@pytest.fixture(scope="module")
def proofs_at_small_bound():
    """The runner's results at the small bound, proved once for the tests that read them (the
    file runs in one worker): Z3 and spec/ only, the same on every release."""
    return run_proofs(SMALL)


@pytest.mark.release_independent
@pytest.mark.parametrize("name", NAMES)
def test_theorem_at_small_bound(name, proofs_at_small_bound):
    [result] = [r for r in proofs_at_small_bound if r.theorem == name]
    expected = "refuted" if name.startswith("5b") else "proved"
    assert result.result == expected, result.details
    assert result.vacuity_ok, result.details
    assert result.mutants_refuted == result.mutants_total, result.details


@pytest.mark.release_independent
def test_vacuous_assumptions_are_detected():
    x = z3.Int("x")
    contradictory = single("contradictory", [x > 1, x < 0], x == 5)
    result, vacuity, _ = core.discharge(contradictory, [])
    assert result == "proved" and not vacuity  # proved only because nothing satisfies the premises


@pytest.mark.release_independent
def test_unused_key_premise_is_detected():
    x = z3.Int("x")
    unused = single("unused key", [x >= 0], x >= 0, key=[x <= 100])
    assert core.discharge(unused, [])[1] is False
    used = single("used key", [x >= 0], x <= 100, key=[x <= 100])
    assert core.discharge(used, [])[1] is True


@pytest.mark.release_independent
def test_unknown_is_a_failure(monkeypatch):
    monkeypatch.setattr(core, "TIMEOUT_MS", 1)
    a, b, c = z3.Ints("a b c")
    hard = single("Fermat n=3 in a box", [a >= 1, b >= 1, c >= 1], a * a * a + b * b * b != c * c * c)
    result = run_theorem(Theorem("hard", "-", lambda: ([hard], [])))
    assert result.result in ("unknown", "timeout")
    assert not ok([result])


@pytest.mark.release_independent
def test_run_proofs_shape(proofs_at_small_bound):
    results = proofs_at_small_bound
    assert [r.theorem for r in results] == NAMES
    assert ok(results)
    assert all(r.bound and r.seconds >= 0 for r in results)


def test_mamba_margin_counterexample_replays_as_the_seed(vllm_adapter):
    lookup, clean, mutant = replay.seed_counterexample(16)
    assert (clean, mutant) == (48, 64)
    # What the two answers force: full attention holds all four blocks, Mamba the states at 48 and 64.
    assert {(0, 0), (0, 1), (0, 2), (0, 3), (1, 2), (1, 3)} <= lookup.state.cached
    assert lookup.max_length == 64 and lookup.state.num_hashes == 4
    [counterexample] = replay.replay("seed", lookup, "mamba-peek-margin")
    lines = lookup_lines(vllm_adapter, counterexample)
    print("\n".join(lines))
    assert vllm_hit(vllm_adapter, lookup) == 48
    assert vllm_hit(vllm_adapter, lookup, "mooncake") == 48
    assert "with mamba-peek-margin: core 64, mooncake 64" in lines[-1]


def test_eagle_non_monotonicity_replays_on_vllm(vllm_adapter):
    less, more, small, big = replay.eagle_monotonicity_counterexample(6)
    assert less.state.cached < more.state.cached and small > big
    for path in ("core", "mooncake"):
        assert (vllm_hit(vllm_adapter, less, path), vllm_hit(vllm_adapter, more, path)) == (small, big)


@pytest.mark.release_independent
def test_encoding_agrees_with_the_reference():
    """The z3 encoding, evaluated on concrete lookups, answers as reference/lookup.py does."""
    import random

    from kvspec.proofs import encoding as E
    from kvspec.proofs.concrete import lookup_of, tokens
    from kvspec.proofs.coordinators import reconcile
    from kvspec.reference.lookup import coordinator_lookup

    rng, n, checked = random.Random(0), 5, 0
    for num in (2, 3):
        sc = E.scenario(f"agree{num}_", num, n)
        hit = reconcile(sc, n + 2).hit
        for _ in range(40):
            kinds = sorted((rng.choice([E.FULL, E.SW, E.MAMBA]) for _ in range(num)), key=lambda k: k != E.FULL)
            nh, eagle = rng.randint(0, n), rng.random() < 0.6
            pins = [sc.nh == nh, sc.m.units == rng.randint(0, n + 1), sc.m.frac == (rng.random() < 0.3),
                    sc.eagle == eagle, sc.allow_partial == (rng.random() < 0.7)]
            for g, kind in zip(sc.groups, kinds):
                pins += [g.kind == kind, g.k == rng.choice(E.BLOCK_UNITS), g.annotated == (eagle and rng.random() < 0.3),
                         g.need == (rng.randint(0, 3) if kind == E.SW else 0)]
                pins += [b == (j < nh and rng.random() < 0.8) for j, b in enumerate(g.bits)]
            outcome = core.check(E.well_formed(sc) + pins)
            if outcome.status != "sat":
                continue  # equal specs drawn twice: vLLM would merge them
            lookup = lookup_of(outcome.model, sc, "hybrid")
            assert tokens(outcome.model, hit) == coordinator_lookup(lookup.setting, lookup.state, lookup.max_length).length
            checked += 1
    assert checked > 40


@pytest.fixture(scope="module")
def proofs_on_vllm(vllm_adapter):
    """The proofs check's results at the small bound (where the verdicts are the default
    bound's), every counterexample replayed on the target's vLLM; proved once for the tests below."""
    return run_proofs_on_vllm(SMALL, vllm_adapter)


@pytest.mark.parametrize("name", [n for n in NAMES if not n.startswith(("F", "5b"))])
def test_every_mutant_counterexample_replays_on_vllm(vllm_adapter, proofs_on_vllm, name):
    """Each refuted proof mutant leaves at least one line of vLLM's own answer on its inputs."""
    [result] = [r for r in proofs_on_vllm if r.theorem == name]
    vllm_lines = [line for line in result.replays if f"vLLM {vllm_adapter.version}" in line]
    assert result.mutants_total and len(vllm_lines) >= result.mutants_total, result.replays


def test_an_unrecorded_refuted_theorem_fails_the_proofs_check(proofs_on_vllm, tmp_path):
    """Theorem 5b (not monotone with EAGLE) passes only as a recorded divergence
    (known-divergences.toml): the same proofs judged twice."""
    assert proofs_verdict(proofs_on_vllm, SMALL, GateOptions().known()).holds
    empty = tmp_path / "none.toml"
    empty.write_text("# nothing known\n")
    result = proofs_verdict(proofs_on_vllm, SMALL, GateOptions(divergences=empty).known())
    assert not result.holds
    assert result.details[0].startswith("NEW divergence: 5b monotone with EAGLE refuted")
