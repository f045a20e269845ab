"""``kvspec mutate``: how many small mistakes in vLLM's KV-cache functions the gate catches.

Each mutant is one operator (kvspec/tools/mutation_operators.py) at one site of one vLLM function
(kvspec/tools/mutation_targets.py), compiled in memory and put in place of the real function; the
gate checks that drive that function then run (kvspec.gate.registry.run_checks, the default budget,
seeded), cheapest first, stopping at the first that fails. Every mutant runs in a forked
child: a mutant cannot leak into the next, and one that hangs is killed at its time limit
and counted as killed by timeout.

First a baseline run, unmutated, must hold; it also records which lines of each function
the checks execute. Mutants on lines no check reaches are counted as "unreached" (coverage
gaps, reported, not sampled); of the rest, ``--limit`` are drawn with ``--seed`` (the same
seed drives the checks), so a report replays from its printed seed. Survivors are judged in
benchmarks/mutation_triage.toml: ``equivalent`` (no input can tell) or ``gap`` (the
situation that would catch it). The score is killed / (mutants - stillborn - equivalent).

    kvspec mutate [--vllm V] [--seed N] [--limit K] [--json F] [--markdown F]
                  [--function NAME] [--id MUTANT] [--list] [--min-score 0.9]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import signal
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path

from kvspec.gate.files import ensure_writable
from kvspec.gate.options import GateOptions
from kvspec.gate.registry import CHECKS, run_checks
from kvspec.impl.target import PROJECT_ROOT, TargetError, resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.tools.mutation_report import report
from kvspec.tools.mutation_targets import (
    TARGETS,
    Mutant,
    Stillborn,
    applied,
    available,
    code_objects,
    enumerate_mutants,
    line_in_file,
    ordered_checks,
)

TRIAGE_FILE = PROJECT_ROOT / "benchmarks" / "mutation_triage.toml"
DEFAULT_LIMIT = 160
# A mutant may take this many times the unmutated checks' time (measured under the trace,
# itself 2-3 times slower) before it counts as a hang.
TIMEOUT_FACTOR, TIMEOUT_SLACK = 1.5, 30.0
EXIT_OK, EXIT_BELOW = 0, 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise TargetError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvspec mutate", description="the mutation score of the gate on vLLM's functions")
    parser.add_argument("--vllm", metavar="VERSION", help="a pinned release (default: the first supported)")
    parser.add_argument("--seed", type=int, default=0, help="draws the sample and seeds the checks (default 0)")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"mutants to run (default {DEFAULT_LIMIT})")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write the tables as Markdown")
    parser.add_argument("--function", action="append", default=[], metavar="NAME", help="only this function")
    parser.add_argument("--id", action="append", default=[], metavar="MUTANT", help="run exactly these mutants")
    parser.add_argument("--list", action="store_true", help="list the mutants (no baseline, no run)")
    parser.add_argument("--min-score", type=float, default=0.9, help="exit 1 below this kill rate (default 0.9)")
    parser.add_argument("--triage", type=Path, default=TRIAGE_FILE, help="survivor verdicts (TOML)")
    parser.add_argument(
        "--from-json", type=Path, metavar="FILE", help="judge a saved run's survivors again with --triage (no run)"
    )
    return parser


# ----------------------------------------------------------------------------- forked runs


def run_forked(work, timeout: float):
    """``work()`` in a forked child, its JSON-able result back; ("timeout", None) when the child
    outlives ``timeout`` seconds (it is killed), ("error", message) when it raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: quiet, run, report, leave without running the parent's cleanup
        os.close(read_end)
        _die_with_parent()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1), os.dup2(devnull, 2)
        try:
            payload = ("ok", work())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            payload = ("error", f"{type(exc).__name__}: {exc}")
        with os.fdopen(write_end, "w") as out:
            json.dump(payload, out)
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(read_end) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "timeout", None
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    if not chunks:
        return "error", "the child died without a report"
    status, value = json.loads(b"".join(chunks))
    return status, value


def _die_with_parent() -> None:
    """A child whose parent is killed must not run on alone (Linux; elsewhere it may)."""
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_checks_until_failure(adapter, checks: list[str], seed: int) -> dict:

    seconds = {}
    for name in checks:
        started = time.perf_counter()
        try:
            [result] = run_checks(adapter, GateOptions(seed=seed), only=[name])
        except Exception as exc:  # noqa: BLE001 - the mutant crashed a check outright: caught
            return {"killed_by": name, "detail": f"the check crashed: {type(exc).__name__}: {exc}"[:300]}
        seconds[name] = time.perf_counter() - started
        if not result.holds:
            return {"killed_by": name, "detail": (result.details or [""])[0][:300]}
    return {"killed_by": None, "seconds": seconds}


