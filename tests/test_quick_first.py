"""``kvspec check --quick-first`` (kvspec/tools/gate_workers.py:run_quick_first, the schedule of
kvspec/gate/registry.py:quick_first): a bug the quick pass finds is reported alone, with a replay
at the quick budget that fails the same; when the quick pass holds, the whole gate runs and
reports what a plain run reports."""

import json
import shlex

from kvspec.cli import main as kvspec
from kvspec.gate.names import Check
from kvspec.gate.options import QUICK_SCALE
from kvspec.gate.registry import quick_first

CHECKED = ["--check", "seed: hybrid coordinator", "--check", "block sizes", "--jobs", "1"]
COMPARED = ("check", "verdict", "covered", "details", "coverage", "minimums")


def test_the_schedule_is_the_quick_pass_then_the_whole_gate():
    names = [Check.BLOCK_SIZES, Check.PROOFS, Check.GROUPING]
    assert quick_first(names) == [(Check.BLOCK_SIZES, QUICK_SCALE), (Check.GROUPING, QUICK_SCALE),
                                  (Check.BLOCK_SIZES, 1.0), (Check.PROOFS, 1.0), (Check.GROUPING, 1.0)]


def test_a_bug_the_quick_pass_finds_is_reported_alone_with_a_quick_replay(tmp_path, capsys):
    out = tmp_path / "found.json"
    assert kvspec(["check", "--quick-first", "--inject", "mamba-peek-margin", *CHECKED, "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["found_in_quick_pass"] and [c["check"] for c in report["checks"]] == ["seed: hybrid coordinator"]
    assert report["checks"][0]["replay"].endswith("--check 'seed: hybrid coordinator' --inject mamba-peek-margin --quick")
    printed = capsys.readouterr().out
    assert "quick pass: seed: hybrid coordinator found this at a twentieth of its examples" in printed
    replay = tmp_path / "replay.json"
    assert kvspec([*shlex.split(report["checks"][0]["replay"])[1:], "--json", str(replay)]) == 1
    replayed = json.loads(replay.read_text())["checks"][0]
    assert {k: replayed[k] for k in COMPARED} == {k: report["checks"][0][k] for k in COMPARED}


def test_when_the_quick_pass_holds_the_whole_gate_runs(tmp_path):
    reports = {}
    for mode in ("--quick-first", None):
        out = tmp_path / f"{mode}.json"
        assert kvspec(["check", *([mode] if mode else []), *CHECKED, "--json", str(out)]) == 0
        reports[mode] = json.loads(out.read_text())
    assert not reports["--quick-first"]["found_in_quick_pass"]
    first, plain = ([{k: c[k] for k in COMPARED} for c in reports[m]["checks"]] for m in ("--quick-first", None))
    assert first == plain and [c["check"] for c in first] == ["seed: hybrid coordinator", "block sizes"]


def test_quick_and_quick_first_together_are_refused(capsys):
    assert kvspec(["check", "--quick", "--quick-first"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
