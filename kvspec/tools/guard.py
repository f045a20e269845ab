"""The one guard around every command: no exception reaches the user as a traceback.

Bad input or a broken environment (a ``TargetError``, an ``OSError`` naming its file) is one
line on stderr and exit 2; any other exception is kvspec's own failure, also one line and exit 2,
with ``--debug`` showing the traceback. SIGINT and SIGTERM are handled by
kvspec/tools/interrupts.py (exit 130 and 143). ``--debug`` and ``--quiet`` are global: accepted
anywhere on the command line, for every command."""

from __future__ import annotations

import sys
import traceback
from typing import Callable

from kvspec.impl.target import TargetError
from kvspec.tools import interrupts, progress
from kvspec.tools.inputs import check_environment

EXIT_BAD_INPUT = 2
GLOBAL_FLAGS = ("--debug", "--quiet")


def guarded(main: Callable[[list[str]], int], argv: list[str], prog: str = "kvspec") -> int:
    """``main(argv)`` (without the global flags) under the guard; its exit code."""
    debug = "--debug" in argv
    progress.QUIET = "--quiet" in argv
    argv = [arg for arg in argv if arg not in GLOBAL_FLAGS]
    interrupts.install()
    interrupts.adopt_parent()  # a child of another kvspec command dies with it, even of SIGKILL
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a CI pipe sees each result line as printed
    try:
        check_environment()
        return main(argv)
    except TargetError as exc:
        failure, message = exc, str(exc)
    except OSError as exc:  # the environment: a file kvspec needs cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        failure, message = exc, f"{where}{exc.strerror or exc}"
    except Exception as exc:  # noqa: BLE001 - the guard: kvspec's own failure, in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        failure = exc
        message = f"kvspec failed: {type(exc).__name__}: {first}" + ("" if debug else " (--debug shows the traceback)")
    if debug:
        traceback.print_exception(failure)
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT
