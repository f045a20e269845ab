"""The gate's mutation score on real vLLM: a sample of operator mutants of the functions kvspec
models (kvspec/tools/mutation_targets.py), each run in memory against the checks that drive it.
Writes the Markdown tables and the JSON report to benchmarks/results/ and prints the tables.
Survivors are judged in benchmarks/mutation_triage.toml. Takes 30 to 60 minutes on 2 cores.

    .venv/bin/python benchmarks/mutation_score.py [--vllm 0.34.0] [--seed 0] [--limit 160]
"""

import argparse
import sys
from pathlib import Path

from kvspec.impl.target import TargetError
from kvspec.tools.mutation import DEFAULT_LIMIT, main

RESULTS = Path(__file__).resolve().parent / "results"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default="0.34.0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    args = parser.parse_args(argv)
    stem = RESULTS / f"mutation_score-{args.vllm}"
    RESULTS.mkdir(exist_ok=True)
    try:
        return main(["--vllm", args.vllm, "--seed", str(args.seed), "--limit", str(args.limit),
                     "--json", f"{stem}.json", "--markdown", f"{stem}.md"])  # fmt: skip
    except TargetError as exc:
        print(f"kvspec: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
