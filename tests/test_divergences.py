"""Known divergences (known-divergences.toml): each is replayed by its plain-vLLM test, which
asserts the spec's number and fails on vLLM; a divergence missing from the file fails the gate;
a malformed file is refused with one line."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from test_cli import run_kvspec

from kvspec.divergences.known import KNOWN_FILE, load
from kvspec.gate.lookups import assert_lookup_conforms, check_lookups, vllm_coordinator, vllm_mooncake
from kvspec.gate.options import GateOptions
from kvspec.impl.target import TargetError
from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.hits import drafter_unproven_reason, target_unsafe_reason
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting

ROOT = KNOWN_FILE.parent
KNOWN = load()


@pytest.mark.parametrize("divergence", KNOWN.values(), ids=lambda d: d.id)
def test_plain_vllm_test_replays_the_divergence(vllm_adapter, divergence):
    """The emitted test imports only vLLM; that it fails is the divergence, seen without kvspec."""
    module = runpy.run_path(str(ROOT / divergence.test))
    tests = [value for name, value in module.items() if name.startswith("test_")]
    assert len(tests) == 1, divergence.test
    with pytest.raises(AssertionError):
        tests[0]()


def test_every_entry_is_explained():
    for divergence in KNOWN.values():
        assert len(divergence.reason) > 80, f"{divergence.id}: a reason, not a label"
        assert divergence.replayed_on, f"{divergence.id}: replayed on which vLLM?"


def test_a_divergence_missing_from_the_file_fails_the_gate(vllm_adapter, tmp_path, monkeypatch):
    empty = tmp_path / "none.toml"
    empty.write_text("# nothing known\n")
    result = check_lookups(vllm_adapter, GateOptions(scale=0.05, divergences=empty))
    assert not result.holds
    assert any(line.startswith("NEW divergence: short-hit") for line in result.details)
    assert any("def test_kvspec_" in line for line in result.details), "a ready-to-paste vLLM test"


def test_known_divergences_do_not_fail_the_gate(vllm_adapter):
    result = check_lookups(vllm_adapter, GateOptions(scale=0.05))
    assert result.holds, result.details
    assert result.details[1].startswith("known divergences met: ")


MALFORMED = {
    "not TOML": ("[[divergence]\nid = 1", "not valid TOML"),
    "field missing": ('[[divergence]]\nid = "x"\nkind = "short-hit"\n', "missing or empty where, reason, example, test"),
    "unknown kind": (
        '[[divergence]]\nid="x"\nkind="slow"\nwhere="w"\nreason="r"\nexample="e"\ntest="t"\n',
        "kind 'slow' is not one of",
    ),
    "duplicate": (
        '[[divergence]]\nid="a"\nkind="short-hit"\nwhere="w"\nreason="r"\nexample="e"\ntest="t"\n' * 2,
        "is already entry 'a'",
    ),
    "stray table": ('[other]\nx = 1\n', "expected only [[divergence]] tables"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_file_is_one_line(tmp_path, name):
    text, message = MALFORMED[name]
    path = tmp_path / "known.toml"
    path.write_text(text)
    with pytest.raises(TargetError, match=message.replace("[", r"\[")) as info:
        load(path)
    assert "\n" not in str(info.value)


@pytest.mark.release_independent
def test_cli_refuses_a_malformed_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[divergence]\n")
    proc = run_kvspec("check", "--quick", "--divergences", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("kvspec: error: known divergences:") and len(proc.stderr.splitlines()) == 1
    missing = run_kvspec("check", "--quick", "--divergences", str(Path(tmp_path, "absent.toml")))
    assert missing.returncode == 2 and "no such file" in missing.stderr


# ----------------------------------------------------------------------------- drafter tier
UNANNOTATED_EAGLE_MAMBA = (
    LookupSetting((CacheGroup(Kind.SLIDING_WINDOW, 16, window=16), CacheGroup(Kind.MAMBA, 16)), 16, use_eagle=True),
    CacheState(4, frozenset({(0, 0), (0, 2), (0, 3), (1, 0)})),
    48,
)


def test_a_drafter_unproven_hit_passes_only_when_recorded(vllm_adapter):
    """hybrid-unannotated-eagle-mamba-keeps-window-verification: the target is safe at 16, the
    drafter's proof is not; recorded, it is counted; unrecorded or strict, it fails."""
    setting, state, max_length = UNANNOTATED_EAGLE_MAMBA
    assert target_unsafe_reason(setting, state, 16, max_length) is None
    assert "nothing proves token 16" in drafter_unproven_reason(setting, state, 16)
    core = vllm_coordinator(vllm_adapter, *UNANNOTATED_EAGLE_MAMBA)
    assert core.length == 16
    assert_lookup_conforms("core", core, coordinator_lookup(*UNANNOTATED_EAGLE_MAMBA), *UNANNOTATED_EAGLE_MAMBA, KNOWN)
    with pytest.raises(AssertionError, match="drafter-unproven.*NEW divergence: drafter-unproven at 'core several"):
        assert_lookup_conforms("core", core, coordinator_lookup(*UNANNOTATED_EAGLE_MAMBA), *UNANNOTATED_EAGLE_MAMBA, {})
    store = vllm_mooncake(vllm_adapter, *UNANNOTATED_EAGLE_MAMBA)
    with pytest.raises(AssertionError, match="NEW divergence: drafter-unproven at 'mooncake several"):
        assert_lookup_conforms("mooncake", store, mooncake_lookup(*UNANNOTATED_EAGLE_MAMBA), *UNANNOTATED_EAGLE_MAMBA, load(strict_drafter=True))
    assert {d.kind for d in load(strict_drafter=True).values()} == {d.kind for d in KNOWN.values()} - {"drafter-unproven"}
