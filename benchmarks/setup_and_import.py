"""Set-up and import figures for the vLLM target: a warm set-up (nothing to do) and the time to
import each release's KV-cache code into a fresh process, medians over --runs. The cold set-up,
pip against uv on empty caches, is benchmarks/setup_installers.py's.

    .venv/bin/python benchmarks/setup_and_import.py [--runs 5]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = ["bash", str(ROOT / "scripts/setup.sh")]
IMPORT_PROBE = """
import sys, time
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
started = time.perf_counter()
VllmAdapter(resolve(sys.argv[1]))
print(time.perf_counter() - started)
"""


def timed(cmd, env) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm = [timed(SETUP, dict(os.environ)) for _ in range(args.runs)]
    rows = [("set-up, warm (nothing to do)", statistics.median(warm), args.runs)]
    python = str(ROOT / ".venv/bin/python")
    for version in (ROOT / "impl/vllm-versions.txt").read_text().split():
        if version.startswith("#") or not version[0].isdigit():
            continue
        seconds = [
            float(subprocess.run([python, "-c", IMPORT_PROBE, version], capture_output=True,
                                 text=True, check=True).stdout.split()[-1])
            for _ in range(args.runs)
        ]
        rows.append((f"import vLLM {version} KV-cache code", statistics.median(seconds), args.runs))
    print("| figure | median seconds | runs |\n|---|---:|---:|")
    for name, seconds, runs in rows:
        print(f"| {name} | {seconds:.2f} | {runs} |")


if __name__ == "__main__":
    sys.exit(main())
