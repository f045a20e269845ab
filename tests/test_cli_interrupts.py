"""Interrupts and result files (issue 16): SIGINT exits 130 and SIGTERM 143 at any moment of any
command, no result file then claims success, every child process is ended (and one whose parent
dies exits by itself), temporary directories are removed; result files are written whole."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_start import WarmPopen, popen_kvspec

from kvspec.gate import files
from kvspec.impl.target import TargetError

pytestmark = pytest.mark.release_independent

KVSPEC = [sys.executable, "-m", "kvspec.cli"]


def start(*args: str, tmp_path: Path, cold: bool = False) -> tuple[subprocess.Popen | WarmPopen, Path, Path]:
    """``kvspec ARGS`` in the background, its stdout and stderr in files (read while it runs):
    forked from a warm process (tests/warm_start.py) unless ``cold``, for a signal while it loads."""
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC")}
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        if cold:
            return subprocess.Popen([*KVSPEC, *args], stdout=stdout, stderr=stderr, env=env), out, err
        return popen_kvspec(list(args), env, {"TMPDIR"}, stdout, stderr), out, err


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None, f"exited {proc.returncode} before {text!r}: {path.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s"
        time.sleep(0.05)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except OSError:
            return False
    return {pid for pid in pids if running(pid)}


def wait_until_caught(proc: subprocess.Popen, number: int, timeout: float = 30) -> None:
    """Until ``proc`` has its own handler for ``number`` (Linux's SigCgt mask)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) >> (number - 1) & 1:
                return
        time.sleep(0.002)
    raise AssertionError(f"the command never caught signal {number}")


def assert_stopped(proc, err: Path, number: int) -> None:
    code = proc.wait(timeout=30)
    text = err.read_text()
    assert code == 128 + number, text
    assert f"stopped by {signal.Signals(number).name}" in text
    assert "Traceback" not in text and "Exception ignored" not in text


# ----------------------------------------------------------------------------- kvspec check
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["loading", "after the header", "in a check"])
def test_a_stopped_check_exits_128_plus_the_signal_and_leaves_no_result(number, moment, tmp_path):
    result = tmp_path / "check.json"
    result.write_text(json.dumps({"ok": True}))  # a previous run's: must not look current
    junit = tmp_path / "check.xml"
    junit.write_text("<testsuites/>")
    proc, out, err = start("check", "--quick", "--check", "grouping", "--check", "prefix-cache lookups",
                           "--json", str(result), "--junit", str(junit), tmp_path=tmp_path, cold=moment == "loading")
    if moment == "loading":  # as soon as it catches the signal, while Hypothesis and vLLM load
        wait_until_caught(proc, signal.SIGTERM)  # Python catches SIGINT itself from its start
    elif moment == "after the header":
        wait_for(out, "kvspec check:", proc)
        time.sleep(0.3)
    else:
        wait_for(err, "grouping: started", proc)
        time.sleep(0.5)
    proc.send_signal(number)
    assert_stopped(proc, err, number)
    assert not result.exists() and list(tmp_path.glob(".check.json*")) == []
    assert not junit.exists() and list(tmp_path.glob(".check.xml*")) == []


HANDLER_WHEN_HYPOTHESIS_LOADS = """
import signal, sys
sys.argv[0] = {launcher!r}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis":
            sys.meta_path.remove(self)
            default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            print("default" if default else "kvspec", flush=True)
sys.meta_path.insert(0, Watch())
import kvspec
"""


def test_the_command_takes_over_the_signals_before_its_first_heavy_import():
    launched = subprocess.run([sys.executable, "-c", HANDLER_WHEN_HYPOTHESIS_LOADS.format(launcher="/venv/bin/kvspec")],
                              capture_output=True, text=True, timeout=60, preexec_fn=_sigint_default)
    assert launched.stdout.strip() == "kvspec", launched.stderr


