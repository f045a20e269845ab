"""``kvspec check --jobs N``: the gate's checks spread over N processes that share one vLLM import.

The checks are independent: each seeds its own draws from ``--seed`` and keeps its own
counters, so which process runs a check, and after which other check, changes nothing it
reports (tests/test_gate_workers.py compares a parallel run with a serial one, coverage counts
included). vLLM is imported, probed and patched (``--inject``) once, then the process forks:
each worker inherits that state, runs its share of the checks in the registry's code path
(kvspec.gate.registry.run_checks), prints each check's progress lines itself, and sends its
results back pickled. The shares are fixed before the fork, longest first onto the least loaded
worker, by each check's typical time (kvspec.gate.registry.TYPICAL_SECONDS).

Why fork and not a pool: a worker must see the vLLM the parent imported and patched, and
importing vLLM costs seconds a process. Why not threads: the checks are pure Python.

A worker that dies without reporting (a signal, a segfault in vLLM's C code) has its checks run
again in the parent, so every check still gets the registry's verdict. A stopped ``kvspec``
kills its workers (kvspec/tools/interrupts.py); a worker whose parent dies is killed by Linux.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from dataclasses import replace

from kvspec.gate.registry import TYPICAL_SECONDS, quick_first, run_checks
from kvspec.gate.result import CheckResult
from kvspec.tools import interrupts, progress


class _Worker:
    """A forked worker as kvspec/tools/interrupts.py ends a child: ``kill`` and ``wait``."""

    def __init__(self, pid: int, read_end: int, names: list[str]):
        self.pid, self.read_end, self.names = pid, read_end, names

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None) -> None:  # noqa: ARG002 - SIGKILLed: reaped at once
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def shares(names: list[str], jobs: int) -> list[list[str]]:
    """``names`` in ``jobs`` shares of about equal typical time, each in the registry's order."""
    loads = [[0.0, []] for _ in range(jobs)]
    for name in sorted(names, key=lambda n: -TYPICAL_SECONDS.get(n, 1.0)):
        least = min(loads, key=lambda load: load[0])
        least[0] += TYPICAL_SECONDS.get(name, 1.0)
        least[1].append(name)
    return [[n for n in names if n in share] for _, share in loads if share]


def run_in_workers(adapter, options, names: list[str], jobs: int) -> list[CheckResult]:
    """Every check of ``names`` with its progress lines, the results in the order of ``names``."""
    if jobs <= 1 or len(names) <= 1:
        return [_run_one(adapter, options, name) for name in names]
    sys.stdout.flush()
    sys.stderr.flush()
    workers = [_fork(adapter, options, share) for share in shares(names, jobs)]
    results: dict[str, CheckResult] = {}
    for worker in workers:
        results.update(_collect(worker))
        interrupts.forget(worker)
    for name in names:  # a worker that died said nothing of its checks: run them here
        if name not in results:
            progress.note(f"  {name}: its worker process died; running it again here")
            results[name] = _run_one(adapter, options, name)
    return [results[name] for name in names]


def run_quick_first(adapter, options, names: list[str], jobs: int) -> tuple[list[CheckResult], bool]:
    """``kvspec check --quick-first``: the quick pass of registry.quick_first in this process,
    stopping at its first finding, which is then the one result; else the full gate over
    ``jobs`` processes. Returns the results and whether the quick pass found something."""
    for name, scale in quick_first(names):
        if scale == 1:  # the quick pass is over: the full budget is the gate's own run below
            break
        result = _run_one(adapter, replace(options, scale=scale), name)
        if result.outcome.is_finding:
            return [result], True
    return run_in_workers(adapter, options, names, jobs), False


def _run_one(adapter, options, name: str) -> CheckResult:
    with progress.running(name):
        (result,) = run_checks(adapter, options, only=[name])
    progress.check_done(result)
    return result


def _fork(adapter, options, names: list[str]) -> _Worker:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker never returns into its parent's code, whatever happens here
        code = 1  # the parent then runs this share again and reports it
        try:
            os.close(read_end)
            _become_worker()
            payload = pickle.dumps({name: _run_one(adapter, options, name) for name in names})
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
            sys.stderr.flush()
            code = 0
        except BaseException:  # noqa: BLE001, S110 - reported by the exit code
            pass
        finally:
            os._exit(code)
    os.close(write_end)
    worker = _Worker(pid, read_end, names)
    interrupts.track(worker)
    return worker


def _become_worker() -> None:
    """The parent alone answers a stop: it kills the workers (a Ctrl-C reaches the whole
    process group). Results go to the parent, so stray output goes to stderr, not stdout."""
    signal.set_wakeup_fd(-1)  # the forking thread is the child's main thread, so these may be set
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    interrupts.die_with_parent()
    os.dup2(2, 1)


def _collect(worker: _Worker) -> dict[str, CheckResult]:
    chunks = []
    with os.fdopen(worker.read_end, "rb") as pipe:
        while chunk := pipe.read(1 << 16):
            chunks.append(chunk)
    _, status = os.waitpid(worker.pid, 0)
    if status != 0 or not chunks:
        return {}
    return pickle.loads(b"".join(chunks))  # noqa: S301 - our own forked child's bytes
