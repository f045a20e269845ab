"""A NEW divergence (one known-divergences.toml does not record) prints, after the entry to
record, a plain-vLLM test replaying its smallest example: the connector-scheduled lookup, the
SimpleCPUOffload lookup and the store sides, as the lookups and offloading checks already do.

Each check is run with a recorded divergence's own example among its fixed cases (or, for the
store sides, on the draws) and an empty known list; the test it prints is paste-ready under
vLLM's ruff, imports only torch and vLLM, and, run alone by pytest with only the target's vLLM
importable, fails at its last assertion; with vLLM's answer patched to what the spec allows (a
conftest.py beside it, standing for a vLLM without the divergence) the same test passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from kvspec.emit.vllm_style import style_problems
from kvspec.gate.options import GateOptions
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting

HEADING = "  as a vLLM test:"


def printed_test(details: list[str]) -> str:
    """The first test a failing check printed under ``HEADING``, unindented."""
    assert HEADING in details, details
    source = []
    for line in details[details.index(HEADING) + 1:]:
        if line.strip() and not line.startswith("    "):
            break
        source.append(line[4:])
    return "\n".join(source).rstrip() + "\n"


def run_alone(adapter, source: str, where: Path, conftest: str | None = None) -> subprocess.CompletedProcess:
    """``source`` run by pytest in a process of its own, with only the target's vLLM importable
    (and ``conftest``, when given, beside it)."""
    where.mkdir(parents=True)
    (where / "pytest.ini").write_text("[pytest]\n")
    (where / "test_replay.py").write_text(source)
    if conftest:
        (where / "conftest.py").write_text(conftest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPEC_")} | {"PYTHONPATH": str(adapter.target.root)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "."],
                          cwd=where, env=env, capture_output=True, text=True, timeout=600)


def check_printed(adapter, source: str, tmp_path: Path, last_assertion: str, patched: str) -> None:
    """Paste-ready, only torch and vLLM beside the standard library, failing alone at ``last_assertion`` (the test's last
    line), and passing where ``patched`` (a conftest.py) gives the spec's answer."""
    assert source.rstrip().splitlines()[-1].strip() == last_assertion, source
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M)) - sys.stdlib_module_names
    assert imported <= {"torch", "vllm"}, source
    (tmp_path / "style").mkdir()
    (tmp_path / "style" / "test_replay.py").write_text(source)
    assert style_problems([tmp_path / "style" / "test_replay.py"]) == []
    failed = run_alone(adapter, source, tmp_path / "plain")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert f">       {last_assertion}\nE       " in failed.stdout, failed.stdout[-3000:]
    passed = run_alone(adapter, source, tmp_path / "patched", conftest=patched)
    assert passed.returncode == 0, passed.stdout[-3000:]


def empty_known(tmp_path: Path) -> Path:
    path = tmp_path / "none.toml"
    path.write_text("# nothing known\n")
    return path


# ------------------------------------------------------------------ the connector-scheduled lookup
# divergences/test_connector_flags_a_safe_hit_eagle.py's example: [mamba 1, full 1, full 2], hash
# unit 1, EAGLE, a 3-token prompt, every group holding units 0-2; vLLM flags its hit of 2.
CONNECTOR_EAGLE = (LookupSetting((CacheGroup(Kind.MAMBA, 1), CacheGroup(Kind.FULL, 1), CacheGroup(Kind.FULL, 2)), 1,
                                 use_eagle=True), CacheState.full_prefix(3, 3), 3, None, False)
# vLLM without the spurious flag: its own answer, the flag cleared where every group holds the hit.
UNFLAGGED = '''
from vllm.v1.core.kv_cache_manager import KVCacheManager

original = KVCacheManager.get_computed_blocks_for_connector


def unflagged(self, request, *args):
    blocks, hit, boundary, _diverged = original(self, request, *args)
    return blocks, hit, boundary, False


KVCacheManager.get_computed_blocks_for_connector = unflagged
'''


def test_a_new_connector_divergence_prints_a_failing_vllm_test(vllm_adapter, tmp_path, monkeypatch):
    from kvspec.gate import connector_hits as gate

    monkeypatch.setattr(gate, "FIXED_CONNECTOR_CASES", (*gate.FIXED_CONNECTOR_CASES, CONNECTOR_EAGLE))
    result = gate.check_connector_hits(vllm_adapter, GateOptions(scale=0.01, divergences=empty_known(tmp_path)))
    assert not result.holds
    assert result.details[0].startswith(
        "NEW divergence: short-hit at 'connector flags a safe hit several groups EAGLE'"), result.details
    source = printed_test(result.details)
    assert "manager.get_computed_blocks_for_connector(" in source and "assert hit == 2\n" in source
    check_printed(vllm_adapter, source, tmp_path, "assert not hit_diverged", UNFLAGGED)


# ------------------------------------------------------------------ the SimpleCPUOffload lookup
# divergences/test_simple_offload_fine_probe_stops_at_missing_unit.py's example: [full 2, full 2,
# mamba 2, full 4], hash unit 1, CPU: groups 0-2 units 0-1, group 3 units 0 and 2, a 4-token
# prompt, no local prefix; vLLM matches 1 where 2 is safe.
def _simple_fine_probe():
    from kvspec.spec.simple_offload import SimpleOffloadCase

    groups = (CacheGroup(Kind.FULL, 2), CacheGroup(Kind.FULL, 2), CacheGroup(Kind.MAMBA, 2), CacheGroup(Kind.FULL, 4))
    cpu = CacheState(4, frozenset({(g, j) for g in range(3) for j in range(2)} | {(3, 0), (3, 2)}))
    return SimpleOffloadCase(LookupSetting(groups, 1), cpu, 4, 0)


# vLLM matching what the spec allows here: the longest safe match, 2 tokens.
MATCHES_TWO = '''
from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler


def matches_two(self, request, num_computed_tokens):
    return 2, True


SimpleCPUOffloadScheduler.get_num_new_matched_tokens = matches_two
'''


def test_a_new_simple_offload_divergence_prints_a_failing_vllm_test(vllm_adapter, tmp_path, monkeypatch):
    from kvspec.gate import simple_offload as gate

    monkeypatch.setattr(gate, "FIXED_SIMPLE_CASES", (*gate.FIXED_SIMPLE_CASES, _simple_fine_probe()))
    result = gate.check_simple_offload(vllm_adapter, GateOptions(scale=0.01, divergences=empty_known(tmp_path)))
    assert not result.holds
    new = [line for line in result.details if line.startswith("NEW divergence")]
    assert new and new[0].startswith("NEW divergence: short-hit at 'simple-offload several groups no EAGLE'"), new
    source = printed_test(result.details)
    assert "get_num_new_matched_tokens(request, 0)" in source and "vLLM matches 1" in source
    check_printed(vllm_adapter, source, tmp_path, "assert matched == 2", MATCHES_TWO)
