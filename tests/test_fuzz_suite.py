"""Every campaign target, the stateful machine included, is a test pytest (and so HypoFuzz)
collects without fixtures: one or more per Hypothesis-driven gate check. The targets beyond the
lookups and grouping catch their check's broken vLLMs and, like the gate, every target lets a
recorded divergence pass and fails on a new one."""

import os
import re
import subprocess
import sys

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings

from kvspec.gate.names import Check
from kvspec.gate.properties import GATE_PROPERTIES, NewDivergence, property_key, recorded
from kvspec.impl.broken import VARIANTS, applied
from kvspec.impl.target import PROJECT_ROOT
from kvspec.oracles.invariants import NEW_DIVERGENCE
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.stores import StoreCase, StoreSave
from kvspec.tools import fuzz, matrix
from kvspec.tools import fuzz_targets as ft
from kvspec.tools import fuzz_targets_checks as ftc
from kvspec.tools.fuzz_targets import use

# The gate's checks that draw nothing with Hypothesis: replays, fixed scenarios, Z3 proofs.
NOT_DRAWN = {Check.SAVED_FINDS, Check.SEED_HYBRID, Check.SEED_MOONCAKE, Check.WARNING_GATE, Check.LIVE_MANAGER,
             Check.PROOFS}


def collected_as(target: str) -> str:
    """The test a target is collected as: ``test_`` and its name's words."""
    return "TestCacheMachine::runTest" if target == "stateful" else "test_" + "_".join(re.findall(r"\w+", target.lower()))


def test_every_hypothesis_driven_check_has_a_target_and_kvspec_fuzz_runs_them_all():
    assert set(ftc.TARGET_CHECKS.values()) == set(Check) - NOT_DRAWN  # a new check needs its target
    assert set(fuzz.TARGET_NAMES) == set(ftc.TARGET_CHECKS)
    assert set(fuzz.FIRST_ROUND_EXAMPLES) == set(ftc.TARGET_CHECKS)
    assert set(fuzz.PROPERTIES) == set(ftc.TARGET_CHECKS) - {"stateful"}


def test_pytest_collects_every_target_and_the_stateful_machine():
    env = {k: v for k, v in os.environ.items() if k != "KVSPEC_VLLM_SRC"}
    env.setdefault("KVSPEC_VLLM", "0.34.0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(PROJECT_ROOT / "kvspec" / "tools" / "fuzz_suite.py")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = {line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line}
    assert collected == {collected_as(target) for target in ftc.TARGET_CHECKS}


def _run(target: str, examples: int) -> None:
    function, strategy = ftc.PROPERTIES[target]
    test = given(strategy)(function)
    settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
        hypothesis.seed(0)(test))()


# One broken vLLM per check only these targets cover, and the target that catches it.
@pytest.mark.parametrize("variant, target", [
    ("cross-attention-probes-inside-blocks", "block sizes"),
    ("offloading-bound-ignores-a-group-left-out", "offloading load bound"),
    ("connector-hit-never-diverges", "connector lookups"),
    ("simple-offload-counts-the-local-prefix", "SimpleCPUOffload lookups"),
    ("offloading-stores-a-chunk-it-does-not-hold", "offloading stores"),
])
def test_a_target_catches_a_broken_vllm_its_check_catches_and_passes_on_vllm(vllm_adapter, variant, target):
    assert ftc.TARGET_CHECKS[target] in VARIANTS[variant].caught_by
    use(vllm_adapter, set())  # no saved find masks it
    with applied(vllm_adapter, [variant]), pytest.raises(AssertionError):
        _run(target, 100)
    if any(f.check == ftc.TARGET_CHECKS[target] and vllm_adapter.version in f.releases for f in matrix.load()):
        with pytest.raises(AssertionError):  # a finding recorded on this release (release-findings.toml)
            _run(target, 50)
    else:
        _run(target, 50)


# The smallest store a one-token window leaves nothing to read from (recorded as
# mooncake-store-one-token-window-keeps-no-block).
ONE_TOKEN_WINDOW_STORE = StoreCase(LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 1, window=1),), 1), 1,
                                   (StoreSave(0, 1),))


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # assume() outside @given
def test_a_recorded_divergence_passes_and_an_unrecorded_one_is_filed_under_its_kind_and_where(vllm_adapter):
    use(vllm_adapter, set())
    assert ("store-incomplete", "mooncake store: one-token window") in recorded()
    ftc.mooncake_stores(ONE_TOKEN_WINDOW_STORE)  # the gate counts it; the target lets it pass
    assert property_key("Mooncake stores", vllm_adapter, ONE_TOKEN_WINDOW_STORE)[2] == ""
    invariant, situation, message = property_key("Mooncake stores", vllm_adapter, ONE_TOKEN_WINDOW_STORE, known={})
    assert (invariant, situation) == (NEW_DIVERGENCE, "store-incomplete mooncake store: one-token window")
    assert message.startswith("NEW divergence: store-incomplete")
    with pytest.raises(NewDivergence):
        GATE_PROPERTIES["Mooncake stores"].judge(vllm_adapter, ONE_TOKEN_WINDOW_STORE, {})


# One full-attention block per token, both cached, EAGLE on, a one-token cap: the Mooncake store's
# EAGLE drop leaves it short (recorded under "short-hit" at "mooncake one group EAGLE").
EAGLE_DROP_LOOKUP = (LookupSetting((CacheGroup(Kind.FULL, 1),), 1, use_eagle=True, allow_partial_hash_hits=False),
                     CacheState(2, frozenset({(0, 0), (0, 1)})), 1)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # assume() outside @given
def test_the_lookups_targets_file_divergences_as_the_gate_does(vllm_adapter, monkeypatch):
    use(vllm_adapter, set())
    assert ("short-hit", "mooncake one group EAGLE") in recorded()
    ft.mooncake_lookups(EAGLE_DROP_LOOKUP)  # recorded: it passes
    assert ft.lookup_key("mooncake", EAGLE_DROP_LOOKUP)[2] == ""
    monkeypatch.setattr(ft, "recorded", dict)  # nothing recorded
    with pytest.raises(NewDivergence):
        ft.mooncake_lookups(EAGLE_DROP_LOOKUP)
    assert ft.lookup_key("mooncake", EAGLE_DROP_LOOKUP)[:2] == (NEW_DIVERGENCE, "short-hit mooncake one group EAGLE")
