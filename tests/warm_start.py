"""Processes the suite starts (``kvspec``, and pytest on a plain-vLLM test) forked from a warm
one that has already imported what they import, instead of each paying vLLM's import (about 8 s).

Each test worker keeps one warm process per kind and environment, started on first use with
exactly the environment, path and start-up a cold process would have, its imports done, then
waiting. A run forks it: the child takes the run's standard streams, working directory and
arguments and runs the module as ``python -m`` does, so it reaches the command's code in the state
a cold process reaches it, minus the import time, and it exits as that process would. The caller
gets what ``subprocess.run(..., capture_output=True, text=True, timeout=...)`` gives.

The child's environment is the run's own, with what the warm process's imports did to its
environment (kvspec's door sets vLLM's offline and logging defaults) done again, as a cold process
does on its own imports. Each warm process was started with its runs' environment wherever imports
read it (all but kvspec's and pytest's own ``KVSPEC_*`` and ``PYTEST_*``): a test worker's
environment changes as its own vLLM writes defaults and flags into it, and a changed environment
gets a warm process of its own (at most ``MAX_WARM`` a worker). Served cold, by subprocess: a
variable imports read that the caller sets for one run (TMPDIR is not one: tempfile's cached
default is forgotten in the child), a checkout (``--vllm-src``, ``--vllm installed``), a run whose
warm process cannot start (a broken tree: the command reports it), and every run under
``KVSPEC_COLD_STARTS=1``.

The signal tests start theirs in the background with ``popen_kvspec``: the child's pid is the
command's, to signal and watch, and it takes over SIGINT and SIGTERM as ``import kvspec`` does in
a command. Those of the start-up itself (a signal while vLLM loads), of process groups and of
progress through a pipe keep their own ``subprocess.Popen``.

Hand-written rather than multiprocessing's forkserver: that one runs a pickled function in a
child prepared from the caller's ``sys.path`` and ``__main__``, not a command with its own
streams, working directory and environment.

The warm process itself, and the child it forks, are tests/warm_server.py.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from warm_server import MESSAGE

RUNTIME_PREFIXES = ("KVSPEC_", "PYTEST_")  # read when used, not at import (KVSPEC_VLLM* aside)
# Read at import only into tempfile's cached default, which the child forgets, and by torch for
# its compile cache, which no run here uses: a run's own TMPDIR is the run's, not a one-off.
RUNTIME_VARIABLES = ("TMPDIR",)
SERVER = Path(__file__).with_name("warm_server.py")


# ------------------------------------------------------------------ the caller's side
class _Warm:
    """One warm process and the socket to it."""

    def __init__(self, kind: str, arg: str, env: dict[str, str], cwd: str):
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"kvspec-warm-{os.getpid()}-{kind}-{time.monotonic_ns()}.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(SERVER), kind, arg, str(theirs.fileno())], env=env,
                                         cwd=cwd, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        theirs.close()
        self.sock = ours
        self.pending: WarmPopen | None = None
        try:
            ready = self._receive(timeout=600).get("ready") is True
        except OSError:  # no word within the time: as good as not started
            ready = False
        said = self.log.read_text()[-3000:]
        self.log.unlink()  # /tmp keeps no file per process; what it said goes into the error
        if not ready:
            self.close()
            raise RuntimeError(f"the warm {kind} process did not start:\n{said}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.sock.close()

    def _receive(self, timeout: float | None) -> dict:
        self.sock.settimeout(timeout)
        data = self.sock.recv(MESSAGE)
        if not data:
            raise RuntimeError("the warm process exited")
        return json.loads(data)

    def run(self, argv: list[str], env: dict[str, str], cwd: str | None,
            timeout: float) -> subprocess.CompletedProcess:
        try:
            return self._exchange(argv, env, cwd, timeout)
        except subprocess.TimeoutExpired:  # the exchange was completed: the child is killed and reaped
            raise
        except BaseException:  # a run cut short leaves the socket mid-exchange: start afresh next time
            self.close()
            raise

    def popen(self, argv: list[str], env: dict[str, str], stdout, stderr) -> WarmPopen:
        try:
            self.pending = WarmPopen(self, argv, self._fork(argv, env, None, stdout.fileno(), stderr.fileno()))
        except BaseException:
            self.close()
            raise
        return self.pending

    def _fork(self, argv: list[str], env: dict[str, str], cwd: str | None, out_w: int, err_w: int) -> int:
        """The child's pid, once the warm process has forked it with these streams."""
        if self.pending is not None and self.pending.returncode is None:  # a test that never waited
            self.pending.kill()
            self.pending.wait(timeout=60)
        self.pending = None
        devnull = os.open(os.devnull, os.O_RDONLY)
        request = {"module": argv[2], "argv": argv[3:], "env": env, "cwd": cwd or os.getcwd()}
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [devnull, out_w, err_w])
        finally:
            os.close(devnull)
        return self._receive(timeout=60)["pid"]

    def _exchange(self, argv: list[str], env: dict[str, str], cwd: str | None,
                  timeout: float) -> subprocess.CompletedProcess:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = self._fork(argv, env, cwd, out_w, err_w)
        finally:
            os.close(out_w)
            os.close(err_w)
        stdout, stderr, timed_out = _read_both(out_r, err_r, time.monotonic() + timeout)
        if timed_out:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        code = self._receive(timeout=60)["exit"]
        if timed_out:
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, code, stdout, stderr)


