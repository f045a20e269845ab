"""``kvspec``: check real vLLM's KV-cache grouping and prefix-cache hit rules against the spec.

Exit codes: 0 every check holds, 1 a check found a violated rule,
a crash or a hang in vLLM, 2 bad input or a broken set-up, 3 kvspec cannot drive a check on this
vLLM (and no check found anything).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from kvspec.divergences.known import KNOWN_FILE
from kvspec.gate import saved_finds
from kvspec.gate.files import ensure_writable, forget_previous, write_atomically
from kvspec.gate.names import Check, Outcome
from kvspec.gate.options import QUICK_SCALE, GateOptions
from kvspec.gate.registry import CHECKS, SKIPPED_WHEN_QUICK
from kvspec.impl.broken import VARIANTS, applied
from kvspec.impl.target import TargetError, resolve, supported_versions
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.impl.watchdog import DEFAULT_DEADLINE_SECONDS
from kvspec.tools import interrupts, progress
from kvspec.tools.gate_workers import run_in_workers, run_quick_first
from kvspec.tools.guard import guarded
from kvspec.tools.inputs import env_flag, finite
from kvspec.tools.junit_report import junit_xml
from kvspec.tools.replay import check_command

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CANNOT_DRIVE = 0, 1, 2, 3

# Sub-commands that own their options: name -> (module with ``main(argv) -> int``, summary).
DELEGATED = {
    "prove": ("kvspec.tools.prove", "the Z3 proofs"),
    "zoo": ("kvspec.tools.zoo", "run the gate against each re-introduced vLLM bug"),
    "mutate": ("kvspec.tools.mutation", "the mutation score of the gate on vLLM's functions"),
    "review": ("kvspec.tools.review", "compare two vLLMs (base and head) on one seeded workload"),
    "fuzz": ("kvspec.tools.fuzz", "a long randomized campaign that saves what it finds"),
    "matrix": ("kvspec.tools.matrix", "the gate on each older release, against its recorded findings"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage dump
        raise TargetError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvspec", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = commands.add_parser("check", help="run every check against the target vLLM")
    target = check.add_mutually_exclusive_group()
    target.add_argument("--vllm", metavar="VERSION", help="a pinned release (default: the first supported), or 'installed': "
                        "the vllm this Python imports (e.g. an editable install)")
    target.add_argument("--vllm-src", metavar="PATH", help="a local vLLM checkout instead of a release")
    check.add_argument("--json", metavar="FILE", type=Path, help="also write the results as JSON")
    check.add_argument("--junit", metavar="FILE", type=Path,
                       help="also write the results as JUnit XML, one test case per check (docs/ci.md)")
    check.add_argument("--seed", type=int, default=0, help="seed of the Hypothesis checks (default 0)")
    check.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="processes the checks are spread over, sharing one vLLM import (default: 2, or 1 "
                       "on one core); the verdicts are the same for any number")
    check.add_argument(
        "--divergences",
        metavar="FILE",
        type=Path,
        default=Path(os.environ.get("KVSPEC_DIVERGENCES") or KNOWN_FILE),
        help="the known-divergences file (default: $KVSPEC_DIVERGENCES, else known-divergences.toml)",
    )
    check.add_argument(
        "--strict-drafter",
        action="store_true",
        default=env_flag("KVSPEC_STRICT_DRAFTER"),
        help="fail on every drafter-unproven hit, recorded or not (spec/hits.py's drafter tier; "
        "default: $KVSPEC_STRICT_DRAFTER)",
    )
    check.add_argument(
        "--check",
        metavar="NAME",
        action="append",
        choices=[str(check) for check in Check],  # argparse prints the names, not the members
        help="run only this check (repeatable; names as `kvspec check` prints them)",
    )
    check.add_argument(
        "--deadline",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_DEADLINE_SECONDS,
        help=f"past this, a call into vLLM is reported as hung (default {DEFAULT_DEADLINE_SECONDS:g})",
    )
    budget = check.add_mutually_exclusive_group()
    budget.add_argument(
        "--quick", action="store_true", help="a twentieth of the default examples (a smoke run, not the gate)"
    )
    budget.add_argument(
        "--quick-first", action="store_true",
        help="every check at a twentieth of its examples first, in one process, stopping at the first "
        "finding; if none, the whole gate (a bug found in seconds, the verdict of the gate otherwise)",
    )
    check.add_argument(
        "--inject",
        metavar="VARIANT",
        action="append",
        default=[],
        help="re-introduce a known vLLM bug in memory first, to see the gate catch it",
    )
    for name, (_, summary) in DELEGATED.items():
        commands.add_parser(name, help=f"{summary} (see kvspec {name} --help)", add_help=False)
    commands.add_parser("versions", help="list the supported vLLM releases")
    commands.add_parser("variants", help="list the deliberately broken variants")
    parser.epilog = ("global flags, for every command: --quiet (no progress on stderr), --debug (a traceback "
                     "with an error); SIGINT exits 130, SIGTERM 143, leaving no result file")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every command, under the one guard (kvspec/tools/guard.py)."""
    return guarded(_command, sys.argv[1:] if argv is None else argv)


