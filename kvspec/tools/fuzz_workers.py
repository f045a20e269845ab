"""``kvspec fuzz --workers N``: N campaign processes on this machine, sharing one example
database and one finds folder.

Why our own processes rather than HypoFuzz's ``hypothesis fuzz -n N``: each worker here is a
full ``kvspec fuzz`` campaign, so what it finds is shrunk, filed under its (invariant,
situation) once, and saved as replayable data and a plain-vLLM test (kvspec/gate/saved_finds.py),
which HypoFuzz does not do. HypoFuzz remains the way to schedule the same targets by coverage
and watch its dashboard (``kvspec/tools/fuzz_targets.py``, docs/fuzz-campaign.md); both use the
same database keys, so they feed each other.

Across workers a find is filed once: each worker reloads the finds folder before every round
(what another worker filed is masked from then on), and ``saved_finds.claim`` creates a find's
file exclusively, so two workers that shrink the same bug at the same moment save it once.
Each worker gets its own seed (the campaign's plus its number). The workers are started with
``interrupts.spawn``: SIGINT or SIGTERM to the parent ends them, and a parent killed outright
takes them with it (PR_SET_PDEATHSIG, kvspec/tools/guard.py).
"""

from __future__ import annotations

import sys

from kvspec.gate import saved_finds as finds
from kvspec.tools import interrupts


def worker_argv(argv: list[str], seed: int, number: int) -> list[str]:
    """``argv`` (the parent's, already valid) without ``--workers`` and ``--seed``, with this
    worker's seed."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--seed"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--seed=")):
            continue
        kept.append(arg)
    return [*kept, "--seed", str((seed + number) % 2**32)]


def run_workers(argv: list[str], workers: int, seed: int, finds_dir) -> int:
    """Start the workers, wait for all, and report the finds they filed between them: exit 1
    when there is one, 2 when a worker could not run (and none found anything), else 0."""
    before = {f["path"] for f in finds.load(finds_dir)}
    print(f"kvspec fuzz: {workers} workers, seeds {seed} to {seed + workers - 1}", file=sys.stderr, flush=True)
    children = [interrupts.spawn([sys.executable, "-m", "kvspec.cli", "fuzz", *worker_argv(argv, seed, n)])
                for n in range(workers)]
    codes = [child.wait() for child in children]
    for child in children:
        interrupts.forget(child)
    new = sorted({f["path"] for f in finds.load(finds_dir)} - before)
    print(f"kvspec fuzz: {workers} workers ended (exit codes {', '.join(map(str, codes))}); "
          f"{len(new)} new finds between them" + "".join(f"\n  {p}" for p in new))
    if new:
        return 1
    return 2 if any(code not in (0, 1) for code in codes) else 0
