"""Every failure a command reports prints one command that replays it, and that command does
(issue 16): a zoo detection and a fuzz find, replayed by ``kvspec check``, draw the same at the
same seed whatever else the first command loaded (kvspec/draws/determinism.py); and progress
reaches a CI pipe while the run runs, unless ``--quiet``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from vllm_copies import run_kvspec

# Each kvspec run here is on the default release, whichever release this pass targets (tests/conftest.py).
pytestmark = pytest.mark.release_independent


def replay(command: str) -> subprocess.CompletedProcess:
    """Run a printed replay command (``[VAR=value ...] kvspec check ...``) as a user would."""
    words = shlex.split(command)
    env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-")
               and words.index(word) < words.index("kvspec"))
    assert words[words.index("kvspec") + 1] == "check", command
    return run_kvspec(*words[words.index("kvspec") + 1:], "--quiet", env_extra=env)


def rows(stdout: str) -> dict[str, str]:
    return {line.split("  ")[0]: line for line in stdout.splitlines() if "  " in line and not line.startswith(" ")}


def test_a_zoo_detection_replays_with_check(tmp_path):
    """A Hypothesis-drawn detection (grouping, seed 3): the same minimal failure under check."""
    out = tmp_path / "zoo.json"
    zoo = run_kvspec("zoo", "--entry", "group-size-always-smallest", "--no-control", "--seed", "3", "--json", str(out))
    assert zoo.returncode == 0, zoo.stdout + zoo.stderr
    run = json.loads(out.read_text())["entries"][0]["runs"][0]
    assert run["fired"] == "grouping"
    assert f"replay: {run['replay']}" in zoo.stdout
    check = replay(run["replay"])
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"FAILS: {run['first_line']}" in rows(check.stdout)["grouping"]


def test_a_fuzz_find_replays_with_check(tmp_path):
    finds = tmp_path / "finds"
    fuzz = run_kvspec("fuzz", "--minutes", "0.5", "--max-finds", "1", "--seed", "0", "--inject", "mamba-peek-margin",
                      "--targets", "core lookups", "--finds", str(finds), "--db", str(tmp_path / "db"), "--quiet")
    assert fuzz.returncode == 1, fuzz.stdout + fuzz.stderr
    assert len(list(finds.glob("*.json"))) == 1  # the campaign stopped at its first find
    command = fuzz.stdout.split("replay them with: ")[1].strip()
    check = replay(command)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "saved finds still fail" in rows(check.stdout)["saved finds"]
    # Without the bug the find holds: the replay is the find's, not any failure.
    clean = replay(command.replace(" --inject mamba-peek-margin", ""))
    assert clean.returncode == 0 and "holds" in rows(clean.stdout)["saved finds"], clean.stdout


def test_a_failing_check_prints_a_replay_that_fails_the_same(tmp_path):
    check = run_kvspec("check", "--quick", "--inject", "mamba-peek-margin", "--check", "seed: hybrid coordinator")
    assert check.returncode == 1
    command = next(line for line in check.stdout.splitlines() if line.startswith("replay seed: hybrid coordinator:"))
    again = replay(command.split(": ", 1)[1])
    assert again.returncode == 1 and rows(again.stdout) == rows(check.stdout)


def test_progress_reaches_a_pipe_while_the_run_runs():
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC")}
    proc = subprocess.Popen([sys.executable, "-m", "kvspec.cli", "check", "--quick", "--check", "grouping"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().startswith("kvspec check: vLLM")
        assert proc.poll() is None, "the header came only at exit"
        progress = [proc.stderr.readline() for _ in range(3)]
        assert proc.poll() is None or "grouping: started" in "".join(progress)
        assert any("grouping: started" in line for line in progress), progress
        rest = "".join(progress) + proc.stderr.read()
        assert "grouping: holds, " in rest and " s\n" in rest
    finally:
        proc.wait(timeout=120)


def test_quiet_leaves_only_results():
    proc = run_kvspec("check", "--quick", "--check", "seed: hybrid coordinator", "--quiet")
    assert proc.returncode == 0
    assert "started" not in proc.stderr and "seed: hybrid coordinator" in proc.stdout
