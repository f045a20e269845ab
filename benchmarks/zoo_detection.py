"""Time to detection per zoo entry: the median over 5 seeds of how long the gate runs, quick pass
first as `kvspec check --quick-first` runs it (kvspec/tools/zoo.py), on vLLM with the entry's bug
put back, until its first failing check, on each supported vLLM release
side by side. Wall seconds (what a reviewer waits; inflated when the machine is shared) and CPU
seconds of the gate process (steadier).

Each release runs in its own process (two vLLMs cannot share one): ``kvspec zoo --vllm V
--seed SEED --seeds 5 --json ...``; the releases run one after the other unless --parallel.
Prints a Markdown table and writes benchmarks/results/zoo_detection.json. A check that fails alike on
unpatched vLLM (a release's own finding) detects nothing there: the run goes on to the next check.

    .venv/bin/python benchmarks/zoo_detection.py [--versions 0.34.0 0.33.0] [--seed 0] [--seeds 5]
                                                 [--entry NAME ...] [--no-control] [--parallel] [--logs DIR] [--reuse DIR]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from figures import source  # the commit measured (benchmarks/figures.py)

from kvspec.impl.broken import VARIANTS
from kvspec.impl.target import supported_versions
from kvspec.tools.zoo import EntryRun, summary

RESULTS = Path(__file__).parent / "results" / "zoo_detection.json"
KVSPEC = Path(sys.executable).parent / "kvspec"


def zoo_command(version: str, args, out: Path) -> list[str]:
    command = [str(KVSPEC), "zoo", "--vllm", version, "--seed", str(args.seed), "--seeds", str(args.seeds)]
    command += ["--json", str(out)] + [part for name in args.entry for part in ("--entry", name)]
    return command + (["--no-control"] if args.no_control else [])


def run_zoos(args, scratch: Path) -> dict[str, dict]:
    """Each release's zoo report, by version."""
    outs = {version: scratch / f"zoo-{version}.json" for version in args.versions}
    logs = {version: open(scratch / f"zoo-{version}.log", "w") for version in args.versions}
    pending = []
    for version in args.versions:
        proc = subprocess.Popen(zoo_command(version, args, outs[version]), stdout=logs[version], stderr=subprocess.STDOUT)
        pending.append((version, proc))
        if not args.parallel:
            proc.wait()
    reports = {}
    for version, proc in pending:
        proc.wait()
        logs[version].close()
        if not outs[version].exists():
            sys.exit(f"kvspec zoo on {version} wrote no report (exit {proc.returncode}); see {scratch}")
        reports[version] = json.loads(outs[version].read_text())
    return reports


def resummarized(report: dict) -> dict:
    """The report's entries summarized again from their runs, by this kvspec's rules."""
    entries = [summary(VARIANTS[e["entry"]], [EntryRun(**run) for run in e["runs"]]) for e in report["entries"]]
    return {**report, "entries": entries, "missed": [e["entry"] for e in entries if not e["all_detected"]]}


def seconds(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def markdown(reports: dict[str, dict]) -> str:
    versions = list(reports)
    head = "| entry | check that fired | " + " | ".join(
        f"{v} detected | {v} median s (wall / CPU)" for v in versions
    ) + " |"
    rows = [head, "|---|---|" + "---:|---:|" * len(versions)]
    by_version = {v: {e["entry"]: e for e in reports[v]["entries"]} for v in versions}
    for name in by_version[versions[0]]:
        fired = sorted({check for v in versions for check in by_version[v][name]["fired"]})
        cells = []
        for v in versions:
            e = by_version[v][name]
            cells += [e["detected"], f"{seconds(e['median_seconds'])} / {seconds(e['median_cpu_seconds'])}"]
        rows.append(f"| `{name}` | {', '.join(fired) or '-'} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=supported_versions())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--entry", action="append", default=[])
    parser.add_argument("--no-control", action="store_true", help="do not re-run fired checks on unpatched vLLM")
    parser.add_argument("--parallel", action="store_true", help="run the releases at the same time")
    parser.add_argument("--logs", type=Path, help="keep each release's zoo output and JSON in this directory")
    parser.add_argument("--reuse", type=Path, help="no run: render the JSON kept in this --logs directory")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.reuse is not None:  # render again from the JSON an earlier run kept with --logs
        reports = {v: json.loads((args.reuse / f"zoo-{v}.json").read_text()) for v in args.versions}
    elif args.logs is not None:  # keep each release's printed zoo table and JSON
        args.logs.mkdir(parents=True, exist_ok=True)
        reports = run_zoos(args, args.logs)
    else:
        with tempfile.TemporaryDirectory(prefix="kvspec-zoo-") as scratch:
            reports = run_zoos(args, Path(scratch))
    reports = {v: resummarized(r) for v, r in reports.items()}
    table = markdown(reports)
    how = f"rendered from {args.reuse}" if args.reuse else f"{time.perf_counter() - started:.0f} s in all"
    print(f"Time to detection per zoo entry, seeds {args.seed}..{args.seed + args.seeds - 1}, "
          f"median ({date.today()}, {how})\n")
    print(table)
    missed = {v: r["missed"] for v, r in reports.items() if r["missed"]}
    if not missed:
        print("\nevery entry detected at every seed on " + ", ".join(reports))
    for v, r in reports.items():
        for e in r["entries"]:
            if e["missed_seeds"]:
                print(f"{v}: {e['entry']} missed at seed(s) {e['missed_seeds']}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"date": str(date.today()), "source": source(),
                                   "seeds": args.seeds, "reports": reports, "table": table}, indent=2) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
