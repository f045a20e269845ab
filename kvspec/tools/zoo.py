"""``kvspec zoo``: run the gate against every bug of the zoo (impl/broken.py) and report, per
entry, whether the gate detected it, which check fired, the failure's first line and the time
to detection.

For each entry and seed the entry's patch is put into real vLLM and the checks run as
``kvspec check --quick-first`` runs them (``kvspec.gate.registry.quick_first``): in the gate's
order (``kvspec.gate.registry.CHECKS``; the Z3 proofs, which judge the spec, and the saved finds,
which replay what earlier runs found, are skipped unless an entry names them), each first at a
twentieth of its examples, then each at the default budget; the run stops at the first failing
check. Time to detection is the wall time from the first check's start to that verdict,
shrinking included: what a reviewer would wait for. A detection counts only if the same check,
at the same seed and budget, holds on the unpatched vLLM, or fails there with another first
line (the control, computed once per check, seed and budget; ``--no-control`` skips it). A
check that fails alike on the unpatched vLLM (an older release's own finding,
release-findings.toml) detects nothing, and the run goes on to the next check: the release's
finding does not hide the bug from the checks after it.

Exit codes: 0 every entry detected at every seed, 1 one missed (or a control failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvspec.gate.files import ensure_writable, forget_previous, write_atomically
from kvspec.gate.names import Check, Outcome
from kvspec.gate.options import GateOptions
from kvspec.gate.registry import CHECKS, quick_first, run_checks
from kvspec.impl.broken import VARIANTS, applied
from kvspec.impl.target import TargetError, resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.tools.replay import check_command

EXIT_OK, EXIT_MISSED = 0, 1
# The proofs judge the spec, not vLLM; the saved finds replay inputs earlier runs found, some on
# these very bugs, which says nothing of the gate's power to find them.
SKIPPED_UNLESS_NAMED = (Check.PROOFS, Check.SAVED_FINDS)
FIRST_LINE_WIDTH = 110


@dataclass
class EntryRun:
    """One entry at one seed."""

    entry: str
    seed: int
    detected: bool
    fired: str | None  # the first failing check
    first_line: str  # its failure's first line ("" when missed)
    seconds: float  # wall time to the verdict, from the first check's start
    cpu_seconds: float
    crashed: bool = False  # the check raised instead of judging (vLLM or the harness crashed)
    control: str | None = None  # the fired check on unpatched vLLM at this seed: holds / FAILS
    control_failure: str = ""  # the first line of that check's failure on unpatched vLLM, if any
    checks: list[dict] = field(default_factory=list)  # every check run: name, budget factor, verdict, seconds
    replay: str = ""  # the `kvspec check` command that replays the detection
    fired_scale: float = 1.0  # the budget factor of the failing check: below 1 in the quick pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise TargetError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvspec zoo", description="run the gate against each re-introduced vLLM bug")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--vllm", metavar="VERSION", help="a pinned release (default: the first supported)")
    target.add_argument("--vllm-src", metavar="PATH", help="a local vLLM checkout instead of a release")
    parser.add_argument("--seed", type=int, default=0, help="first seed of the Hypothesis checks (default 0)")
    parser.add_argument("--seeds", type=int, default=1, help="run seeds SEED .. SEED+K-1 (default 1)")
    parser.add_argument("--json", metavar="FILE", type=Path, help="also write the results as JSON")
    parser.add_argument("--entry", metavar="NAME", action="append", default=[], help="only this entry (repeatable)")
    parser.add_argument("--no-control", action="store_true", help="skip re-running fired checks on unpatched vLLM")
    return parser


def gate_order(variant) -> list[str]:
    """The checks a zoo run tries for ``variant``, in the gate's order."""

    return [name for name in CHECKS if name not in SKIPPED_UNLESS_NAMED or name in variant.caught_by]