def _command(argv: list[str]) -> int:
    if argv[:1] and argv[0] in DELEGATED:
        module = importlib.import_module(DELEGATED[argv[0]][0])
        return module.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "versions":
        print("\n".join(supported_versions()))
        return EXIT_OK
    if args.command == "variants":
        for v in VARIANTS.values():
            print(f"{v.name}: {v.wrong_behaviour} [{v.upstream}; caught by {', '.join(v.caught_by)}]")
        return EXIT_OK
    return _check(args)


def _check(args) -> int:
    """Every input checked, then vLLM imported, the checks run (over ``--jobs`` processes) with
    progress on stderr, the table on stdout and the JSON written atomically at the end."""
    unknown = [name for name in args.inject if name not in VARIANTS]
    if unknown:
        raise TargetError(f"unknown variant {unknown[0]!r} (see `kvspec variants`)")
    for flag, path in (("--json", args.json), ("--junit", args.junit)):
        if path is not None:
            ensure_writable(path, f"{flag} {path}")
    finite("--deadline", args.deadline)
    if args.jobs < 1:
        raise TargetError(f"--jobs {args.jobs}: give at least 1")
    options = GateOptions(
        seed=args.seed,
        scale=QUICK_SCALE if args.quick else 1.0,
        divergences=args.divergences,
        strict_drafter=args.strict_drafter,
        deadline=args.deadline,
    )
    options.known()  # a malformed file is bad input: refuse it before any work
    names = [Check(n) for n in args.check] if args.check else [
        n for n in CHECKS if not (args.quick and n in SKIPPED_WHEN_QUICK)]
    if Check.SAVED_FINDS in names:
        saved_finds.load()  # a corrupt find is named now, not blamed on vLLM later
    target = resolve(args.vllm, args.vllm_src)
    forget_previous(args.json)  # until this run finishes, no result file at all
    forget_previous(args.junit)

    header = f"kvspec check: {target.label}, seed {args.seed}" + (
        ", quick (no proofs)" if args.quick else ", quick pass first" if args.quick_first else "")
    if args.inject:
        header += f", injected: {', '.join(args.inject)}"
    print(header, flush=True)
    progress.note(f"  importing {target.label}")
    adapter = VllmAdapter(target)
    with applied(adapter, args.inject):
        if args.quick_first:
            results, found_quick = run_quick_first(adapter, options, names, args.jobs)
        else:
            results, found_quick = run_in_workers(adapter, options, names, args.jobs), False
    if found_quick:
        print(f"quick pass: {results[0].name} found this at a twentieth of its examples; the rest was not run")
    quick = args.quick or found_quick
    replays = {r.name: check_command(target, seed=args.seed, checks=[r.name], inject=args.inject, quick=quick,
                                     divergences=args.divergences, strict_drafter=args.strict_drafter)
               for r in results if not r.holds}
    _print_table(results)
    for name, command in replays.items():
        print(f"replay {name}: {command}")
    print(f"kvspec: {_tally(results)}")
    if args.json is not None:
        report = {
            "target": {"label": target.label, "version": adapter.version, "root": str(target.root)},
            "seed": args.seed,
            "quick": args.quick,
            "quick_first": args.quick_first,
            "found_in_quick_pass": found_quick,
            "injected": args.inject,
            "deadline_s": args.deadline,
            "ok": all(r.holds for r in results),
            "exit_code": exit_code(results),
            "checks": [
                {
                    "check": r.name,
                    "covered": r.covered,
                    "verdict": r.verdict,
                    "not_in_release": r.not_in_release,
                    "details": r.details,
                    "coverage": r.coverage,
                    "minimums": r.minimums,
                    "seconds": round(r.seconds, 3),
                    "longest_vllm_call_s": r.longest_vllm_call,
                    **({"replay": replays[r.name]} if r.name in replays else {}),
                }
                for r in results
            ],
        }
        write_atomically(args.json, json.dumps(report, indent=2) + "\n", f"--json {args.json}")
    if args.junit is not None:
        write_atomically(args.junit, junit_xml(results, target.label, replays), f"--junit {args.junit}")
    return exit_code(results)


