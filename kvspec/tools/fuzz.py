"""``kvspec fuzz --minutes N``: a long randomized campaign over the gate's properties (core and
Mooncake lookups, grouping, the stateful KVCacheManager machine, and every other Hypothesis-driven
check's: kvspec/tools/fuzz_targets_checks.py), with Hypothesis's example
database in a directory you name. Each find is shrunk, filed under its (invariant, situation)
once, and saved (kvspec/gate/saved_finds.py) as replayable data and a vLLM test; ``kvspec check`` replays
every saved find first.

The campaign runs rounds: each target in turn, a fresh seed from the campaign's (printed), as
many examples as fit in about ``--round-seconds``. A progress line shows the elapsed time, the
examples run, the situations reached and the finds.

``--db`` is a directory or a Redis server (``redis://host:port``, kvspec/tools/fuzz_db.py), which
workers on several machines share; ``--workers N`` runs N campaigns here on one database
(kvspec/tools/fuzz_workers.py). A find is filed once however many workers make it.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import hypothesis
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, MultiplexedDatabase

from kvspec.draws import codec
from kvspec.emit.vllm_tests import grouping_test, lookup_test
from kvspec.gate import saved_finds as finds
from kvspec.gate.lookups import vllm_coordinator, vllm_mooncake
from kvspec.impl.broken import VARIANTS, applied
from kvspec.impl.target import PROJECT_ROOT, TargetError, resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.oracles.invariants import most_severe, violations_of
from kvspec.oracles.situations import stateful_situation
from kvspec.tools import fuzz_db, interrupts
from kvspec.tools import fuzz_targets as ft
from kvspec.tools import fuzz_targets_checks as ftc
from kvspec.tools import progress as quiet_switch
from kvspec.tools.fuzz_targets import REACHED
from kvspec.tools.fuzz_workers import run_workers
from kvspec.tools.inputs import at_least, finite, writable_directory
from kvspec.tools.replay import check_command

DEFAULT_DB = PROJECT_ROOT / ".hypothesis" / "kvspec-fuzz"
TARGET_NAMES = finds.TARGETS
PROPERTIES = {**ft.PROPERTIES, **ftc.PROPERTIES}  # every target but the stateful machine
FIRST_ROUND_EXAMPLES = {"core lookups": 400, "Mooncake lookups": 400, "grouping": 200, "stateful": 5,
                        **{name: 50 for name in ftc.PROPERTIES}}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise TargetError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvspec fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="the campaign's time budget")
    parser.add_argument("--db", default=str(DEFAULT_DB),
                        help=f"Hypothesis's example database: a directory or redis://host:port (default {DEFAULT_DB})")
    parser.add_argument("--workers", type=int, default=1, help="campaign processes sharing the database (default 1)")
    parser.add_argument("--finds", type=Path, default=None, help="where finds are saved (default finds/ or KVSPEC_FINDS)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--vllm", metavar="VERSION", help="a pinned release (default: the first supported)")
    target.add_argument("--vllm-src", metavar="PATH", help="a local vLLM checkout")
    parser.add_argument("--inject", metavar="VARIANT", action="append", default=[],
                        help="re-introduce a known vLLM bug in memory first (see kvspec variants)")
    parser.add_argument("--seed", type=int, default=None, help="the campaign's seed (default: random, printed)")
    parser.add_argument("--targets", default=",".join(TARGET_NAMES),
                        help=f"comma-separated, of: {', '.join(TARGET_NAMES)}")
    parser.add_argument("--round-seconds", type=float, default=20.0, help="about how long one round runs (default 20)")
    parser.add_argument("--max-finds", type=int, default=None,
                        help="stop once this many new finds are saved (each worker its own; default: the whole budget)")
    return parser


class Progress:
    """One status line, rewritten in place on a terminal, else printed every ``every`` seconds."""

    def __init__(self, minutes: float, every: float = 15.0):
        self.started, self.budget, self.every = time.monotonic(), minutes * 60, every
        self.examples, self.finds, self.last, self.target = 0, 0, 0.0, ""
        self.tty = sys.stderr.isatty()

    def tick(self, target: str) -> None:
        self.examples += 1
        self.target = target
        now = time.monotonic()
        if not quiet_switch.QUIET and now - self.last >= (0.5 if self.tty else self.every):
            self.last = now
            self.show()

    def line(self) -> str:

        elapsed = time.monotonic() - self.started
        clock = f"{int(elapsed // 60)}:{int(elapsed % 60):02d}/{int(self.budget // 60)}:{int(self.budget % 60):02d}"
        return (f"[{clock}] {self.examples:,} examples, {len(REACHED)} situations reached, "
                f"{self.finds} finds; now {self.target}")

    def show(self, final: bool = False) -> None:
        if self.tty and not final:
            print("\r" + self.line().ljust(100), end="", file=sys.stderr, flush=True)
        else:
            print(("\r" if self.tty else "") + self.line(), file=sys.stderr, flush=True)

    @property
    def newline(self) -> str:
        """What ends the status line before another line is printed."""
        return "\n" if self.tty else ""

    @property
    def remaining(self) -> float:
        return self.budget - (time.monotonic() - self.started)


def _failure_key(target: str, exc: BaseException) -> tuple[str, str, str]:

    if target in ("core lookups", "Mooncake lookups"):
        return ft.lookup_key("core" if target == "core lookups" else "mooncake", ft.LAST[target])
    if target == "grouping":
        return ft.grouping_key(ft.LAST["grouping"])
    if target in ftc.PROPERTIES:
        return ftc.key(target, ft.LAST[target])
    invariant, message = most_severe(violations_of(exc))
    config = ft.LAST["stateful"]
    return invariant, stateful_situation(config.groups, config.eagle), message


def _find(target: str, exc: BaseException, key, context: dict) -> dict:

    invariant, situation, message = key
    find = {"target": target, "invariant": invariant, "situation": situation, "message": message, **context,
            "found_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if target in ("core lookups", "Mooncake lookups"):
        case, path = ft.LAST[target], "core" if target == "core lookups" else "mooncake"

        try:
            hit = (vllm_coordinator if path == "core" else vllm_mooncake)(ft.adapter(), *case)
        except Exception:  # noqa: BLE001
            hit = None
        find.update(example=codec.encode(case), regression_test=lookup_test(path, case, hit, ft.adapter().rules))
    elif target == "grouping":
        model = ft.LAST["grouping"]
        find.update(example=codec.encode(model), regression_test=grouping_test(model, rules=ft.adapter().rules))
    elif target in ftc.PROPERTIES:  # its check prints a vLLM test when it fails; a find has none yet
        find.update(example=codec.encode(ft.LAST[target]), regression_test=None)
    else:
        notes = [line for note in getattr(exc, "__notes__", []) for line in note.splitlines()]
        find.update(program=notes[: notes.index("Explanation:")] if "Explanation:" in notes else notes,
                    regression_test=None)
    return find


def _round(target: str, examples: int, seed: int, db: ExampleDatabase) -> tuple[BaseException | None, Path | None]:
    """One Hypothesis run of ``target``; the failure (already shrunk) and, for the stateful
    machine, a database holding just this round's examples."""

    common = dict(deadline=None, report_multiple_bugs=False, suppress_health_check=list(hypothesis.HealthCheck),
                  max_examples=examples)
    round_db = None
    try:
        if target == "stateful":
            round_db = interrupts.temporary_directory(Path(tempfile.mkdtemp(prefix="kvspec-fuzz-round-")))
            database = MultiplexedDatabase(db, DirectoryBasedExampleDatabase(str(round_db)))
            machine = hypothesis.seed(seed)(ft.campaign_machine())
            machine.TestCase.settings = hypothesis.settings(database=database, stateful_step_count=ft.STATEFUL_STEPS, **common)
            machine.TestCase().runTest()
        else:
            prop, strategy = PROPERTIES[target]
            test = hypothesis.given(strategy)(prop)
            # settings outside seed: hypothesis.seed turns off the database of the settings it
            # wraps, and then no round would save its failures or replay the other workers'.
            hypothesis.settings(database=db, **common)(hypothesis.seed(seed)(test))()
    except Exception as exc:  # noqa: BLE001 - a failure is a find
        return exc, round_db
    if round_db is not None:
        shutil.rmtree(round_db, ignore_errors=True)
        interrupts.release_directory(round_db)
    return None, None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)

    if unknown := [name for name in args.inject if name not in VARIANTS]:
        raise TargetError(f"unknown variant {unknown[0]!r} (see `kvspec variants`)")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if bad := [t for t in targets if t not in TARGET_NAMES]:
        raise TargetError(f"unknown target {bad[0]!r} (targets: {', '.join(TARGET_NAMES)})")
    finite("--minutes", args.minutes)
    finite("--round-seconds", args.round_seconds)
    at_least("--workers", args.workers, 1)
    if args.max_finds is not None:
        at_least("--max-finds", args.max_finds, 1)
    fuzz_db.checked("--db", args.db)  # a Redis server that does not answer: one line, before vLLM
    finds_dir = writable_directory("--finds" if args.finds else "finds", (args.finds or finds.finds_home()).absolute())
    saved = finds.load(finds_dir)  # a corrupt find is named before vLLM is imported
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    target = resolve(args.vllm, args.vllm_src)
    if args.workers > 1:
        return run_workers(argv, args.workers, seed, finds_dir)
    database = fuzz_db.database(args.db)

    adapter = VllmAdapter(target)
    ft.use(adapter, {(f["invariant"], f["situation"]) for f in saved})
    print(f"kvspec fuzz: {target.label}, seed {seed}, {args.minutes:g} minutes, database {args.db}, "
          f"finds in {finds_dir} ({len(saved)} known)" + (f", injected: {', '.join(args.inject)}" if args.inject else ""),
          file=sys.stderr, flush=True)
    progress = Progress(args.minutes)
    ft.OBSERVERS.append(progress.tick)
    rng, budget, new = random.Random(seed), dict(FIRST_ROUND_EXAMPLES), []
    context = {"found_on": target.label, "injected": args.inject, "campaign_seed": seed}
    enough = (lambda: len(new) >= args.max_finds) if args.max_finds else (lambda: False)
    with applied(adapter, args.inject):
        while progress.remaining > 0 and not enough():
            for name in targets:
                if progress.remaining <= 0 or enough():
                    break
                started, before = time.monotonic(), progress.examples
                ft.KNOWN.update((f["invariant"], f["situation"]) for f in finds.load(finds_dir))  # other workers'
                exc, round_db = _round(name, budget[name], rng.randrange(2**32), database)
                took, ran = time.monotonic() - started, max(1, progress.examples - before)
                if exc is None:  # size the next round of this target to the round length
                    per_example = took / ran
                    fit = min(args.round_seconds, max(1.0, progress.remaining)) / max(per_example, 1e-4)
                    budget[name] = max(10, min(int(fit), 20 * budget[name]))
                    continue
                key = _failure_key(name, exc)
                if key[:2] in ft.KNOWN:
                    continue
                if not key[2]:  # nothing breaks when the shrunk input is run again: not a find
                    first = str(exc).splitlines()[0] if str(exc) else ""
                    print(f"{progress.newline}unreliable failure of {name}, not saved: {type(exc).__name__}: {first[:300]}",
                          file=sys.stderr, flush=True)
                    continue
                find = _find(name, exc, key, context)
                path = finds.claim(finds_dir, find)
                ft.KNOWN.add(key[:2])
                if path is None:  # another worker filed it first
                    if round_db is not None:
                        shutil.rmtree(round_db, ignore_errors=True)
                        interrupts.release_directory(round_db)
                    continue
                if round_db is not None:
                    shutil.copytree(round_db, path.with_suffix(".db"), dirs_exist_ok=True)
                    shutil.rmtree(round_db, ignore_errors=True)
                    interrupts.release_directory(round_db)
                new.append(path)
                progress.finds += 1
                print(f"{progress.newline}find: {key[0]} ({key[1]}): {key[2][:200]}\n  saved {path}", file=sys.stderr, flush=True)
    progress.show(final=True)
    replay = check_command(target, seed=0, checks=["saved finds"], inject=args.inject, finds=finds_dir)
    print(f"kvspec fuzz: {len(new)} new finds" + "".join(f"\n  {p}" for p in new)
          + (f"\nreplay them with: {replay}" if new else ""))
    return 1 if new else 0