def run_entry(adapter, variant, seed: int, checks: list[str] | None = None, controls: dict | None = None) -> EntryRun:
    """The gate (or ``checks``), quick pass first, on vLLM with ``variant`` in place, up to its
    first failing check.

    With ``controls`` (a cache for control_verdict), a check that fails as it does on the
    unpatched vLLM (same first line: the release's own finding) detects nothing and the run goes
    on to the next check; its time still counts, as a reviewer would wait for it."""

    run = EntryRun(variant.name, seed, detected=False, fired=None, first_line="", seconds=0.0, cpu_seconds=0.0)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        for name, scale in quick_first(gate_order(variant) if checks is None else checks):
            with applied(adapter, [variant.name]):  # the control below runs on the unpatched vLLM
                holds = _judge(adapter, name, seed, scale, run)
            if holds:
                continue
            if controls is not None:
                run.control, run.control_failure = control_verdict(adapter, name, seed, controls, scale)
                if not conclusive(run):
                    run.checks[-1]["verdict"] += " (alike on unpatched vLLM)"
                    run.detected, run.fired, run.first_line, run.fired_scale = False, None, "", 1.0  # the control stays
                    continue
            break
    except TargetError as exc:  # the patch could not be put in place: nothing was judged
        run.first_line = f"not applied: {exc}"
    run.seconds = round(time.perf_counter() - wall, 3)
    run.cpu_seconds = round(time.process_time() - cpu, 3)
    return run


def _judge(adapter, name: str, seed: int, scale: float, run: EntryRun) -> bool:
    """Run one check into ``run``; False once it fails (the entry is detected)."""

    started = time.perf_counter()
    try:
        (result,) = run_checks(adapter, GateOptions(seed=seed, scale=scale), only=[name])
        # Only a finding detects a bug; kvspec failing to drive the variant is not a detection.
        holds, first, verdict = not result.outcome.is_finding, (result.details[0] if result.details else ""), result.verdict
        run.crashed |= result.outcome is Outcome.CANNOT_DRIVE
    except Exception as exc:  # noqa: BLE001 - the gate would stop here too (exit 2)
        holds, first, run.crashed, verdict = False, f"{type(exc).__name__} raised: {exc}", True, "crashed"
    seconds = round(time.perf_counter() - started, 3)
    run.checks.append({"check": name, "scale": scale, "verdict": verdict, "seconds": seconds})
    if not holds:
        run.detected, run.fired, run.first_line, run.fired_scale = True, name, first, scale
    return holds


def control_verdict(adapter, check: str, seed: int, cache: dict, scale: float = 1.0) -> tuple[str, str]:
    """``check`` at ``seed`` and budget ``scale`` on the unpatched vLLM, (verdict, first line of
    its failure): a detection is real only if the check holds there."""

    key = (check, seed, scale)
    if key not in cache:
        try:
            (result,) = run_checks(adapter, GateOptions(seed=seed, scale=scale), only=[check])
            cache[key] = (result.verdict, "" if result.holds else result.details[0])
        except Exception as exc:  # noqa: BLE001
            cache[key] = ("crashed", f"{type(exc).__name__} raised: {exc}")
    return cache[key]


def conclusive(run: EntryRun) -> bool:
    """A detection the unpatched vLLM does not also make: its check holds there, or fails with
    another first line (the release's own finding, met first or elsewhere)."""
    return run.detected and (run.control in (None, "holds") or run.control_failure != run.first_line)


def summary(variant, runs: list[EntryRun]) -> dict:
    """An entry over its seeds; medians are over the detections (over every run if none)."""
    detected = [r for r in runs if conclusive(r)]
    timed = detected or runs
    return {
        "entry": variant.name,
        "upstream": variant.upstream,
        "wrong_behaviour": variant.wrong_behaviour,
        "invariant": variant.invariant,
        "expected_checks": list(variant.caught_by),
        "detected": f"{len(detected)}/{len(runs)}",
        "all_detected": len(detected) == len(runs),
        "missed_seeds": [r.seed for r in runs if not r.detected],
        "fired": sorted({r.fired for r in timed if r.fired}),
        "fired_as_expected": all(r.fired in variant.caught_by for r in detected),
        "median_seconds": round(statistics.median(r.seconds for r in timed), 2),
        "median_cpu_seconds": round(statistics.median(r.cpu_seconds for r in timed), 2),
        "runs": [asdict(r) for r in runs],
    }


