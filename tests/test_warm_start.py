"""tests/warm_start.py, which forks the suite's ``kvspec`` and plain-vLLM pytest runs from a warm
process: a forked run must be the run a cold process gives, or the tests that use it prove less."""

import os
import signal
import subprocess
import textwrap
import time

import pytest
import vllm_copies
import warm_start

from kvspec.impl.target import releases_home, supported_versions

# kvspec runs on the default release and pytest on its tree, whichever release this pass targets.
pytestmark = pytest.mark.release_independent


@pytest.fixture(autouse=True)
def warm_starts_on(monkeypatch):
    """These tests are of the warm starts themselves, on even in a run with them off."""
    monkeypatch.delenv("KVSPEC_COLD_STARTS", raising=False)


def cold_kvspec(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC")}
    return subprocess.run([*vllm_copies.KVSPEC, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        ("check", "--quick", "--check", "grouping", "--check", "stateful", "--seed", "3", "--jobs", "1"),
        ("check", "--quick", "--inject", "mamba-peek-margin", "--check", "seed: hybrid coordinator"),
        ("check", "--vllm", "0.35.0"),
        ("variants",),
    ],
    ids=["two-checks-hold", "a-finding", "bad-input", "no-vllm"],
)
def test_a_forked_kvspec_prints_and_exits_as_a_cold_one(args):
    warm, cold = vllm_copies.run_kvspec(*args), cold_kvspec(*args)
    assert warm.returncode == cold.returncode, warm.stderr + cold.stderr
    assert warm.stdout == cold.stdout
    assert warm.stdout or warm.stderr


def plain_test(where, body: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    (where / "pytest.ini").write_text("[pytest]\n")
    (where / "test_probe.py").write_text(textwrap.dedent(body))


def plain_env(**extra: str) -> dict[str, str]:
    root = releases_home() / supported_versions()[0]
    return {k: v for k, v in os.environ.items() if not k.startswith("KVSPEC_")} | {"PYTHONPATH": str(root)} | extra


def test_a_forked_plain_pytest_has_the_runs_directory_environment_and_only_vllm(tmp_path):
    body = f"""
        import os, sys
        from pathlib import Path

        def test_probe():
            assert Path.cwd() == Path({str(tmp_path / "a")!r})
            assert sys.path[0] == os.getcwd() or sys.path[1] == os.getcwd()
            assert os.environ["PYTEST_PROBE"] == "this run's"
            import tempfile
            assert tempfile.gettempdir() == {str(tmp_path / "t")!r}
            assert not [name for name in sys.modules if name.startswith("kvspec")]
            import vllm
            assert vllm.__file__.startswith({str(releases_home() / supported_versions()[0])!r})
    """
    plain_test(tmp_path / "a", body)
    (tmp_path / "t").mkdir()
    first = warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "a",
                                  plain_env(PYTEST_PROBE="this run's", TMPDIR=str(tmp_path / "t")), 300)
    assert first.returncode == 0, first.stdout + first.stderr
    plain_test(tmp_path / "b", "def test_fails():\n    assert 1 == 2\n")
    failing = warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "b", plain_env(), 300)
    assert failing.returncode == 1 and "assert 1 == 2" in failing.stdout


def test_a_run_past_its_timeout_is_killed_and_the_warm_process_serves_the_next(tmp_path):
    plain_test(tmp_path / "first", "def test_first():\n    pass\n")
    assert warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "first", plain_env(), 300).returncode == 0
    warm = {key: w.proc.pid for key, w in warm_start._warm.items() if key[0] == "pytest"}
    plain_test(tmp_path / "slow", "import time\n\ndef test_slow():\n    time.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "slow", plain_env(), 5)
    plain_test(tmp_path / "next", "def test_next():\n    pass\n")
    after = warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "next", plain_env(), 300)
    assert after.returncode == 0, after.stdout + after.stderr
    assert {key: w.proc.pid for key, w in warm_start._warm.items() if key[0] == "pytest"} == warm


def no_fork(*args, **kwargs):
    raise AssertionError("served by a fork")


def test_a_checkout_or_a_release_named_otherwise_runs_cold(monkeypatch, tmp_path):
    monkeypatch.setattr(warm_start, "_run", no_fork)
    for args in (["check", "--vllm-src", str(tmp_path / "none")], ["check", "--vllm=0.35.0"],
                 ["check", "--vllm", "installed", "--json", str(tmp_path / "none" / "out.json")]):
        proc = vllm_copies.run_kvspec(*args)
        assert proc.returncode == 2 and proc.stderr.startswith("kvspec: error: "), proc.stderr


def test_an_environment_imports_could_read_differently_runs_cold(monkeypatch):
    assert vllm_copies.run_kvspec("variants").returncode == 0  # the warm process is up
    monkeypatch.setattr(warm_start._Warm, "run", no_fork)
    assert vllm_copies.run_kvspec("variants", env_extra={"VLLM_LOGGING_LEVEL": "DEBUG"}).returncode == 0
    with pytest.raises(AssertionError, match="served by a fork"):
        vllm_copies.run_kvspec("variants", env_extra={"KVSPEC_FINDS": "/nonexistent"})


def test_a_changed_worker_environment_gets_a_warm_process_started_with_it(monkeypatch, tmp_path):
    plain_test(tmp_path / "a", "def test_a():\n    pass\n")
    args = ["-q", "-p", "no:cacheprovider", "."]
    assert warm_start.run_pytest(args, tmp_path / "a", plain_env(), 300).returncode == 0
    monkeypatch.setenv("VLLM_KVSPEC_PROBE", "on")  # as the worker's own vLLM writes a flag into its environment
    assert warm_start.run_pytest(args, tmp_path / "a", plain_env(), 300).returncode == 0
    started_with = [dict(key[3]) for key in warm_start._warm if key[0] == "pytest"]
    assert any(env.get("VLLM_KVSPEC_PROBE") == "on" for env in started_with)
    assert any("VLLM_KVSPEC_PROBE" not in env for env in started_with)


def test_a_warm_process_that_cannot_start_leaves_the_run_to_a_cold_process(tmp_path):
    plain_test(tmp_path / "a", "def test_a():\n    pass\n")
    broken = plain_env() | {"PYTHONPATH": str(tmp_path / "no-vllm-here")}
    proc = warm_start.run_pytest(["-q", "-p", "no:cacheprovider", "."], tmp_path / "a", broken, 300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert isinstance(warm_start._warm[next(k for k in warm_start._warm if k[1] == broken["PYTHONPATH"])],
                      warm_start._NoWarmProcess)


def test_a_background_kvspec_is_forked_and_stops_on_a_signal_as_a_cold_one(tmp_path):
    """popen_kvspec: the signal tests' background command, its pid the command's own, stopped by
    SIGTERM with the command's exit 143 and message; one left running by its caller is ended
    before the warm process serves the next run."""
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC")}
    args = ["check", "--quick", "--check", "grouping", "--seed", "3"]
    for number, code in ((signal.SIGTERM, 143), (None, None)):
        out, err = tmp_path / f"out-{number}", tmp_path / f"err-{number}"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = warm_start.popen_kvspec(args, env, set(), stdout, stderr)
        assert isinstance(proc, warm_start.WarmPopen)
        deadline = time.monotonic() + 120
        while "grouping: started" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        if number is not None:
            proc.send_signal(number)
            assert proc.wait(timeout=30) == code and "kvspec: stopped by SIGTERM" in err.read_text()
    assert vllm_copies.run_kvspec("variants").returncode == 0  # the abandoned check was ended first
    assert proc.poll() is not None
