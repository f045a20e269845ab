"""The warm process of tests/warm_start.py and the children it forks: ``python
tests/warm_server.py KIND ARG FD`` preloads what a run of KIND would import, says ready on the
socket FD, then serves one fork at a time. Standard library only, so a plain-vLLM warm process
imports nothing of kvspec.

Kinds: ``kvspec`` (the door to the release ARG, vLLM imported through it) and ``pytest`` (vLLM's
KV-cache modules on the PYTHONPATH it was started with).
"""

from __future__ import annotations

import json
import os
import socket
import sys

PLAIN_VLLM_PRELOAD = ("pytest", "torch", "vllm", "vllm.config", "vllm.v1.kv_cache_interface",
                      "vllm.v1.core.kv_cache_utils", "vllm.v1.core.kv_cache_coordinator")
MESSAGE = 1 << 16


def serve(kind: str, arg: str, fd: int) -> None:
    started_in = os.getcwd()
    sys.path[0] = started_in  # as ``python -m`` has it: the working directory, not this file's folder
    sock = socket.socket(fileno=fd)
    before = dict(os.environ)
    try:
        _preload(kind, arg)
    except BaseException as exc:  # noqa: BLE001 - the caller shows this process's log
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        sock.send(json.dumps({"ready": False, "error": repr(exc)}).encode())
        return
    imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}
    imports_removed = [k for k in before if k not in os.environ]
    _die_with_parent()
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE, 3)
        except OSError:
            return
        if not data:
            return  # the caller's worker has gone
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            env = {k: v for k, v in request["env"].items() if k not in imports_removed}
            _become(request, env | {k: v for k, v in imports_set.items() if k not in env}, fds, started_in)
        for received in fds:
            os.close(received)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())


def _preload(kind: str, arg: str) -> None:
    import importlib  # noqa: PLC0415

    if kind == "kvspec":  # what ``kvspec`` itself imports when it opens its target: the one door
        from kvspec.impl.target import resolve  # noqa: PLC0415
        from kvspec.impl.vllm_adapter import VllmAdapter  # noqa: PLC0415

        VllmAdapter(resolve(arg))
        import z3  # noqa: F401, PLC0415 - the command's signal handlers switch its Ctrl-C off first thing
    elif kind == "pytest":  # what every plain-vLLM test imports, on the PYTHONPATH it was given
        for module in PLAIN_VLLM_PRELOAD:
            importlib.import_module(module)
    else:
        raise ValueError(f"no warm process of kind {kind!r}")


def _die_with_parent() -> None:
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _become(request: dict, env: dict[str, str], fds: list[int], started_in: str) -> None:
    """The child: the run's streams, environment, directory and arguments, then its module as
    ``python -m`` runs it. Never returns: the command's own exit ends the child."""
    import runpy  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    for target, received in enumerate(fds):
        os.dup2(received, target)
        os.close(received)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # found again from the run's TMPDIR on first use, as a cold process does
    os.chdir(request["cwd"])
    sys.path[sys.path.index(started_in)] = request["cwd"]
    module = request["module"]
    sys.argv = [module, *request["argv"]]
    sys.orig_argv = [sys.executable, "-m", module, *request["argv"]]
    if module == "kvspec.cli":  # what ``import kvspec`` does first in a process started as the command
        from kvspec.tools import interrupts  # noqa: PLC0415

        if interrupts.started_as_the_command():
            interrupts.install()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)  # a module that returns instead of exiting, as a cold ``python -m`` would end


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
