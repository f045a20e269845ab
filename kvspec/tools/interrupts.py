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
import threading
from pathlib import Path

from kvspec.gate.files import IN_PROGRESS

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_children: list[subprocess.Popen] = []
_directories: list[Path] = []
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
    _quiet_z3_interrupts()
    threading.Thread(target=_watch, args=(read_end,), name="kvspec-signals", daemon=True).start()
    _installed = True


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
    """End the children, remove the temporary files and directories, exit 128 + ``number``."""
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
    for directory in list(_directories):
        shutil.rmtree(directory, ignore_errors=True)
    for partial in list(IN_PROGRESS):
        Path(partial).unlink(missing_ok=True)
    os._exit(128 + number)


def spawn(command: list[str], **popen_args) -> subprocess.Popen:
    """A child process this process ends when it is stopped; the child dies with it on Linux."""
    child = subprocess.Popen(command, **popen_args)
    _children.append(child)
    return child


def forget(child: subprocess.Popen) -> None:
    if child in _children:
        _children.remove(child)


def temporary_directory(path: Path) -> Path:
    """Register ``path`` for removal when the process is stopped."""
    _directories.append(Path(path))
    return Path(path)


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


def parent_alive(parent: int) -> bool:
    """Whether the process that started us (pid ``parent``) still runs: reparenting shows it died."""
    return os.getppid() == parent
