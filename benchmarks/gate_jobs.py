"""The whole gate in one process against the same gate spread over two (``kvspec check --jobs``),
side by side in one run at one seed: wall seconds of each run, each check's seconds, and whether
the two runs gave every check the same verdict and coverage (they must: kvspec/tools/gate_workers.py).

    .venv/bin/python benchmarks/gate_jobs.py [--vllm 0.34.0] [--seed 0] [--jobs 1,2] [--out FILE]

Run it on a quiet machine: another process on the cores makes both figures meaningless.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMPARED = ("verdict", "covered", "coverage", "details")


def run_gate(release: str, seed: int, jobs: int, where: Path) -> tuple[float, dict]:
    out = where / f"jobs-{jobs}.json"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "kvspec.cli", "check", "--quiet", "--vllm", release, "--seed", str(seed),
                    "--jobs", str(jobs), "--json", str(out)], stdout=subprocess.DEVNULL, check=False)
    seconds = time.monotonic() - started
    if not out.is_file():
        sys.exit(f"gate_jobs: kvspec check --jobs {jobs} wrote no report")
    return seconds, json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default="0.34.0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", default="1,2", help="comma-separated --jobs values, run in this order")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    counts = [int(j) for j in args.jobs.split(",")]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in counts:
            print(f"gate_jobs: kvspec check --jobs {jobs} ...", file=sys.stderr, flush=True)
            runs[jobs] = run_gate(args.vllm, args.seed, jobs, Path(tmp))
    first = runs[counts[0]][1]["checks"]
    same = all([{k: c[k] for k in COMPARED} for c in report["checks"]] == [{k: c[k] for k in COMPARED} for c in first]
               for _, report in runs.values())
    print(f"vLLM {args.vllm}, seed {args.seed}: " + ", ".join(f"--jobs {j}: {runs[j][0]:.1f} s wall" for j in counts)
          + f"; every verdict and coverage count the same: {'yes' if same else 'NO'}")
    print("| check | " + " | ".join(f"--jobs {j}, s" for j in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for index, check in enumerate(first):
        print(f"| {check['check']} | " + " | ".join(f"{runs[j][1]['checks'][index]['seconds']:.1f}" for j in counts) + " |")
    if args.out:
        args.out.write_text(json.dumps({"vllm": args.vllm, "seed": args.seed, "same_verdicts": same,
                                        "wall_seconds": {str(j): round(runs[j][0], 1) for j in counts},
                                        "check_seconds": {str(j): {c["check"]: c["seconds"] for c in runs[j][1]["checks"]}
                                                          for j in counts}}, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
