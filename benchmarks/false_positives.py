"""How often the full gate fails on clean vLLM: ``kvspec check`` at seeds 0-19 on every
supported release, each seed and release in its own process (one process imports one vLLM),
two at a time on the project's 2 cores. A cell is as expected when every row holds or is a
finding recorded for that release (release-findings.toml, judged as ``kvspec matrix`` does);
any other finding on an unpatched release is a false positive of the gate (or a new vLLM bug)
and is listed with the command that replays it.

    .venv/bin/python benchmarks/false_positives.py [--seeds 0-19] [--releases 0.34.0,0.33.0]
        [--check NAME ...] [--jobs 2] [--out benchmarks/results/false_positives] [--resume]

About 2.5 minutes per cell: the full grid (20 seeds x 5 releases) takes about 2 hours on 2 cores.
Writes OUT.md (the seed x release table) and OUT.json (every cell's rows), atomically, at the end.
Each finished cell is kept in OUT.partial.json meanwhile (not a result: it says ``partial``), so
``--resume`` after a stop runs only the cells it lacks, if it was made at the same commit and checks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvspec.gate.files import ensure_writable, write_atomically
from kvspec.impl.target import PROJECT_ROOT, Target, TargetError, releases_home, supported_versions
from kvspec.tools import interrupts, matrix
from kvspec.tools.guard import guarded
from kvspec.tools.replay import check_command

DEFAULT_OUT = PROJECT_ROOT / "benchmarks" / "results" / "false_positives"


def seeds_of(text: str) -> list[int]:
    """``0-19``, ``3`` or ``0,4,7-9``."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            seeds += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise TargetError(f"--seeds {text}: give seeds as 0-19, 3 or 0,4,7-9") from None
    if not seeds:
        raise TargetError(f"--seeds {text}: no seed")
    return seeds


def run_cell(seed: int, release: str, checks: list[str], workdir: Path, cores: int = 1) -> dict:
    """``kvspec check`` at ``seed`` on ``release``, in its own process."""
    result = workdir / f"check-{release}-{seed}.json"
    command = [sys.executable, "-m", "kvspec.cli", "check", "--quiet", "--vllm", release, "--seed", str(seed),
               "--jobs", str(cores), "--json", str(result), *[arg for name in checks for arg in ("--check", name)]]
    started = time.monotonic()
    child = interrupts.spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = child.communicate()
    interrupts.forget(child)
    cell = {"seed": seed, "release": release, "exit": child.returncode,
            "seconds": round(time.monotonic() - started, 1), "rows": {}, "unexpected": []}
    if not result.is_file():
        cell["error"] = (stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]
        return cell
    report = json.loads(result.read_text())
    cell["rows"] = {row["check"]: row["verdict"] for row in report["checks"]}
    code, lines = matrix.judge(release, report, matrix.load())
    cell["as_expected"] = code == 0
    cell["notes"] = [line.strip() for line in lines]
    target = Target(releases_home() / release, release, is_checkout=False)
    cell["unexpected"] = [
        {"check": name, "verdict": verdict, "replay": check_command(target, seed=seed, checks=[name])}
        for name, verdict in cell["rows"].items()
        if verdict != "holds" and not any(line.startswith(f"{name}: {verdict}, as recorded") for line in cell["notes"])
    ]
    return cell


