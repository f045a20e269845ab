"""Result files (``--json``, ``--out``, reports, finds) written so that a reader never sees a
half-written one and a run that does not finish leaves nothing that looks like its result.

* ``ensure_writable`` runs before any work: a read-only directory or a path under a file is
  refused in one line (exit 2) instead of after minutes of checks;
* ``forget_previous`` removes the last run's file at that path, so an interrupted run cannot
  leave an old result looking current;
* ``write_atomically`` writes a hidden temporary file beside the target, flushes it to disk and
  renames it into place (``os.replace`` is atomic on POSIX within one file system); a full disk
  leaves the temporary file removed and no result. Plain ``os.replace`` is all this needs: the
  one library for it (``atomicwrites``) is archived upstream.

``IN_PROGRESS`` holds the temporary files being written, for the interrupt handler
(kvspec/tools/interrupts.py) to remove when the process is stopped mid-write.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvspec.impl.target import TargetError

IN_PROGRESS: set[str] = set()


def ensure_writable(path: Path, what: str) -> None:
    """Refuse ``path`` (named ``what``, e.g. ``--json out/check.json``) unless a file can be
    created beside it: its directory exists and is writable, and the path is not a directory."""
    path = Path(path)
    directory = path.absolute().parent
    if path.is_dir():
        raise TargetError(f"{what}: is a directory")
    if not directory.is_dir():
        raise TargetError(f"{what}: directory {directory} does not exist")
    try:
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{path.name}.", suffix=".probe")
    except OSError as exc:
        raise TargetError(f"{what}: cannot write in {directory}: {exc.strerror}") from None
    probe.close()


def forget_previous(path: Path | None) -> None:
    """Remove the previous run's result at ``path``: until this run writes its own, none."""
    if path is not None:
        Path(path).unlink(missing_ok=True)


def write_atomically(path: Path, text: str, what: str | None = None) -> None:
    """``text`` at ``path`` in one step; on failure (a full disk) no file and a one-line error."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.absolute().parent, prefix=f".{path.name}.", suffix=".partial")
    IN_PROGRESS.add(temporary)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise TargetError(f"{what or path}: cannot write: {exc.strerror or exc}") from None
    finally:
        IN_PROGRESS.discard(temporary)
