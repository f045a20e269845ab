"""How long `make test` takes, and where: the suite once per release of the default matrix (the
Makefile's SUITE_VERSIONS, its pytest command with pytest-xdist), each run's wall seconds, its
outcome counts, and every test's own seconds (from pytest's JUnit XML) summed per file, the
slowest files and tests first. Issue 17's goal: the default matrix in 5 minutes on 2 cores.

    .venv/bin/python benchmarks/suite_time.py [--versions 0.34.0 0.33.0] [--workers auto] [--top 15]
                                              [--out benchmarks/results/suite_time.json] [TEST_FILE ...]
    .venv/bin/python benchmarks/suite_time.py --cold-starts-too --versions 0.34.0 \
        --out benchmarks/results/suite_time_warm_starts.json tests/test_cli.py ...

``--cold-starts-too`` runs each release twice, side by side: as the suite runs (the ``kvspec`` and
plain-vLLM pytest processes its tests start forked from a warm process, tests/warm_start.py),
then with KVSPEC_COLD_STARTS=1 (each such process starts cold and imports vLLM itself).

Run it on a quiet machine, from a clean clone: the suite is the only work the cores should see.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from figures import source  # the commit measured (benchmarks/figures.py)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "suite_time.json"


def suite_versions() -> list[str]:
    """The Makefile's SUITE_VERSIONS: the two newest of impl/vllm-versions.txt."""
    lines = (ROOT / "impl" / "vllm-versions.txt").read_text().splitlines()
    return [v.strip() for v in lines if v.strip() and not v.lstrip().startswith("#")][:2]


def run_suite(version: str, workers: str, where: Path, paths: list[str], cold_starts: bool = False) -> dict:
    junit = where / f"junit-{version}{'-cold' if cold_starts else ''}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-n", workers, "--dist", "loadfile", f"--junitxml={junit}", *paths]
    starts = {"KVSPEC_COLD_STARTS": "1"} if cold_starts else {}
    print(f"suite_time: vLLM {version}{', cold starts' if cold_starts else ''}: {' '.join(command[1:])}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "KVSPEC_COLD_STARTS"} | {"KVSPEC_VLLM": version} | starts
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if not junit.is_file():
        sys.exit(f"suite_time: pytest on {version} wrote no JUnit XML (exit {proc.returncode}): {proc.stderr[-300:]}")
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    tests = [(case.get("classname", "") + "::" + case.get("name", ""), float(case.get("time", 0))) for case in cases]
    failed = {case.get("classname", "") + "::" + case.get("name", ""): (problem.get("message") or "")[:2000]
              for case in cases for problem in (case.find("failure"), case.find("error")) if problem is not None}
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    per_file: dict[str, float] = defaultdict(float)
    for name, seconds in tests:
        parts = name.split("::")[0].split(".")  # tests.test_x[.TestClass]
        module = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
        per_file["/".join(parts[: module + 1]) + ".py"] += seconds
    return {
        "version": version, "starts": "cold" if cold_starts else "warm", "exit_code": proc.returncode, "summary": last, "wall_seconds": round(wall, 1),
        "test_seconds": round(sum(s for _, s in tests), 1), "tests": len(tests),
        "files": dict(sorted(((f, round(s, 1)) for f, s in per_file.items()), key=lambda kv: -kv[1])),
        "slowest": [[n, round(s, 1)] for n, s in sorted(tests, key=lambda t: -t[1])[:40]],
        "failed": failed,
    }


def markdown(report: dict, top: int) -> str:
    runs = report["runs"]
    lines = [f"# `make test`'s suite, per release ({report['date']})", "",
             f"kvspec {report['source']}; `{report['command']}`; {os.cpu_count()} cores, pytest-xdist workers: "
             f"{report['workers']}. Test seconds are each test's own (setup, call and teardown), summed over "
             "the workers; wall is the run's.", "",
             "| release | process starts | wall s | test s (over workers) | tests | pytest's summary |",
             "|---|---|---:|---:|---:|---|"]
    for run in runs:
        lines.append(f"| {run['version']} | {run.get('starts', 'cold')} | {run['wall_seconds']:.0f} | {run['test_seconds']:.0f} | {run['tests']} "
                     f"| {run['summary']} |")
    lines.append(f"| all | | {sum(r['wall_seconds'] for r in runs):.0f} | "
                 f"{sum(r['test_seconds'] for r in runs):.0f} | {sum(r['tests'] for r in runs)} | |")
    for run in runs:
        for test, message in run.get("failed", {}).items():
            lines.append(f"\nFAILED on {run['version']}: `{test}`: {message.splitlines()[0] if message else ''}")
    for run in runs:
        lines += ["", f"## vLLM {run['version']}, {run.get('starts', 'cold')} process starts: the {top} slowest "
                  "files (test s)", "",
                  "| file | s |", "|---|---:|"]
        lines += [f"| `{f}` | {s:.1f} |" for f, s in list(run["files"].items())[:top]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=suite_versions())
    parser.add_argument("--workers", default="auto")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--cold-starts-too", action="store_true",
                        help="each release again with KVSPEC_COLD_STARTS=1, side by side")
    parser.add_argument("paths", nargs="*", help="only these test files (a smoke run of this script; default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvspec-suite-") as scratch:
        runs = [run_suite(v, args.workers, Path(scratch), args.paths, cold)
                for v in args.versions for cold in ((False, True) if args.cold_starts_too else (False,))]
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "source": source(),
              "command": f"KVSPEC_VLLM=<v> python -m pytest -q -n {args.workers} --dist loadfile",
              "workers": args.workers, "runs": runs}
    text = markdown(report, args.top)
    print(text)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
