"""A NEW divergence (one known-divergences.toml does not record) prints, after the entry to
record, a plain-vLLM test replaying its smallest example: the connector-scheduled lookup, the
SimpleCPUOffload lookup and the store sides, as the lookups and offloading checks already do.

Each check is run with a recorded divergence's own example among its fixed cases (or, for the
store sides, on the draws) and an empty known list; the test it prints is paste-ready under
vLLM's ruff, imports only torch and vLLM, and, run alone by pytest with only the target's vLLM
importable, fails at its last assertion; with vLLM's answer patched to what the spec allows (a
conftest.py beside it, standing for a vLLM without the divergence) the same test passes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import plain_vllm

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
    return plain_vllm.run_alone(source, adapter.target.root, where, conftest)


def final_assertion(source: str) -> tuple[str, str]:
    """The last statement of the test function, an assertion: (as Python reads it, its first line
    as written, which pytest marks with ">" when it fails)."""
    test = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)][-1]
    last = test.body[-1]
    assert isinstance(last, ast.Assert), ast.unparse(last)
    return ast.unparse(last), source.splitlines()[last.lineno - 1].strip()


def check_printed(adapter, source: str, tmp_path: Path, final: str, patched: str) -> None:
    """Paste-ready, only torch and vLLM beside the standard library, failing alone at its last
    statement, the assertion ``final`` (a regular expression), and passing where ``patched`` (a
    conftest.py) gives the spec's answer."""
    check_all_printed(adapter, [(source, final, patched)], tmp_path)


def check_all_printed(adapter, printed: list[tuple[str, str, str]], tmp_path: Path) -> None:
    """check_printed for each (source, final, patched); the unpatched runs share one process."""
    style = []
    for number, (source, final, _) in enumerate(printed):
        assertion, _ = final_assertion(source)
        assert re.fullmatch(final, assertion), assertion
        imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M)) - sys.stdlib_module_names
        assert imported <= {"torch", "vllm"}, source
        style.append(tmp_path / "style" / f"test_replay_{number}.py")
        style[-1].parent.mkdir(parents=True, exist_ok=True)
        style[-1].write_text(source)
    assert style_problems(style) == []
    plain = plain_vllm.run_each({f"replay_{n}": source for n, (source, _, _) in enumerate(printed)},
                                adapter.target.root, tmp_path / "plain")
    for number, (source, _, patched) in enumerate(printed):
        failed = plain[f"replay_{number}"]
        assert failed.status == "failed", failed.text[-3000:]
        marked = re.findall(r"^>\s+(.*)$", failed.text, re.M)
        assert marked == [final_assertion(source)[1]], failed.text[-3000:]  # vLLM fails it there, nowhere before
        passed = run_alone(adapter, source, tmp_path / f"patched_{number}", conftest=patched)
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


def test_the_connector_tests_pass_where_vllm_answers_as_the_spec_allows(vllm_adapter, tmp_path):
    # The fixed case where every group holds 32 of a 64-token prompt: vLLM's hit is unflagged and
    # the core's, with and without the scheduler's cap at 32, so either test, no flag or the core's hit,
    # passes on plain vLLM.
    from kvspec.draws.connector_hits import FIXED_CONNECTOR_CASES
    from kvspec.emit.connector_test import connector_test
    from kvspec.impl.connector_hits import connector_hit
    from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP

    setting, state, num_tokens, _cap, skip = FIXED_CONNECTOR_CASES[2]
    cap = 32 if vllm_adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP) else None  # passed, and binding
    for kind, case in (("short-hit", (setting, state, num_tokens, None, skip)),
                       ("paths-disagree", (setting, state, num_tokens, cap, skip))):
        _blocks, answer = connector_hit(vllm_adapter, *case)
        assert not answer.hit_diverged and answer.hit == 32
        source = connector_test(kind, case, case[3], answer, f"{kind} agree")
        capped = "" if case[3] is None else f", {case[3]}"
        assert f"get_computed_blocks_for_connector(request{capped})" in source.replace("\n", "").replace("    ", "")
        if kind == "paths-disagree":
            assert f"manager.get_computed_blocks(request{capped})" in source
        passed = run_alone(vllm_adapter, source, tmp_path / kind)
        assert passed.returncode == 0, passed.stdout[-3000:]


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
    from kvspec.draws.simple_offload import SPLIT_LOCAL_CHUNK
    from kvspec.gate import simple_offload as gate

    # Without the fixed case of a finding recorded on 0.32 and older (release-findings.toml:
    # simple-offload-splits-a-local-chunk), which would fail the check there before the divergence.
    fixed = tuple(case for case in gate.FIXED_SIMPLE_CASES if case != SPLIT_LOCAL_CHUNK)
    monkeypatch.setattr(gate, "FIXED_SIMPLE_CASES", (*fixed, _simple_fine_probe()))
    result = gate.check_simple_offload(vllm_adapter, GateOptions(scale=0.01, divergences=empty_known(tmp_path)))
    assert not result.holds
    new = [line for line in result.details if line.startswith("NEW divergence")]
    assert new and new[0].startswith("NEW divergence: short-hit at 'simple-offload several groups no EAGLE'"), new
    source = printed_test(result.details)
    assert "get_num_new_matched_tokens(request, 0)" in source and "vLLM matches 1" in source
    check_printed(vllm_adapter, source, tmp_path, "assert matched == 2", MATCHES_TWO)


