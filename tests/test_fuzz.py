"""``kvspec fuzz``: a campaign finds an injected bug, saves it once, and the gate replays it."""

import json
import subprocess

import pytest
import vllm_copies

from kvspec.draws import codec
from kvspec.gate import saved_finds as finds
from kvspec.gate.options import GateOptions
from kvspec.gate.registry import CHECKS
from kvspec.impl.broken import applied
from kvspec.oracles.invariants import NULL_BLOCK, SAFE_HIT
from kvspec.oracles.situations import lookup_situation
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.tools import fuzz_targets as ft

# The seed scenario of vLLM #43559: full attention and Mamba, EAGLE, four blocks cached, M=64.
SEED_CASE = (
    LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16, use_eagle=True),
    CacheState.full_prefix(2, 4),
    64,
)


def run_kvspec(*args: str, env_extra=None) -> subprocess.CompletedProcess:
    return vllm_copies.run_kvspec(*args, env_extra=env_extra, without=("KVSPEC_FINDS",), timeout=600)


@pytest.mark.release_independent
def test_a_short_campaign_finds_the_injected_bug_and_saves_it_once(tmp_path):
    found = tmp_path / "finds"
    proc = run_kvspec("fuzz", "--minutes", "0.33", "--inject", "mamba-peek-margin", "--targets", "core lookups",
                      "--finds", str(found), "--db", str(tmp_path / "db"), "--seed", "1", "--round-seconds", "5")
    assert proc.returncode == 1, proc.stderr[-2000:]  # new finds
    saved = finds.load(found)
    assert saved, proc.stderr[-2000:]
    keys = [(f["invariant"], f["situation"]) for f in saved]
    assert len(keys) == len(set(keys))  # one find per (invariant, situation)
    assert NULL_BLOCK in {f["invariant"] for f in saved}  # the target reads a block the hit did not hand it
    for find in saved:
        assert find["target"] == "core lookups" and find["injected"] == ["mamba-peek-margin"]
        assert find["campaign_seed"] == 1
        assert "def test_kvspec_" in (found / (find["path"].rsplit("/", 1)[1][:-5] + ".py")).read_text()
    assert "[0:" in proc.stderr and "situations reached" in proc.stderr  # the progress line
    assert "--check 'saved finds' --inject mamba-peek-margin" in proc.stdout  # the one command replaying them


def test_a_campaign_on_another_checks_target_saves_its_find_and_the_gate_replays_it(vllm_adapter, tmp_path):
    found = tmp_path / "finds"
    proc = run_kvspec("fuzz", "--minutes", "0.2", "--max-finds", "1", "--inject", "connector-hit-never-diverges",
                      "--targets", "connector lookups", "--finds", str(found), "--db", str(tmp_path / "db"),
                      "--seed", "1", "--round-seconds", "5", env_extra={"KVSPEC_VLLM": "0.34.0"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    saved = finds.load(found)
    assert saved and {f["target"] for f in saved} == {"connector lookups"}
    for find in saved:
        assert find["situation"].startswith("connector ")
        with applied(vllm_adapter, ["connector-hit-never-diverges"]):
            assert finds.replay(vllm_adapter, find) is not None  # the input decodes and still fails
        assert finds.replay(vllm_adapter, find) is None  # and holds on vLLM


def _seed_find(directory) -> dict:
    find = {"target": "core lookups", "invariant": SAFE_HIT, "situation": lookup_situation("core", SEED_CASE[0]),
            "message": "vLLM's hit 64 is unsafe", "example": codec.encode(SEED_CASE), "found_at": "2026-01-01T00:00:00",
            "regression_test": "def test_kvspec_x():\n    pass\n"}
    finds.save(directory, find)
    return find


def test_the_gate_replays_saved_finds_first_and_fails_only_while_the_bug_is_there(vllm_adapter, tmp_path, monkeypatch):
    assert list(CHECKS)[0] == "saved finds"
    _seed_find(tmp_path)
    monkeypatch.setenv("KVSPEC_FINDS", str(tmp_path))
    clean = finds.check_saved_finds(vllm_adapter, GateOptions())
    assert clean.holds and clean.details == ["all 1 saved finds hold"]
    with applied(vllm_adapter, ["mamba-peek-margin"]):
        broken = finds.check_saved_finds(vllm_adapter, GateOptions())
    assert not broken.holds
    assert "nothing proves token 64" in "\n".join(broken.details)


def test_no_saved_finds_is_a_pass(vllm_adapter, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSPEC_FINDS", str(tmp_path / "none"))
    result = finds.check_saved_finds(vllm_adapter, GateOptions())
    assert result.holds and result.details == ["no saved finds to replay"]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # assume() outside @given
def test_a_known_find_lets_its_input_pass_so_a_campaign_looks_for_new_ones(vllm_adapter):
    test = ft.core_lookups
    with applied(vllm_adapter, ["mamba-peek-margin"]):
        ft.use(vllm_adapter, set())
        with pytest.raises(AssertionError):
            test(SEED_CASE)
        invariant, situation, _ = ft.lookup_key("core", SEED_CASE)
        assert invariant == NULL_BLOCK  # full attention's blocks cut at 48 under a hit of 64
        ft.use(vllm_adapter, {(invariant, situation)})
        try:
            test(SEED_CASE)  # masked: no exception
        finally:
            ft.use(vllm_adapter, set())


def test_a_find_file_is_data(tmp_path):
    find = _seed_find(tmp_path)
    [loaded] = finds.load(tmp_path)
    assert codec.decode(loaded["example"]) == SEED_CASE
    assert {k: v for k, v in loaded.items() if k != "path"} == find
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps({"$": "Popen", "args": ["true"]}))
    with pytest.raises(ValueError, match="unknown class 'Popen'"):
        codec.decode(json.loads(evil.read_text()))


@pytest.mark.release_independent
@pytest.mark.parametrize(
    "args, message",
    [
        (["--minutes", "0"], "--minutes 0: give a positive number"),
        (["--minutes", "1", "--targets", "nothing"], "unknown target 'nothing'"),
        (["--minutes", "1", "--inject", "no-such-bug"], "unknown variant 'no-such-bug'"),
        ([], "the following arguments are required: --minutes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_kvspec("fuzz", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("kvspec: error: ")
    assert message in proc.stderr