def _no_shrinking() -> None:
    """Killing needs a failure, not a minimal one: Hypothesis stops at the first failing
    example (the examples drawn before it are the gate's own, so the verdict is the same)."""
    import hypothesis  # noqa: PLC0415

    phases = [hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate, hypothesis.Phase.target]
    hypothesis.settings.register_profile("kvspec-mutation", phases=phases)
    hypothesis.settings.load_profile("kvspec-mutation")


# ----------------------------------------------------------------------------- baseline


def _baseline(adapter, targets, seed: int) -> dict:
    """The unmutated checks (they must hold), their times, and the lines of each target that
    they execute (by a trace on the targets' own code objects only)."""

    watched = {code: t.name for t in targets for code in code_objects(t)}
    reached: dict[str, set[int]] = defaultdict(set)

    def local(frame, event, arg):
        if event == "line":
            reached[watched[frame.f_code]].add(frame.f_lineno)
        return local

    def on_call(frame, event, arg):
        return local if frame.f_code in watched else None

    checks = ordered_checks(tuple(c for t in targets for c in t.checks))
    sys.settrace(on_call)
    try:
        outcome = _run_checks_until_failure(adapter, checks, seed)
    finally:
        sys.settrace(None)
    return {"outcome": outcome, "reached": {name: sorted(lines) for name, lines in reached.items()}}


# ----------------------------------------------------------------------------- selection


def select_mutants(mutants: list, limit: int, seed: int) -> list:
    """``limit`` mutants drawn with ``seed``, each function's share in proportion to its count
    (largest remainder), kept in enumeration order."""
    if limit >= len(mutants):
        return list(mutants)
    by_function: dict[str, list] = defaultdict(list)
    for m in mutants:
        by_function[m.target.name].append(m)
    exact = {name: limit * len(ms) / len(mutants) for name, ms in by_function.items()}
    quota = {name: math.floor(share) for name, share in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (-(exact[name] - quota[name]), name))
    for name in by_remainder[: limit - sum(quota.values())]:
        quota[name] += 1
    rng = random.Random(seed)
    chosen = {m.id for name in sorted(by_function) for m in rng.sample(by_function[name], quota[name])}
    return [m for m in mutants if m.id in chosen]


