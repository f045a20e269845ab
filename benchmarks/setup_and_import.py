"""Set-up and import figures for the vLLM target: a cold set-up (a new venv and new release
trees, in a scratch folder), a warm one (the same again, nothing to do), and the time to
import each release's KV-cache code into a fresh process. Medians over --runs.

    .venv/bin/python benchmarks/setup_and_import.py            # all three
    .venv/bin/python benchmarks/setup_and_import.py --no-cold  # warm + import on .venv
    add --no-pip-cache to make the cold run download everything (no pip cache, a new uv cache)
    benchmarks/setup_installers.py compares the two installers' cold set-ups
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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
    parser.add_argument("--no-cold", action="store_true")
    parser.add_argument("--no-pip-cache", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvspec-bench-") as scratch:
        env = dict(os.environ)
        if not args.no_cold:
            env.update(KVSPEC_VENV=f"{scratch}/venv", KVSPEC_VLLM_HOME=f"{scratch}/vllm")
            if args.no_pip_cache:
                env.update(PIP_NO_CACHE_DIR="1", UV_CACHE_DIR=f"{scratch}/uv-cache")
            rows.append(("set-up, cold (new venv and release trees)", timed(SETUP, env), 1))
        warm = [timed(SETUP, env) for _ in range(args.runs)]
        rows.append(("set-up, warm (nothing to do)", statistics.median(warm), args.runs))
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
    if len(rows) >= 2 and not args.no_cold:
        print(f"\nwarm/cold ratio: {rows[1][1] / rows[0][1]:.3f}")


if __name__ == "__main__":
    sys.exit(main())
