"""``kvspec review --base A --head B``: run one seeded workload on two vLLMs and report what the
head changes: invariant violations new in head, fixed in head or unchanged, behavioural deltas
that break nothing (grouped by situation, with counts, tokens gained or lost and one minimal
example each), and a ready-to-paste vLLM test for every new violation.

A side is a supported release (``0.33.0``) or a checkout's path. The workload (model shapes,
prefix-cache lookups, operation sequences on a live KVCacheManager) is drawn here, once, with
the gate's own strategies, and written as plain data; each side evaluates it in its own
process (kvspec/tools/review_worker.py), because two vLLMs cannot share one and because Hypothesis's
draws would differ with the vLLM under them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, Phase, given

from kvspec.draws import codec
from kvspec.draws.lookups import lookups
from kvspec.draws.models import models
from kvspec.draws.real_models import REAL_MODELS
from kvspec.gate.files import ensure_writable, forget_previous, write_atomically
from kvspec.gate.lookups import chunked_local_preconditions_hold
from kvspec.gate.options import QUICK_SCALE
from kvspec.gate.scenarios import SEED_GROUPS, SEED_MAX_LENGTH, SEED_STATE
from kvspec.impl.target import INSTALLED, Target, TargetError, resolve, supported_versions
from kvspec.spec.setting import LookupSetting
from kvspec.tools import interrupts
from kvspec.tools.inputs import finite
from kvspec.tools.programs import programs
from kvspec.tools.review_git import Revisions, revisions, worktrees
from kvspec.tools.review_markdown import markdown
from kvspec.tools.review_report import compare

# Inputs per category at --scale 1: about two minutes per side on a 2-core machine.
WORKLOAD = {"models": 2000, "lookups": 6000, "programs": 400}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise TargetError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvspec review", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True,
                        help="a supported release (e.g. 0.33.0) or a vLLM checkout's path; with --repo, a git ref")
    parser.add_argument("--head", required=True,
                        help="the vLLM under review: a release or a checkout's path; with --repo, a git ref")
    parser.add_argument("--repo", metavar="PATH",
                        help="a vLLM git checkout: --base and --head are its refs, each checked out in a worktree")
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload (default 0)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a twentieth of the default workload")
    size.add_argument("--scale", type=float, default=1.0, help="multiply the default workload (default 1)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    return parser


def side(spec: str, flag: str = "--head") -> Target:
    """A release when ``spec`` names a supported version, else a checkout's path; refused in
    one line naming ``flag``."""
    try:
        return _side(spec)
    except TargetError as exc:
        reason = str(exc).removeprefix(f"--vllm-src {spec}").removeprefix(f"--vllm-src {Path(spec)}").lstrip(": ")
        raise TargetError(f"{flag} {spec}: {reason}") from None


def _side(spec: str) -> Target:
    if spec in supported_versions() or spec == INSTALLED:
        return resolve(spec, None)
    path = Path(spec)
    if (path / ".kvspec-complete").is_file() and path.name in supported_versions():
        return resolve(path.name, None)  # a release tree set-up unpacked: the release itself
    if not Path(spec).exists() and spec[:1].isdigit() and "/" not in spec:
        return resolve(spec, None)  # refused in one line: unsupported version
    return resolve(None, spec)


def _env(target: Target) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC")}
    if target.is_checkout:
        env["KVSPEC_VLLM_SRC"] = str(target.root)
    else:
        env["KVSPEC_VLLM"] = INSTALLED if target.installed else target.version
    return env


# ----------------------------------------------------------------------------- the workload
def draw(strategy, count: int, seed: int) -> list:
    """``count`` values of ``strategy``, the same for the same seed (no vLLM involved)."""
    drawn: list = []

    @hypothesis.seed(seed)
    @hypothesis.settings(
        max_examples=count, database=None, deadline=None, phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value):
        drawn.append(value)

    if count:
        collect()
    return drawn


def make_workload(seed: int, scale: float) -> dict:
    """Model shapes (drawn, then the real ones), lookups with the coordinators each may be
    asked (the gate's preconditions decided here) and operation sequences."""

    count = {k: max(1, round(n * scale)) for k, n in WORKLOAD.items()}
    shapes = draw(models(), count["models"], seed) + list(REAL_MODELS.values())
    cases = [dict(case, paths=("core", "mooncake")) for case in seed_lookups()]
    for setting, state, max_length in draw(lookups(), count["lookups"], seed):
        if not chunked_local_preconditions_hold(setting):
            continue  # vLLM asserts against these; not a finding
        unitary_ok = len(setting.groups) > 1 or setting.hash_block_size == setting.groups[0].block_size
        paths = ("core", "mooncake") if unitary_ok else ("mooncake",)
        cases.append({"setting": setting, "state": state, "max_length": max_length, "paths": paths})
    return {
        "seed": seed,
        "models": shapes,
        "real_models": list(REAL_MODELS),
        "lookups": cases,
        "programs": draw(programs(), count["programs"], seed),
    }


def seed_lookups() -> list[dict]:
    """The gate's seed scenario (vLLM #43559 / #48361), EAGLE on and off: the first inputs, and
    the example a report shows when a bug reaches them."""

    return [
        {"name": f"the seed scenario (vLLM #43559), EAGLE {'on' if eagle else 'off'}",
         "setting": LookupSetting(tuple(SEED_GROUPS), SEED_GROUPS[0].block_size, eagle),
         "state": SEED_STATE, "max_length": SEED_MAX_LENGTH}
        for eagle in (True, False)
    ]


# ----------------------------------------------------------------------------- the two sides
def start_workers(base: Target, head: Target, workdir: Path) -> dict:
    """Start both sides (one core each); they import vLLM while the workload is drawn, then
    wait for ``workload.json``."""
    running = {}
    for label, target in (("base", base), ("head", head)):
        out, log = workdir / f"{label}.json", open(workdir / f"{label}.log", "w")
        command = [sys.executable, "-m", "kvspec.tools.review_worker", str(workdir / "workload.json"), str(out), label,
                   str(os.getpid())]
        # Registered: a stopped review ends its workers (kvspec/tools/interrupts.py); a worker
        # whose parent dies otherwise exits by itself (review_worker.py).
        proc = interrupts.spawn(command, env=_env(target), stdout=sys.stderr, stderr=log)
        running[label] = (proc, out, log)
    return running


def collect_quietly(running: dict) -> None:
    for proc, _, log in running.values():
        proc.kill()
        proc.wait()
        interrupts.forget(proc)
        log.close()


def hand_over(workload: dict, workdir: Path) -> None:
    partial = workdir / "workload.json.partial"
    partial.write_text(json.dumps(codec.encode(workload)))
    partial.rename(workdir / "workload.json")  # atomically: a worker never reads half of it


def collect(running: dict, workdir: Path) -> tuple[dict, dict]:
    """Both sides' results; a side that failed stops the other and is one line of error."""
    results = {}
    try:
        for label, (proc, out, log) in running.items():
            code = proc.wait()
            log.close()
            if code != 0:
                tail = [line for line in (workdir / f"{label}.log").read_text().splitlines() if line.strip()]
                raise TargetError(f"the {label} side failed: {tail[-1] if tail else f'exit {code}'}")
            results[label] = json.loads(out.read_text())
    finally:
        for proc, _, _ in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            interrupts.forget(proc)
    return results["base"], results["head"]


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    for flag in ("out", "json"):
        path = getattr(args, flag)
        if path is not None:
            ensure_writable(path, f"--{flag} {path}")
    scale = QUICK_SCALE if args.quick else finite("--scale", args.scale)
    if args.repo is None:
        return _review(args, scale, side(args.base, "--base"), side(args.head, "--head"))
    revs = revisions(args.repo, args.base, args.head)  # a missing ref: one line, before any vLLM
    with worktrees(revs) as trees:
        return _review(args, scale, side(str(trees["base"]), "--base"), side(str(trees["head"]), "--head"), revs)


def _review(args, scale: float, base: Target, head: Target, revs: Revisions | None = None) -> int:
    forget_previous(args.out)
    forget_previous(args.json)  # until this review finishes, no report at all
    started = time.monotonic()
    sides = (f"base {revs.base.describe()}, head {revs.head.describe()}" if revs
             else f"base {base.label}, head {head.label}")
    print(f"kvspec review: {sides}, seed {args.seed}, scale {scale:g}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kvspec-review-") as tmp:
        interrupts.temporary_directory(Path(tmp))
        running = start_workers(base, head, Path(tmp))
        try:
            workload = make_workload(args.seed, scale)
        except BaseException:
            collect_quietly(running)
            raise
        sizes = (f"{len(workload['models'])} model shapes, {len(workload['lookups'])} lookups, "
                 f"{len(workload['programs'])} operation sequences")
        print(f"  workload drawn in {time.monotonic() - started:.0f} s: {sizes}", file=sys.stderr, flush=True)
        hand_over(workload, Path(tmp))
        base_results, head_results = collect(running, Path(tmp))
        interrupts.release_directory(Path(tmp))

    report = compare(workload, base_results, head_results)
    repo = f" --repo {revs.repo}" if revs else ""
    report.update(seed=args.seed, scale=scale, seconds=round(time.monotonic() - started, 1),
                  command=f"kvspec review{repo} --base {args.base} --head {args.head} --seed {args.seed}"
                  + (" --quick" if args.quick else f" --scale {scale:g}" if scale != 1 else ""))
    if revs:  # the sides are the commits, not the temporary worktrees they were checked out in
        report["git"] = revs.header()
        report["base"]["label"], report["head"]["label"] = revs.base.describe(), revs.head.describe()
    text = markdown(report)
    print(text)
    if args.out is not None:
        write_atomically(args.out, text, f"--out {args.out}")
    if args.json is not None:
        write_atomically(args.json, json.dumps(report, indent=2, default=str) + "\n", f"--json {args.json}")
    print(f"kvspec review: {report['summary']}, in {report['seconds']:.0f} s", file=sys.stderr)
    print(f"replay: {report['command']}", file=sys.stderr)
    if report["new_violations"]:
        return 1
    return 3 if report["cannot_drive"] else 0  # as `kvspec check`: kvspec could not drive a side
