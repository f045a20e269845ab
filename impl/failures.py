"""Whose failure an exception is: vLLM's (a crash or a hang on an input kvspec holds valid, a
finding) or kvspec's (it cannot drive this vLLM). Decided by where the exception was raised,
never by its message.

* raised inside vLLM's code (its innermost frame is a vLLM module, an ``assert`` there too):
  vLLM crashed;
* ``VllmHung``: a call into vLLM outlived the deadline (impl/watchdog.py);
* ``SymbolMissing``, or raised in the adapter (a call that no longer fits vLLM's signature, an
  attribute vLLM's answer no longer has), or vLLM reading a field one of the adapter's stand-ins
  lacks (impl/stand_in.py): kvspec cannot drive this vLLM;
* an ``AssertionError`` raised by kvspec: a rule was violated (the oracles' verdict);
* anything else raised by kvspec: kvspec's own failure, also reported as "cannot drive", with
  the line, so that it is never taken for a vLLM bug.
"""

from __future__ import annotations

from kvspec.gate.names import Outcome
from kvspec.impl.stand_in import missing_field
from kvspec.impl.vllm_symbols import SymbolMissing
from kvspec.impl.watchdog import VllmHung, in_vllm, location


class CannotDrive(Exception):
    """A tool's note that kvspec cannot drive this vLLM for a part of its work (``describe``'s
    line): that part's answers are not compared, and it is never a vLLM bug."""


def _frames(exc: BaseException) -> list:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _own(exc: BaseException) -> BaseException:
    """The error inside a group Hypothesis raises (a flaky failure wraps the first one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def classify(exc: BaseException) -> Outcome:
    exc = _own(exc)
    if isinstance(exc, VllmHung):
        return Outcome.VLLM_HUNG
    if isinstance(exc, SymbolMissing) or missing_field(exc):
        return Outcome.CANNOT_DRIVE
    frames = _frames(exc)
    if frames and in_vllm(frames[-1][0]):
        return Outcome.VLLM_CRASHED
    if isinstance(exc, AssertionError):
        return Outcome.RULE_VIOLATED
    return Outcome.CANNOT_DRIVE


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised: the innermost vLLM line for a crash, else kvspec's, and the
    adapter's line that called into vLLM when there is one."""
    exc = _own(exc)
    frames = _frames(exc)
    if not frames:
        return "?"
    frame, line = frames[-1]
    where = location(frame, line)
    adapter = [(f, n) for f, n in frames if (f.f_globals.get("__name__") or "").startswith("kvspec.impl")]
    if adapter and adapter[-1][0] is not frame:
        where += f", called from {location(*adapter[-1])}"
    return where


def describe(exc: BaseException) -> str:
    """The first line of a crash, a hang or a failure to drive."""
    own = _own(exc)
    outcome = classify(exc)
    message = str(own).splitlines()[0] if str(own) else ""
    if outcome is Outcome.VLLM_HUNG:
        return f"{message}; entered from {own.entry}"
    if outcome is Outcome.VLLM_CRASHED:
        return f"vLLM raised {type(own).__name__}: {message} (at {raised_at(own)})"
    if isinstance(own, SymbolMissing):
        return f"kvspec cannot drive this vLLM: {message} (at {raised_at(own)})"
    if field := missing_field(own):
        return f"kvspec cannot drive this vLLM: it reads {field}, which kvspec's stand-in lacks (at {raised_at(own)})"
    return f"kvspec cannot drive this vLLM: {type(own).__name__}: {message} (at {raised_at(own)})"
