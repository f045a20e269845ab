"""The zoo's schedule (kvspec/tools/zoo.py:run_entry): which checks an entry meets, in which
order and at which budget, and when a failing check detects nothing because unpatched vLLM fails it alike."""

from kvspec.gate.options import QUICK_SCALE
from kvspec.impl.broken import VARIANTS, BrokenVariant
from kvspec.tools import zoo


def test_run_entry_stops_at_the_first_failing_check(vllm_adapter):
    variant = VARIANTS["mamba-peek-margin-core"]
    run = zoo.run_entry(vllm_adapter, variant, seed=0)
    assert run.detected and run.fired == "seed: hybrid coordinator"
    assert run.first_line == "EAGLE: vLLM hit 64, expected 48; no EAGLE: hit 64"
    order = zoo.gate_order(variant)
    assert [c["check"] for c in run.checks] == order[: order.index("seed: hybrid coordinator") + 1]
    assert [c["verdict"] for c in run.checks[:-1]] == ["holds"] * (len(run.checks) - 1)
    # Found in the quick pass, so its replay is the quick check.
    assert {c["scale"] for c in run.checks} == {QUICK_SCALE} and run.fired_scale == QUICK_SCALE
    # The Mooncake store keeps its own gate: the core's seed check still holds there.
    run = zoo.run_entry(vllm_adapter, VARIANTS["mamba-peek-margin-mooncake"], seed=0)
    verdicts = {c["check"]: c["verdict"] for c in run.checks}
    assert verdicts["seed: hybrid coordinator"] == "holds" and run.fired == "seed: Mooncake store"


def test_a_check_failing_alike_on_unpatched_vllm_detects_nothing_and_the_run_goes_on(vllm_adapter):
    """A release's own finding on a check (release-findings.toml) must not hide the entry from
    the checks after it: stand it in with a control that fails exactly as the entry does."""
    variant, checks = VARIANTS["warning-gate-inverted"], ["warning gate", "seed: hybrid coordinator"]
    first = zoo.run_entry(vllm_adapter, variant, seed=0, checks=checks)
    assert first.fired == "warning gate" and len(first.checks) == 1
    controls = {("warning gate", 0, scale): ("FAILS", first.first_line) for scale in (QUICK_SCALE, 1.0)}
    run = zoo.run_entry(vllm_adapter, variant, seed=0, checks=checks, controls=controls)
    alike = "FAILS (alike on unpatched vLLM)"
    assert [(c["verdict"], c["scale"]) for c in run.checks] == [
        (alike, QUICK_SCALE), ("holds", QUICK_SCALE), (alike, 1.0), ("holds", 1.0)]
    assert not run.detected and run.fired is None
    # A control failing otherwise leaves the detection standing.
    controls = {("warning gate", 0, QUICK_SCALE): ("FAILS", "another first line")}
    run = zoo.run_entry(vllm_adapter, variant, seed=0, checks=checks, controls=controls)
    assert run.fired == "warning gate" and zoo.conclusive(run) and len(run.checks) == 1


def test_the_gate_order_skips_the_proofs_and_the_saved_finds_unless_named():
    from kvspec.gate.registry import CHECKS

    assert zoo.gate_order(VARIANTS["warning-gate-inverted"]) == [name for name in CHECKS
                                                                 if name not in ("proofs", "saved finds")]
    naming = BrokenVariant("x", "vLLM #0", "x", "x", ("proofs", "saved finds"), lambda adapter: lambda: None)
    assert zoo.gate_order(naming) == list(CHECKS)
