"""``kvspec matrix``: the whole gate on each older supported release, each in its own process
(one process imports one vLLM), judged against the findings recorded for that release.

An older release may have a vLLM bug a later release fixed. kvspec still reports it there (the
gate on that release exits 1: a safety violation always fails), and the finding is recorded in
``release-findings.toml`` with its report under ``docs/findings/``. The matrix then expects
exactly the recorded rows, as a strict expected failure would:

* a row that holds, or that is a recorded finding of this release (same check, same verdict):
  as expected;
* any other row that fails, crashes, hangs or cannot drive: the matrix fails with it;
* a recorded finding whose row now holds: the matrix fails too, so that the record is removed.

Exit codes follow ``kvspec check``'s: 1 for an unexpected finding or a stale record, else 3 if a
row is "cannot drive", else 0; bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvspec.gate.names import Outcome
from kvspec.gate.release_findings import FINDINGS_FILE, ReleaseFinding, load  # noqa: F401 - the tools' names for them
from kvspec.impl.target import TargetError, supported_versions
from kvspec.tools import interrupts

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CANNOT_DRIVE = 0, 1, 2, 3


def judge(release: str, report: dict, findings: list[ReleaseFinding]) -> tuple[int, list[str]]:
    """(exit code, lines) for one release's ``kvspec check --json`` report."""
    recorded = {(f.check, f.verdict): f for f in findings if release in f.releases}
    lines, code = [], EXIT_OK
    rows = {row["check"]: row["verdict"] for row in report["checks"]}
    for check, verdict in rows.items():
        if verdict == Outcome.HOLDS.value:
            continue
        if (finding := recorded.get((check, verdict))) is not None:
            lines.append(f"  {check}: {verdict}, as recorded: {finding.id}, fixed in {finding.fixed_in} ({finding.report})")
        elif verdict == Outcome.CANNOT_DRIVE.value:
            lines.append(f"  {check}: cannot drive (kvspec's failure, never recorded as a finding)")
            code = code or EXIT_CANNOT_DRIVE
        else:
            lines.append(f"  {check}: {verdict}, not recorded for {release}: a new finding")
            code = EXIT_FAILED
    for (check, verdict), finding in recorded.items():
        if rows.get(check) == Outcome.HOLDS.value:
            lines.append(f"  {check}: holds, but {finding.id} is recorded as {verdict}: remove the record")
            code = EXIT_FAILED
    return code, lines


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise TargetError(message)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="kvspec matrix", description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*", metavar="VERSION", help="the releases (default: every supported "
                        "release but the two the suite runs on)")
    parser.add_argument("--out", type=Path, default=Path("out"), help="where check-<version>.json go (default out/)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="releases checked at once (default 1); each gate spreads its checks over the cores "
                        "left to it (kvspec check --jobs)")
    try:
        args = parser.parse_args(argv)
        findings = load()
        releases = args.releases or supported_versions()[2:]
        if unknown := [v for v in releases if v not in supported_versions()]:
            raise TargetError(f"unsupported vLLM version {unknown[0]!r} (supported: {', '.join(supported_versions())})")
        if not args.out.is_dir():
            raise TargetError(f"--out {args.out}: no such directory")
        if args.jobs < 1:
            raise TargetError(f"--jobs {args.jobs}: give at least 1")
    except TargetError as exc:
        print(f"kvspec: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    worst = EXIT_OK
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        cores = max(1, (os.cpu_count() or 1) // args.jobs)
        for release, done, seconds in pool.map(lambda v: _gate(v, args.out, cores), releases):
            print(f"== the gate against vLLM {release} ({seconds:.0f} s)\n{done.stdout}", end="", flush=True)
            result = args.out / f"check-{release}.json"
            if not result.is_file():  # bad input or a broken set-up: kvspec check said why
                print(done.stderr, end="", file=sys.stderr)
                return done.returncode or EXIT_BAD_INPUT
            code, lines = judge(release, json.loads(result.read_text()), findings)
            print(f"kvspec matrix: vLLM {release}: " + ("as expected" if code == EXIT_OK else f"exit {code}"))
            if lines:
                print("\n".join(lines), flush=True)
            worst = code if worst == EXIT_OK or code == EXIT_FAILED else worst
    return worst


def _gate(release: str, out: Path, cores: int) -> tuple[str, subprocess.CompletedProcess, float]:
    """``kvspec check`` on ``release`` in its own process, its table kept for printing in order;
    a line on stderr when it starts and ends, so that a CI log shows progress."""
    result = out / f"check-{release}.json"
    result.unlink(missing_ok=True)  # never judge a previous run's file
    print(f"kvspec matrix: checking vLLM {release}", file=sys.stderr, flush=True)
    started = time.monotonic()
    # Registered: a stopped matrix ends the gates it started (kvspec/tools/interrupts.py).
    child = interrupts.spawn([sys.executable, "-m", "kvspec.cli", "check", "--quiet", "--vllm", release,
                              "--jobs", str(cores), "--json", str(result)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = child.communicate()
    interrupts.forget(child)
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    seconds = time.monotonic() - started
    print(f"kvspec matrix: vLLM {release} checked in {seconds:.0f} s (exit {done.returncode})", file=sys.stderr, flush=True)
    return release, done, seconds


if __name__ == "__main__":
    sys.exit(main())