# ------------------------------------------------------------------ the store sides
# vLLM without the divergence, per half and kind: the divergent blocks (chunks) put or not.
# Mooncake: store_mask marks every block (None) or none; the OffloadingConnector: its reachable
# mask keeps every chunk (None) or none.
_STORE_PATCHES = {
    "mooncake store": ("from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator import (\n"
                       "    MooncakeStoreCoordinator as patched,\n)\n", "store_mask",
                       "[None] * len(self.kv_cache_groups)", "[[False] * 4096 for _ in self.kv_cache_groups]"),
    "offloading store": ("from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (\n"
                         "    OffloadingConnectorScheduler as patched,\n)\n", "_reachable_store_block_mask",
                         "None", "[False] * 4096"),
}


def store_patch(where: str, kind: str) -> str:
    source, method, everything, nothing = _STORE_PATCHES[where.split(":")[0]]
    answer = everything if kind == "store-incomplete" else nothing
    return f"{source}\n\ndef answer(self, *args, **kwargs):\n    return {answer}\n\n\npatched.{method} = answer\n"


def printed_tests(details: list[str]) -> list[tuple[str, str, str]]:
    """(kind, where, test) of every NEW divergence a failing check printed."""
    found = []
    for index, line in enumerate(details):
        if match := re.match(r"NEW divergence: (\S+) at '([^']+)'", line):
            found.append((match[1], match[2], printed_test(details[index:])))
    return found


def test_new_store_divergences_print_failing_vllm_tests(vllm_adapter, tmp_path):
    from kvspec.gate.names import Check
    from kvspec.gate.stores import check_stores
    from kvspec.tools import matrix

    result = check_stores(vllm_adapter, GateOptions(scale=0.1, divergences=empty_known(tmp_path)))
    assert not result.holds
    if any(f.check == Check.STORES and vllm_adapter.version in f.releases for f in matrix.load()):
        # A safety violation ends the check before divergences are tallied: 0.33.0's recorded finding.
        assert "then ends in error (FINISHED_ERROR)" in result.details[0], result.details
        return
    printed = printed_tests(result.details)
    assert len(printed) == sum(line.startswith("NEW divergence") for line in result.details)
    # Both halves and both kinds are met at this budget on the releases the store sides drive.
    assert {(where.split(":")[0], kind) for kind, where, _ in printed} >= {
        ("mooncake store", "store-unread"), ("offloading store", "store-incomplete"),
        ("offloading store", "store-unread")}, printed
    checked = []
    for kind, where, source in printed:
        # Per group, the divergent blocks (chunks) a later lookup reads left unwritten, or those it
        # never reads written: none.
        what, written = ("blocks", "i {} put[g]") if where.startswith("mooncake") else ("chunks", "key(g, i) {} stored")
        name, op = ("read", "not in") if kind == "store-incomplete" else ("unread", "in")
        final = (re.escape(f"assert {{g: [i for i in {what} if {written.format(op)}] for g, {what} in {name}.items()}} == {{")
                 + r"\d+: \[\](, \d+: \[\])*\}")
        checked.append((source, final, store_patch(where, kind)))
    check_all_printed(vllm_adapter, checked, tmp_path)