def _sigint_default() -> None:
    """A parent that ignores SIGINT passes the ignore on through exec, and Python then puts no
    handler of its own in place; the check is of what importing kvspec does, so start from none."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_process_that_only_imports_kvspec_keeps_its_own_handlers():
    imported = subprocess.run([sys.executable, "-c", HANDLER_WHEN_HYPOTHESIS_LOADS.format(launcher="pytest")],
                              capture_output=True, text=True, timeout=60, preexec_fn=_sigint_default)
    assert imported.stdout.strip() == "default", imported.stderr


# ----------------------------------------------------------------------------- kvspec review
def test_a_stopped_review_ends_its_workers_and_removes_its_temp_dir(tmp_path):
    proc, out, err = start("review", "--base", "0.34.0", "--head", "0.33.0", "--quick", "--out",
                           str(tmp_path / "r.md"), tmp_path=tmp_path)
    deadline = time.monotonic() + 60
    while len(workers := descendants(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(workers) >= 2, err.read_text()
    assert list((tmp_path / "tmp").glob("kvspec-review-*")), "review's temporary directory is not in its TMPDIR"
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    assert_stopped(proc, err, signal.SIGTERM)
    time.sleep(0.5)
    assert not alive(workers), "review workers left running"
    assert list((tmp_path / "tmp").iterdir()) == [] and not (tmp_path / "r.md").exists()


def test_review_workers_exit_by_themselves_when_review_is_killed(tmp_path):
    proc, _, err = start("review", "--base", "0.34.0", "--head", "0.33.0", "--quick", tmp_path=tmp_path)
    deadline = time.monotonic() + 60
    while len(workers := descendants(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(workers) >= 2, err.read_text()
    proc.kill()  # SIGKILL: nothing of review runs, the workers must notice alone
    proc.wait()
    deadline = time.monotonic() + 15
    while alive(workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(workers), "orphaned review workers"


# ----------------------------------------------------------------------------- every other command
COMMANDS = {
    "prove (in Z3)": (["prove", "--no-vllm"], ""),  # prints only at the end: stopped 2 s in
    "zoo": (["zoo", "--entry", "group-size-always-smallest", "--seeds", "20", "--no-control"], "kvspec zoo:"),
    "fuzz": (["fuzz", "--minutes", "5", "--seed", "0", "--targets", "core lookups"], "kvspec fuzz:"),
    "mutate": (["mutate", "--limit", "1", "--function", "MambaManager.find_longest_cache_hit"], "kvspec mutate:"),
    "matrix": (["matrix", "0.30.0"], "checking vLLM 0.30.0"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_stops_on_sigint_and_sigterm_without_orphans(command, tmp_path):
    args, started = COMMANDS[command]
    extra = {"fuzz": ["--db", str(tmp_path / "db"), "--finds", str(tmp_path / "finds")],
             "matrix": ["--out", str(tmp_path)]}.get(args[0], [])
    for number in (signal.SIGINT, signal.SIGTERM):
        proc, out, err = start(*args, *extra, tmp_path=tmp_path)
        deadline = time.monotonic() + 120
        while started not in out.read_text() + err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text() + err.read_text()
            time.sleep(0.1)
        time.sleep(2)
        children = descendants(proc.pid)
        proc.send_signal(number)
        assert_stopped(proc, err, number)
        time.sleep(0.5)
        assert not alive(children), f"{command}: children left running"
        assert list((tmp_path / "tmp").glob("kvspec-*")) == []  # (torch leaves its own cache dir)


def test_a_signal_after_the_last_line_still_exits_128_plus_the_signal(tmp_path):
    """The interpreter's finalization puts the default handlers back: a signal in a finished
    command's last moments used to kill it raw (exit -2, no message). A one-entry zoo prints its
    last line in about two seconds; the signal follows it at once."""
    for number in (signal.SIGINT, signal.SIGTERM):
        proc, out, err = start("zoo", "--entry", "group-size-always-smallest", "--no-control", tmp_path=tmp_path)
        wait_for(out, "entries detected", proc)
        proc.send_signal(number)
        code = proc.wait(timeout=30)
        assert code in (0, 128 + number), (code, err.read_text())  # 0: it had already left
        assert "Traceback" not in err.read_text()


def test_a_killed_matrix_takes_its_gates_with_it(tmp_path):
    """SIGKILL runs no handler: the gate a matrix started must notice alone and end."""
    proc, _, err = start("matrix", "0.30.0", "--out", str(tmp_path), tmp_path=tmp_path)
    deadline = time.monotonic() + 60
    while not (children := descendants(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children, err.read_text()
    time.sleep(1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(children), "the matrix's gate left running"
    assert not (tmp_path / "check-0.30.0.json").exists()


# ----------------------------------------------------------------------------- result files
def test_a_full_disk_leaves_no_result_and_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "check.json"
    target.write_text('{"ok": true}')  # the previous run's

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", no_space)
    files.forget_previous(target)
    with pytest.raises(TargetError, match="--json .*: cannot write: No space left on device"):
        files.write_atomically(target, "{}" * 1000, f"--json {target}")
    assert list(tmp_path.iterdir()) == [] and not files.IN_PROGRESS


def test_a_result_file_is_replaced_whole(tmp_path):
    target = tmp_path / "check.json"
    target.write_text("old")
    files.write_atomically(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["check.json"]