def exit_code(results) -> int:
    """1 if any check found something in vLLM, else 3 if kvspec could not drive one, else 0."""
    if any(r.outcome.is_finding for r in results):
        return EXIT_FAILED
    if any(r.outcome is Outcome.CANNOT_DRIVE for r in results):
        return EXIT_CANNOT_DRIVE
    return EXIT_OK


def _tally(results) -> str:
    """``N checks hold, M fail`` and, when there are any, the other outcomes by name."""
    counts = {outcome: sum(r.outcome is outcome for r in results) for outcome in Outcome}
    findings = sum(counts[o] for o in Outcome if o.is_finding)
    text = f"{counts[Outcome.HOLDS]} checks hold, {findings} fail"
    for outcome in (Outcome.VLLM_CRASHED, Outcome.VLLM_HUNG, Outcome.CANNOT_DRIVE):
        if counts[outcome]:
            text += f", {counts[outcome]} {outcome.value}"
    if partial := sum(bool(r.not_in_release) for r in results):
        text += f"; {partial} with a part not in this release"
    return text


def _verdict_cell(result) -> str:
    cell = f"{result.verdict}: {result.details[0] if result.details else ''}"
    if result.not_in_release:
        cell += f"; not in this release: {', '.join(result.not_in_release)}"
    return cell


def _print_table(results) -> None:
    """One row per check; a failing check's full story (minimal example) follows the table."""
    rows = [("check", "covered", "verdict")] + [
        (r.name, r.covered, _verdict_cell(r)) for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
    for r in results:
        if r.coverage:
            _print_coverage(r)
    for r in results:
        if len(r.details) > 1:
            print(f"\n{r.name}: {r.verdict}:" if not r.holds else f"\n{r.name}, also:")
            print("\n".join(f"  {line}" for line in (r.details if not r.holds else r.details[1:])))


def _print_coverage(result, shapes_shown: int = 8) -> None:
    """The situations a check reached, as a table (the JSON keeps every count)."""
    shapes = sorted(((n, k.removeprefix("shape ")) for k, n in result.coverage.items() if k.startswith("shape ")),
                    reverse=True)
    rest = sorted((k, n) for k, n in result.coverage.items() if not k.startswith("shape "))
    print(f"\ncoverage of {result.name}:")
    width = max(len(k) for k, _ in rest + [(s, 0) for _, s in shapes[:shapes_shown]] + [("situation", 0)])
    for key, n in rest:
        minimum = f"  (minimum {result.minimums[key]})" if key in result.minimums else ""
        print(f"  {key:<{width}}  {n:>7}{minimum}")
    for n, shape in shapes[:shapes_shown]:
        print(f"  {shape:<{width}}  {n:>7}")
    if len(shapes) > shapes_shown:
        print(f"  ... {len(shapes) - shapes_shown} more group shapes (see --json)")


def run() -> None:
    """The ``kvspec`` command: ``main``, then an exit that keeps the SIGINT and SIGTERM handlers
    to the last moment (kvspec/tools/interrupts.py:exit_keeping_handlers)."""
    interrupts.exit_keeping_handlers(main())


if __name__ == "__main__":
    run()
