"""SIGINT exits 130 and SIGTERM exits 143, every time, at any moment of any command, leaving no
child process, no temporary directory and no half-written result behind.

Why not Python's default (a ``KeyboardInterrupt`` raised in the main thread): it can be lost.
Hypothesis runs a ``gc`` callback, and an exception raised inside one is printed as "Exception
ignored" and dropped, so a Ctrl-C shortly after ``kvspec check:`` let the run finish and report a
pass; code that catches ``BaseException`` (a check's crash handler) swallows it too; and while
the main thread sits in a long C call (Z3, vLLM's import) no Python handler runs at all.

So the process is stopped from outside the main thread's control flow: ``signal.set_wakeup_fd``
makes the interpreter's C-level handler write the signal's number to a pipe the moment the signal
arrives, a daemon thread reading that pipe ends the registered children, removes the registered
temporary directories and partial files, and leaves with ``os._exit(128 + signal)``. Nothing
unwinds, so nothing can catch it. The Python-level handler does the same (the first one wins),
which also covers a forked child, where the thread does not exist.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_children: list[subprocess.Popen] = []
_directories: list[Path] = []
_cleanups: list = []  # callables run on a stop before the directories go (git worktree metadata)
_stopping = threading.Lock()
_installed = False


def install() -> None:
    """Take over SIGINT and SIGTERM for this process (from the main thread, once)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for number in STOPPING_SIGNALS:
        signal.signal(number, _on_signal)
    threading.Thread(target=_watch, args=(read_end,), name="kvspec-signals", daemon=True).start()
    _installed = True
    _quiet_z3_interrupts()  # last: importing Z3 takes a while, and a signal may come meanwhile


def started_as_the_command() -> bool:
    """Whether this process is the ``kvspec`` command (its console script or ``python -m
    kvspec.cli``), read from the command line before any of kvspec has loaded. A process that
    merely imports kvspec (pytest, a fuzz worker) keeps its own handlers."""
    if Path(sys.argv[0]).name == "kvspec":
        return True
    launch = list(getattr(sys, "orig_argv", []))
    return any(arg == "-m" and launch[i + 1:i + 2] == ["kvspec.cli"] or arg == "-mkvspec.cli"
               for i, arg in enumerate(launch))


def _quiet_z3_interrupts() -> None:
    """Z3 puts its own SIGINT handler in place during a solve: the first Ctrl-C would cancel
    the solve (a theorem left unproved) and never reach kvspec. Off, it reaches the pipe."""
    try:
        import z3  # noqa: PLC0415 - only to switch the option off; loaded by the proofs anyway

        z3.set_param("ctrl_c", False)
    except Exception:  # noqa: BLE001 - without Z3 there is nothing to switch off
        pass


def _watch(read_end: int) -> None:
    while True:
        try:
            data = os.read(read_end, 64)
        except InterruptedError:
            continue
        for number in data:
            if number in STOPPING_SIGNALS:
                stop(number)


def _on_signal(number, frame) -> None:  # noqa: ARG001 - signal's signature
    stop(number)


def stop(number: int) -> None:
    """End the children, remove the temporary files and directories and the result files named
    on the command line, exit 128 + ``number``."""
    if not _stopping.acquire(blocking=False):
        return  # the other path is already stopping the process
    name = signal.Signals(number).name
    os.write(2, f"\nkvspec: stopped by {name}: no result written\n".encode())
    for child in list(_children):
        try:
            child.kill()
            child.wait(timeout=5)
        except Exception:  # noqa: BLE001 - already gone, or a zombie its parent's exit reaps
            pass
    for cleanup in list(_cleanups):
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - the directories below still go
            pass
    for directory in list(_directories):
        shutil.rmtree(directory, ignore_errors=True)
    for result in results_named_on_the_command_line():  # even one stopped before it read them
        if result.is_file():
            result.unlink(missing_ok=True)
    files = sys.modules.get("kvspec.gate.files")  # not imported here: loaded before the handlers
    for partial in list(files.IN_PROGRESS if files else ()):  # not loaded yet: nothing half-written
        Path(partial).unlink(missing_ok=True)
    os._exit(128 + number)


RESULT_FLAGS = ("--json", "--junit", "--out")  # every command's result files; never an input


def results_named_on_the_command_line() -> list[Path]:
    """The result files this command was asked to write. Read from ``sys.argv`` rather than the
    parsed options, because a stop may come before the command has parsed them, and a stopped
    run must not leave the previous run's file looking like its result."""
    named, argv = [], sys.argv[1:]
    for i, arg in enumerate(argv):
        flag, equals, value = arg.partition("=")
        if flag in RESULT_FLAGS:
            value = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                named.append(Path(value))
    return named


PARENT_VARIABLE = "KVSPEC_PARENT_PID"


def spawn(command: list[str], **popen_args) -> subprocess.Popen:
    """A child process this process ends when it is stopped. A kvspec child also dies with it
    when it is killed outright (SIGKILL leaves no handler to run): the child reads
    ``KVSPEC_PARENT_PID`` and asks Linux for a death signal (``adopt_parent``)."""
    env = dict(popen_args.pop("env", None) or os.environ)
    env[PARENT_VARIABLE] = str(os.getpid())
    child = subprocess.Popen(command, env=env, **popen_args)
    _children.append(child)
    return child


def track(child) -> None:
    """A child started otherwise (a fork: anything with ``kill()`` and ``wait(timeout)``), ended
    on a stop like a spawned one."""
    _children.append(child)


def forget(child) -> None:
    if child in _children:
        _children.remove(child)


def temporary_directory(path: Path) -> Path:
    """Register ``path`` for removal when the process is stopped."""
    _directories.append(Path(path))
    return Path(path)


def at_stop(cleanup) -> None:
    """Run ``cleanup()`` when the process is stopped (undone by ``forget_cleanup``)."""
    _cleanups.append(cleanup)


def forget_cleanup(cleanup) -> None:
    if cleanup in _cleanups:
        _cleanups.remove(cleanup)


def release_directory(path: Path) -> None:
    if Path(path) in _directories:
        _directories.remove(Path(path))


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (elsewhere: poll ``parent_alive``)."""
    try:
        import ctypes  # noqa: PLC0415 - Linux only, for one call

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def adopt_parent() -> None:
    """In a kvspec child started by ``spawn``: die with the parent, and leave at once if it is
    already gone (it may die between the fork and this call). The variable is taken out of the
    environment so that the child's own children do not read it as theirs."""
    parent = os.environ.pop(PARENT_VARIABLE, None)
    if parent is None or not parent.isdigit():
        return
    die_with_parent()
    if not parent_alive(int(parent)):
        os._exit(128 + signal.SIGKILL)


def exit_keeping_handlers(code: int) -> None:
    """Leave with ``code`` without the interpreter's finalization, which puts SIGINT and SIGTERM
    back to their defaults: a signal in those last moments would kill the process raw (exit -2,
    no message) instead of exiting 130 or 143. The exit functions still run, with the handlers
    in place, and the standard streams are flushed."""
    import atexit  # noqa: PLC0415 - only at the very end

    atexit._run_exitfuncs()  # noqa: SLF001 - the public exit path is the one that resets the handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    with _stopping:  # a signal already being handled finishes its own exit first
        os._exit(code)


def parent_alive(parent: int) -> bool:
    """Whether the process that started us (pid ``parent``) still runs: reparenting shows it died."""
    return os.getppid() == parent