def load_triage(path: Path) -> dict[str, dict]:
    if not path.exists() and path == TRIAGE_FILE:
        return {}  # nothing triaged yet
    try:
        triage = tomllib.loads(path.read_text())
    except OSError as exc:
        raise TargetError(f"--triage {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TargetError(f"--triage {path}: not valid TOML: {exc}") from None
    if bad := next((key for key, entry in triage.items() if not isinstance(entry, dict)), None):
        raise TargetError(f"--triage {path}: {bad!r} is not a table of verdict, reason, line")
    return triage


def verdict_of(mutant, triage: dict[str, dict]) -> tuple[str, str]:
    """("equivalent"|"gap"|"untriaged", reason). A verdict written for another version of the
    line (vLLM changed it) does not carry over; ``line`` may list every version it was judged
    for (one release renamed a variable, say)."""
    entry = triage.get(mutant.id)
    lines = entry.get("line", mutant.original) if entry is not None else None
    if entry is None or mutant.original not in ([lines] if isinstance(lines, str) else lines):
        return "untriaged", ""
    if entry.get("verdict") not in ("equivalent", "gap"):
        raise TargetError(f"triage {mutant.id}: verdict must be 'equivalent' or 'gap'")
    return entry["verdict"], entry.get("reason", "")


# ----------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.limit < 1:
        raise TargetError("--limit must be at least 1")
    for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path is not None:
            ensure_writable(path, f"{flag} {path}")
    if not 0 <= args.min_score <= 1:
        raise TargetError(f"--min-score {args.min_score:g}: give a kill rate between 0 and 1")
    if args.from_json is not None and not args.from_json.is_file():
        raise TargetError(f"--from-json {args.from_json}: no such file")

    names = {t.name for t in TARGETS}
    unknown = [f for f in args.function if f not in names]
    if unknown:
        raise TargetError(f"unknown function {unknown[0]!r} (one of: {', '.join(sorted(names))})")
    triage = load_triage(args.triage)
    if args.from_json is not None:
        return _rejudge(args, triage)
    target = resolve(args.vllm, None)


    adapter = VllmAdapter(target)

    unknown_checks = sorted({c for t in TARGETS for c in t.checks} - set(CHECKS))
    if unknown_checks:
        raise TargetError(f"the gate has no check {unknown_checks[0]!r} (kvspec/tools/mutation_targets.py is out of date)")
    targets = [t for t in TARGETS if available(t) and (not args.function or t.name in args.function)]
    missing = [t.name for t in TARGETS if not available(t)]
    mutants = [m for t in targets for m in enumerate_mutants(t)]
    if args.id:
        by_id = {m.id: m for m in mutants}
        absent = [i for i in args.id if i not in by_id]
        if absent:
            raise TargetError(f"no mutant {absent[0]!r} in {target.label} (see kvspec mutate --list)")
        mutants = [by_id[i] for i in args.id]
        targets = [t for t in targets if any(m.target == t for m in mutants)]
    if args.list:
        for m in mutants:
            print(f"{m.id}  line {m.line}: {m.original}  ->  {m.mutated}")
        return EXIT_OK

    print(f"kvspec mutate: {target.label}, seed {args.seed}, limit {args.limit}, {len(mutants)} mutants of {len(targets)} functions", flush=True)
    if missing:
        print(f"  not in this vLLM: {', '.join(missing)}")
    _no_shrinking()
    started = time.monotonic()
    status, baseline = run_forked(lambda: _baseline(adapter, targets, args.seed), timeout=3600)
    if status != "ok" or baseline["outcome"]["killed_by"] is not None:
        detail = baseline if status != "ok" else baseline["outcome"]
        raise TargetError(f"the unmutated gate does not hold on {target.label}: {detail}")
    check_seconds = baseline["outcome"]["seconds"]
    reached = {name: set(lines) for name, lines in baseline["reached"].items()}
    print(f"baseline holds in {time.monotonic() - started:.0f} s (traced): " + ", ".join(f"{c} {s:.1f}s" for c, s in check_seconds.items()), flush=True)

    reachable = [m for m in mutants if line_in_file(m) in reached.get(m.target.name, ())]
    unreached = [m for m in mutants if m not in reachable]
    chosen = reachable if args.id else select_mutants(reachable, args.limit, args.seed)
    results = []
    for number, mutant in enumerate(chosen, 1):
        results.append(_run_one(adapter, mutant, args.seed, check_seconds))
        r = results[-1]
        how = f"killed by {r['killed_by']}" if r["status"] == "killed" else r["status"]
        print(f"[{number}/{len(chosen)}] {mutant.id}: {how} ({r['seconds']:.1f}s)", flush=True)

    return report(
        target=target, adapter_version=adapter.version, args=args, targets=targets, results=results,
        unreached=unreached, triage=triage, verdict_of=verdict_of, seconds=time.monotonic() - started,
    )


def _rejudge(args, triage: dict) -> int:
    """The report of a saved run (``--json``), its survivors judged by the current triage."""
    from types import SimpleNamespace  # noqa: PLC0415


    try:
        saved = json.loads(args.from_json.read_text())
        by_name = {t.name: t for t in TARGETS}

        def mutant(d: dict) -> Mutant:
            return Mutant(by_name[d["function"]], d["operator"], d["site"], d["line"], d["original"], d["mutated"])

        rows = [
            {"mutant": mutant(d), "status": d["status"], "killed_by": d["killed_by"], "detail": d["detail"], "seconds": d["seconds"]}
            for d in saved["mutants"]
        ]
        unreached = [mutant(d) for d in saved["unreached"]]
        targets = [by_name[name] for name in saved["functions"]]
        args.seed, args.limit = saved["seed"], saved["limit"]
    except (OSError, ValueError, KeyError) as exc:
        raise TargetError(f"--from-json {args.from_json}: not a kvspec mutate report ({type(exc).__name__}: {exc})") from None
    label = SimpleNamespace(label=saved["target"]["label"])
    return report(
        target=label, adapter_version=saved["target"]["version"], args=args, targets=targets, results=rows,
        unreached=unreached, triage=triage, verdict_of=verdict_of, seconds=saved["seconds"],
    )


def _run_one(adapter, mutant, seed: int, check_seconds: dict) -> dict:

    checks = ordered_checks(mutant.target.checks)
    timeout = TIMEOUT_FACTOR * sum(check_seconds.get(c, 60.0) for c in checks) + TIMEOUT_SLACK

    def work():
        try:
            with applied(mutant):
                return _run_checks_until_failure(adapter, checks, seed)
        except Stillborn as exc:
            return {"stillborn": str(exc)}

    started = time.monotonic()
    status, value = run_forked(work, timeout)
    row = {"mutant": mutant, "seconds": time.monotonic() - started, "killed_by": None, "detail": ""}
    if status == "timeout":
        return row | {"status": "timeout", "detail": f"no verdict within {timeout:.0f} s"}
    if status == "error":
        return row | {"status": "stillborn", "detail": value}
    if "stillborn" in value:
        return row | {"status": "stillborn", "detail": value["stillborn"]}
    if value["killed_by"] is None:
        return row | {"status": "survived"}
    return row | {"status": "killed", "killed_by": value["killed_by"], "detail": value["detail"]}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