class WarmPopen:
    """A command forked from a warm process, running while the caller watches it: what of
    ``subprocess.Popen`` the signal tests use. Its exit status comes from the warm process, its
    parent, which reaps it at once."""

    def __init__(self, warm: _Warm, argv: list[str], pid: int):
        self._warm, self.args, self.pid, self.returncode = warm, argv, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self._warm._receive(timeout=0)["exit"]
            except (BlockingIOError, TimeoutError):
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = self._warm._receive(timeout=timeout)["exit"]
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _read_both(out_r: int, err_r: int, deadline: float) -> tuple[str, str, bool]:
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(left):
                data = os.read(key.fd, MESSAGE)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
        timed_out = bool(selector.get_map())
        for fd in list(selector.get_map()):
            os.close(fd)
    text = [b"".join(chunks[fd]).decode() for fd in (out_r, err_r)]
    return text[0], text[1], timed_out


def _import_environment(env: dict[str, str]) -> tuple:
    """What of ``env`` a process's imports may read."""
    return tuple(sorted((k, v) for k, v in env.items() if _read_at_import(k)))


def _read_at_import(key: str) -> bool:
    return key not in RUNTIME_VARIABLES and (not key.startswith(RUNTIME_PREFIXES) or key.startswith("KVSPEC_VLLM"))


class _NoWarmProcess:
    """A warm process that could not start (a broken tree, a missing module): its runs go cold,
    where the command reports the problem itself."""


_warm: collections.OrderedDict[tuple, _Warm | _NoWarmProcess] = collections.OrderedDict()
MAX_WARM = 6  # per test worker; the least recently used goes first (each holds vLLM in memory)


def _run(kind: str, arg: str, argv: list[str], env: dict[str, str], chosen: set[str], cwd: str | None,
         timeout: float) -> subprocess.CompletedProcess:
    """``argv`` forked from the worker's warm process of ``kind`` for ``arg``, or cold."""
    warm = _warm_for(kind, arg, env, chosen)
    return warm.run(argv, env, cwd, timeout) if warm else _cold(argv, env, cwd, timeout)


def _warm_for(kind: str, arg: str, env: dict[str, str], chosen: set[str]) -> _Warm | None:
    """The worker's warm process of ``kind`` for ``arg`` started with this environment where
    imports read it: one per such environment, since the worker's own vLLM writes its defaults
    and flags into the worker's environment as the tests go. None where the run goes cold: a
    variable the caller chose (``chosen``) that imports read is a one-off by design."""
    if os.environ.get("KVSPEC_COLD_STARTS") or any(_read_at_import(k) for k in chosen):
        return None
    key = (kind, arg, os.getcwd(), _import_environment(env))
    warm = _warm.get(key)
    if warm is None or (isinstance(warm, _Warm) and warm.proc.poll() is not None):
        try:
            warm = _Warm(kind, arg, _for_the_warm_process(env), os.getcwd())
        except RuntimeError:
            warm = _NoWarmProcess()
        _warm[key] = warm
        while len(_warm) > MAX_WARM:
            _, oldest = _warm.popitem(last=False)
            if isinstance(oldest, _Warm):
                oldest.close()
    _warm.move_to_end(key)
    return warm if isinstance(warm, _Warm) else None


def _for_the_warm_process(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the worker's own runtime variables: the first run's TMPDIR is not the rest's
    (torch would put its cache directory there, and tempfile would remember it)."""
    kept = {k: v for k, v in env.items() if k not in RUNTIME_VARIABLES}
    return kept | {k: os.environ[k] for k in RUNTIME_VARIABLES if k in os.environ}


def _cold(argv: list[str], env: dict[str, str], cwd: str | None, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def run_kvspec(args: list[str], env: dict[str, str], chosen: set[str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m kvspec.cli *args`` with ``env`` (``chosen``: the variables the caller set):
    forked warm, or cold where a fork cannot be it."""
    argv = [sys.executable, "-m", "kvspec.cli", *args]
    version = _release_named(args)
    if version is None:
        return _cold(argv, env, None, timeout)
    return _run("kvspec", version, argv, env, chosen, None, timeout)


def popen_kvspec(args: list[str], env: dict[str, str], chosen: set[str], stdout, stderr) -> WarmPopen | subprocess.Popen:
    """``python -m kvspec.cli *args`` started in the background, its streams into the open files
    ``stdout`` and ``stderr``: forked warm, or cold where a fork cannot be it."""
    argv = [sys.executable, "-m", "kvspec.cli", *args]
    version = _release_named(args)
    warm = _warm_for("kvspec", version, env, chosen) if version is not None else None
    if warm is None:
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env)
    return warm.popen(argv, env, stdout, stderr)


def _release_named(args: list[str]) -> str | None:
    """The supported release a kvspec command line runs on: ``--vllm``'s, else the default; None
    for a checkout (``--vllm-src``, ``--vllm installed``), another release, or a spelling this does
    not read (``--vllm=...``, an abbreviation)."""
    from kvspec.impl.target import default_version, supported_versions  # noqa: PLC0415

    named = [i for i, arg in enumerate(args) if arg.startswith("--vll")]
    if not named:
        return default_version()
    first = named[0]
    version = args[first + 1] if len(named) == 1 and args[first] == "--vllm" and first + 1 < len(args) else None
    return version if version in supported_versions() else None


def run_pytest(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m pytest *args`` in ``cwd`` with ``env``: forked from a warm plain-vLLM process."""
    argv = [sys.executable, "-m", "pytest", *args]
    return _run("pytest", env.get("PYTHONPATH", ""), argv, env, set(), str(cwd), timeout)
