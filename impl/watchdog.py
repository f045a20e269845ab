"""The deadline on every call kvspec makes into vLLM, so that a vLLM that never returns is a
finding with its input, not a gate that runs silently until CI kills it.

A periodic ``SIGALRM`` looks at the interrupted stack. Its outermost frame of a vLLM module (by
the module's name, so a mutant compiled into vLLM's module counts) is the call kvspec made into vLLM; while that same frame stays on the stack, the call has not
returned. When one call has run for ``deadline`` seconds, ``VllmHung`` is raised inside it.
kvspec's own slow work (a Z3 proof, the reference's brute force) is never interrupted: only a
call into vLLM has a deadline. No call site is wrapped, so nothing kvspec drives can escape it.

``VllmHung`` is a ``BaseException``: Hypothesis lets it through at once instead of replaying
and shrinking an input that takes ``deadline`` seconds a try. The caller adds the input.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path

TICK_SECONDS = 0.25
# A lookup, a grouping or a scheduler step costs milliseconds; the longest call measured on the
# clean releases is printed per check (JSON ``longest_vllm_call_s``) and stays under a second.
DEFAULT_DEADLINE_SECONDS = 60.0


class VllmHung(BaseException):
    """A call into vLLM outlived the deadline: ``called`` is the vLLM function kvspec called,
    ``where`` the vLLM line it was running, ``entry`` the kvspec call that entered vLLM, with
    its arguments."""

    def __init__(self, seconds: float, called: str, where: str, entry: str):
        super().__init__(f"a call into vLLM ({called}) did not return within {seconds:g} s (it was running {where})")
        self.seconds, self.called, self.where, self.entry = seconds, called, where, entry


def in_vllm(frame) -> bool:
    """Whether ``frame`` runs vLLM's code (its module's name, not its file: mutants count)."""
    module = frame.f_globals.get("__name__") or ""
    return module == "vllm" or module.startswith("vllm.")


class Watchdog:
    def __init__(self, deadline: float, tick: float = TICK_SECONDS):
        self.deadline, self.tick = deadline, tick
        self.longest = 0.0  # the longest call seen, in ticks' resolution
        self._entry = None  # the outermost vLLM frame of the call in progress (held: ids get reused)
        self._ticks = 0

    def _on_tick(self, signum, frame) -> None:
        outermost, innermost = None, None
        while frame is not None:
            if in_vllm(frame):
                outermost = frame
                innermost = innermost or frame
            frame = frame.f_back
        if outermost is None or outermost is not self._entry:
            self._entry, self._ticks = outermost, 0
            return
        self._ticks += 1
        running = self._ticks * self.tick
        self.longest = max(self.longest, running)
        if running >= self.deadline:
            self._entry, self._ticks = None, 0
            raise VllmHung(self.deadline, location(outermost), location(innermost), _call(outermost.f_back))


@contextmanager
def watching(deadline: float):
    """Calls into vLLM get ``deadline`` seconds each while the block runs.
    Outside the main thread (where signals cannot reach) the block runs unwatched."""
    watchdog = Watchdog(deadline)
    if threading.current_thread() is not threading.main_thread():
        yield watchdog
        return
    previous = signal.signal(signal.SIGALRM, watchdog._on_tick)
    signal.setitimer(signal.ITIMER_REAL, watchdog.tick, watchdog.tick)
    try:
        yield watchdog
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def location(frame, line: int | None = None) -> str:
    """``module:line in function`` of a frame."""
    return f"{frame.f_globals.get('__name__')}:{line or frame.f_lineno} in {frame.f_code.co_name}"


def _call(frame) -> str:
    """The kvspec frame that called into vLLM, with its arguments: the input that hangs it."""
    if frame is None:
        return "?"
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    arguments = ", ".join(f"{n}={_short(frame.f_locals.get(n))}" for n in names if n != "self")
    return f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}({arguments})"


def _short(value, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