def markdown_table(entries: list[dict]) -> str:
    rows = [
        "| entry | upstream | detected | check that fired | failure (first line, first seed) "
        "| time to detection, median s (wall / CPU) |",
        "|---|---|---|---|---|---:|",
    ]
    for e in entries:
        first = e["runs"][0]["first_line"].replace("|", "\\|")
        if len(first) > FIRST_LINE_WIDTH:
            first = first[: FIRST_LINE_WIDTH - 1] + "…"
        fired = ", ".join(e["fired"]) or "-"
        rows.append(
            f"| `{e['entry']}` | {e['upstream']} | {e['detected']} | {fired} | {first} | {_seconds(e['median_seconds'])} / {_seconds(e['median_cpu_seconds'])} |"
        )
    return "\n".join(rows)


def _seconds(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)

    unknown = [name for name in args.entry if name not in VARIANTS]
    if unknown:
        raise TargetError(f"unknown zoo entry {unknown[0]!r} (see `kvspec variants`)")
    if args.seeds < 1:
        raise TargetError(f"--seeds {args.seeds}: at least one seed")
    if args.json is not None:
        ensure_writable(args.json, f"--json {args.json}")
    target = resolve(args.vllm, args.vllm_src)
    forget_previous(args.json)  # until this run finishes, no result file at all

    adapter = VllmAdapter(target)
    seeds = list(range(args.seed, args.seed + args.seeds))
    names = args.entry or list(VARIANTS)
    print(f"kvspec zoo: {target.label}, seed {args.seed}" + (f" (seeds {seeds[0]}..{seeds[-1]})" if args.seeds > 1 else "")
          + f", {len(names)} entries", flush=True)
    # Warm-up on unpatched vLLM: the first lookup pays vLLM's lazy set-up, no entry should.
    run_checks(adapter, GateOptions(seed=args.seed), only=[Check.SEED_HYBRID])
    controls: dict = {}
    entries = []
    for name in names:
        variant, runs = VARIANTS[name], []
        for seed in seeds:
            run = run_entry(adapter, variant, seed, controls=None if args.no_control else controls)
            runs.append(run)
            verdict = f"detected by {run.fired}" if run.detected else "MISSED"
            if run.detected and run.fired_scale < 1:
                verdict += " (quick pass)"
            if run.control not in (None, "holds"):
                verdict += f" (unpatched vLLM {run.control} there otherwise: {run.control_failure[:80]})"
            print(f"  {name}, seed {seed}: {verdict} in {run.seconds:.1f} s", flush=True)
            if run.detected:
                run.replay = check_command(target, seed=seed, checks=[run.fired], inject=[name], quick=run.fired_scale < 1)
                print(f"    replay: {run.replay}", flush=True)
        entries.append(summary(variant, runs))
    print()
    print(markdown_table(entries))
    missed = [e["entry"] for e in entries if not e["all_detected"]]
    print(f"\nkvspec zoo: {len(entries) - len(missed)} of {len(entries)} entries detected at every seed")
    for e in entries:
        if e["missed_seeds"]:
            print(f"  MISSED: {e['entry']} at seed(s) {e['missed_seeds']}: every check held")
    if args.json is not None:
        report = {
            "target": {"label": target.label, "version": adapter.version, "root": str(target.root)},
            "seeds": seeds,
            "control": not args.no_control,
            "ok": not missed,
            "missed": missed,
            "entries": entries,
        }
        write_atomically(args.json, json.dumps(report, indent=2) + "\n", f"--json {args.json}")
    return EXIT_MISSED if missed else EXIT_OK


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TargetError as exc:
        print(f"kvspec zoo: error: {exc}", file=sys.stderr)
        sys.exit(2)
