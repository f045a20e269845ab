"""Progress on stderr, one flushed line at a time so a CI pipe shows it live: each check's start
and end (its verdict, what it covered, its time), and a line every ``HEARTBEAT_SECONDS`` while a
long check runs. ``--quiet`` turns it off; results stay on stdout either way."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

HEARTBEAT_SECONDS = 30.0
QUIET = False  # set once by the CLI's --quiet


def note(text: str) -> None:
    if not QUIET:
        print(text, file=sys.stderr, flush=True)


@contextmanager
def running(name: str, every: float = HEARTBEAT_SECONDS):
    """Around one long step: a start line, then a line every ``every`` seconds until it ends."""
    started = time.monotonic()
    done = threading.Event()
    note(f"  {name}: started")

    def heartbeat() -> None:
        while not done.wait(every):
            note(f"  {name}: still running, {time.monotonic() - started:.0f} s")

    thread = threading.Thread(target=heartbeat, name="kvspec-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def check_done(result) -> None:
    """The end line of one gate check: verdict, counts, elapsed time."""
    note(f"  {result.name}: {result.verdict}, {result.covered}, {result.seconds:.1f} s")