def commit() -> str:
    """The kvspec commit measured, with a mark when its tree has uncommitted changes."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def resumed_cells(partial: Path, measured: str, checks: list[str]) -> list[dict]:
    """The cells a stopped run at the same commit and checks finished (none when it differs)."""
    try:
        kept = json.loads(partial.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise TargetError(f"--resume: {partial}: {exc}") from None
    if not isinstance(kept, dict) or kept.get("commit") != measured or kept.get("checks") != checks:
        return []
    return [cell for cell in kept.get("cells", []) if isinstance(cell, dict)]


def verdict_cell(cell: dict) -> str:
    if "error" in cell:
        return f"error: {cell['error'][:60]}"
    if cell["unexpected"]:
        return "; ".join(f"{u['check']}: {u['verdict']}" for u in cell["unexpected"])
    recorded = [note.split("as recorded: ")[1].split(",")[0] for note in cell["notes"] if "as recorded" in note]
    # A recorded finding this seed's draws did not meet: expected across seeds (kvspec matrix,
    # at one seed, asks for the record's removal instead), and named so the grid hides nothing.
    unmet = [note.split("holds, but ")[1].split(" is recorded")[0] for note in cell["notes"] if "holds, but " in note]
    said = [f"recorded: {', '.join(recorded)}"] * bool(recorded) + [f"recorded, not met: {', '.join(unmet)}"] * bool(unmet)
    return "as expected" + (f" ({'; '.join(said)})" if said else "")


def markdown(cells: list[dict], seeds: list[int], releases: list[str], checks: list[str], measured: str) -> str:
    by_key = {(c["seed"], c["release"]): c for c in cells}
    false = [c for c in cells if c["unexpected"] or "error" in c]
    lines = [f"# The gate on clean vLLM: false positives at seeds {seeds[0]}..{seeds[-1]}", "",
             f"Measured at kvspec commit {measured}. "
             f"Checks: {', '.join(checks) if checks else 'the full gate'}. {len(false)} of {len(cells)} runs "
             "had a finding not recorded for their release, or an error.", "",
             "| seed | " + " | ".join(releases) + " |", "|---:|" + "---|" * len(releases)]
    for seed in seeds:
        lines.append(f"| {seed} | " + " | ".join(verdict_cell(by_key[seed, r]) for r in releases) + " |")
    if false:
        lines += ["", "Replays:", ""]
        lines += [f"- `{u['replay']}`" for c in false for u in c["unexpected"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="false_positives", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19", help="seeds, e.g. 0-19 or 0,4,7-9 (default 0-19)")
    parser.add_argument("--releases", default=",".join(supported_versions()), help="comma-separated releases")
    parser.add_argument("--check", action="append", default=[], metavar="NAME", help="only this check (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2, one per core)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="writes OUT.md and OUT.json")
    parser.add_argument("--resume", action="store_true", help="run only the cells OUT.partial.json lacks")
    args = parser.parse_args(argv)
    seeds = seeds_of(args.seeds)
    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    if bad := [r for r in releases if r not in supported_versions()]:
        raise TargetError(f"--releases: unsupported vLLM version {bad[0]!r} (supported: {', '.join(supported_versions())})")
    if args.jobs < 1:
        raise TargetError(f"--jobs {args.jobs}: give at least 1")
    md, js = args.out.with_suffix(".md"), args.out.with_suffix(".json")
    partial = args.out.with_suffix(".partial.json")
    ensure_writable(md, f"--out {md}")
    measured = commit()
    wanted = [(seed, release) for seed in seeds for release in releases]
    cells = [c for c in resumed_cells(partial, measured, args.check) if (c.get("seed"), c.get("release")) in wanted]
    done = {(c["seed"], c["release"]) for c in cells}
    grid = [key for key in wanted if key not in done]
    print(f"false positives: {len(wanted)} runs ({len(seeds)} seeds x {len(releases)} releases) at {measured}, "
          f"{len(done)} kept from a stopped run, {args.jobs} at a time", file=sys.stderr, flush=True)

    def keep() -> None:
        write_atomically(partial, json.dumps({"partial": True, "commit": measured, "checks": args.check,
                                              "cells": cells}, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="kvspec-false-positives-") as tmp:
        interrupts.temporary_directory(Path(tmp))
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            cores = max(1, (os.cpu_count() or 1) // args.jobs)  # each gate's --jobs: the cores left to it
            for cell in pool.map(lambda key: run_cell(*key, args.check, Path(tmp), cores), grid):
                cells.append(cell)
                keep()
                print(f"  seed {cell['seed']}, vLLM {cell['release']}: {verdict_cell(cell)} ({cell['seconds']:.0f} s)",
                      file=sys.stderr, flush=True)
        interrupts.release_directory(Path(tmp))
    cells.sort(key=lambda c: wanted.index((c["seed"], c["release"])))
    text = markdown(cells, seeds, releases, args.check, measured)
    print(text, end="")
    write_atomically(md, text)
    write_atomically(js, json.dumps({"commit": measured, "seeds": seeds, "releases": releases, "checks": args.check,
                                     "cells": cells}, indent=2) + "\n")
    partial.unlink(missing_ok=True)
    return 1 if any(c["unexpected"] or "error" in c for c in cells) else 0


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:], prog="false_positives"))
