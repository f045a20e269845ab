"""The project's headline figures in one Markdown document and one JSON file
(benchmarks/results/figures.md, figures.json): a summary table first, then the time per check,
the zoo's time to detection per entry and the mutation survivors.

Measured here, side by side in one run, each release in its own process one after the other:
``kvspec check --vllm V --json F`` (wall and CPU seconds per check and in all; lookups per second
of the two lookup checks, their judged lookups over their seconds; proof time, the proofs check)
and stateful steps per second on a real KVCacheManager with its judges against the reference alone
(benchmarks/stateful_speed.py --json) and against vLLM's floor (benchmarks/stateful_floor.py
--json). Collected from the latest results, because they take an hour: time to detection per
zoo entry (results/zoo_detection.json; --rerun-zoo runs benchmarks/zoo_detection.py first) and
the mutation score with its survivors (results/mutation_score-<version>.json, each version
present).

    .venv/bin/python benchmarks/figures.py [--versions 0.34.0 0.33.0] [--seed 0] [--examples 100]
                                           [--repeats 3] [--quick] [--reuse] [--rerun-zoo] [--results DIR]

--reuse measures nothing: the measured figures come from the last figures.json, the rest is
collected again (cheap). --quick is a smoke run (`kvspec check --quick`, no proofs): not figures.
"""

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timezone
from pathlib import Path

from kvspec.impl.target import supported_versions

BENCHMARKS = Path(__file__).resolve().parent
KVSPEC = Path(sys.executable).parent / "kvspec"
# What each check's ``covered`` line says it judged, for a per-second rate.
JUDGED = {
    "prefix-cache lookups": r"(\d+) core \+ (\d+) Mooncake lookups",
    "offloading connector lookups": r"^(\d+) lookups",
    "stateful KVCacheManager": r"(\d+) steps",
}


class Missing(Exception):
    """A results file the document needs is absent or unreadable (one line, exit 2)."""


def load(path: Path, how_to_make: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise Missing(f"{path} is missing; {how_to_make}") from None
    except json.JSONDecodeError as exc:
        raise Missing(f"{path} is not JSON ({exc.msg} at line {exc.lineno}); {how_to_make}") from None


def timed(command: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """The finished process, its wall seconds and its CPU seconds (user + system, children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def judged(check: dict) -> int:
    match = re.search(JUDGED[check["check"]], check["covered"])
    return sum(int(n) for n in match.groups()) if match else 0


def measure_gate(version: str, seed: int, quick: bool, scratch: Path) -> dict:
    out = scratch / f"check-{version}.json"
    command = [str(KVSPEC), "check", "--vllm", version, "--seed", str(seed), "--json", str(out)]
    proc, wall, cpu = timed(command + (["--quick"] if quick else []))
    if proc.returncode not in (0, 1) or not out.exists():
        raise Missing(f"kvspec check --vllm {version} exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    checks = json.loads(out.read_text())["checks"]
    rates = {c["check"]: round(judged(c) / c["seconds"], 1) for c in checks if c["check"] in JUDGED and c["seconds"]}
    return {
        "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "ok": proc.returncode == 0,
        "failed": [c["check"] for c in checks if c["verdict"] != "holds"],
        "check_seconds": {c["check"]: c["seconds"] for c in checks},
        "judged_per_second": rates,
    }  # fmt: skip


def measure_stateful(version: str, examples: int, repeats: int, scratch: Path) -> dict:
    out = scratch / f"stateful-{version}.json"
    command = [sys.executable, str(BENCHMARKS / "stateful_speed.py"), "--vllm", version,
               "--examples", str(examples), "--repeats", str(repeats), "--json", str(out)]  # fmt: skip
    proc, _, _ = timed(command)
    if proc.returncode != 0 or not out.exists():
        raise Missing(f"stateful_speed.py --vllm {version} exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    figures = json.loads(out.read_text())
    floor = scratch / f"floor-{version}.json"
    command = [sys.executable, str(BENCHMARKS / "stateful_floor.py"), "--vllm", version,
               "--repeats", str(repeats), "--json", str(floor)]  # fmt: skip
    proc, _, _ = timed(command)
    if proc.returncode != 0 or not floor.exists():
        raise Missing(f"stateful_floor.py --vllm {version} exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    return {**figures, "floor": json.loads(floor.read_text())}


def source() -> str:
    """The kvspec code measured: its commit, and whether the working tree differs from it."""

    def git(*argv) -> str:
        command = ["git", "-C", str(BENCHMARKS.parent), *argv]
        return subprocess.run(command, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "not a git checkout"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "kvspec", "impl", "spec", "reference", "proofs")
    return f"commit {commit}" + (" with uncommitted edits" if dirty else "")


def measure(args) -> dict:
    """Each release's gate, then its stateful speed, release after release."""
    gate, stateful = {}, {}
    with tempfile.TemporaryDirectory(prefix="kvspec-figures-") as scratch:
        for version in args.versions:
            print(f"measuring vLLM {version}: kvspec check ...", file=sys.stderr, flush=True)
            gate[version] = measure_gate(version, args.seed, args.quick, Path(scratch))
            print(f"measuring vLLM {version}: stateful_speed.py, stateful_floor.py ...", file=sys.stderr, flush=True)
            stateful[version] = measure_stateful(version, args.examples, args.repeats, Path(scratch))
    return {"date": str(date.today()), "source": source(), "seed": args.seed, "versions": args.versions,
            "quick": args.quick, "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "gate": gate, "stateful": stateful}  # fmt: skip


def collect_zoo(results: Path) -> dict:
    zoo = load(results / "zoo_detection.json", "run benchmarks/zoo_detection.py (or figures.py --rerun-zoo)")
    entries = {
        version: [
            {key: e[key] for key in ("entry", "detected", "fired", "median_seconds", "median_cpu_seconds",
                                     "missed_seeds")}  # fmt: skip
            | {"control_failures": sorted({r["control_failure"] for r in e["runs"] if r["control_failure"]})}
            for e in report["entries"]
        ]
        for version, report in zoo["reports"].items()
    }
    missed = {v: report["missed"] for v, report in zoo["reports"].items()}
    return {"date": zoo["date"], "source": zoo.get("source", "not recorded"), "seeds": zoo["seeds"],
            "entries": entries, "missed": missed, "table": zoo["table"]}  # fmt: skip


def recorded_at(path: Path) -> str:
    """When a results file was recorded: its last commit, else (not committed as it is) its file
    time. A clone's file times are its checkout's, not the run's."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args, "--", path.name], cwd=path.parent, capture_output=True, text=True,
                              check=False).stdout.strip()

    committed = git("log", "-1", "--format=%ct")
    when = int(committed) if committed and not git("status", "--porcelain") else path.stat().st_mtime
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def collect_mutation(results: Path) -> dict:
    # The 160-mutant sample of every target, one per release; not the runs focused on a few
    # functions (mutation_score-<focus>-<version>.json), which would stand in for it.
    found = sorted(p for p in results.glob("mutation_score-*.json") if re.fullmatch(r"mutation_score-[\d.]+\.json", p.name))
    if not found:
        raise Missing(f"no {results}/mutation_score-<version>.json; run benchmarks/mutation_score.py")
    scores = {}
    for path in found:
        report = load(path, "run benchmarks/mutation_score.py again")
        mutants = report["mutants"]
        survivors = [m for m in mutants if m["status"] == "survived"]
        scores[report["target"]["version"]] = {
            "file": path.name, "modified": recorded_at(path),
            "seed": report["seed"], "limit": report["limit"],
            "mutants": sum(m["status"] != "stillborn" for m in mutants),
            "killed": sum(m["status"] in ("killed", "timeout") for m in mutants),
            "equivalent": sum(m["verdict"] == "equivalent" for m in survivors),
            # kvspec's own one-line error (e.g. known-divergences.toml edited under a long run) kills
            # a mutant as a crash would, but detects nothing
            "killed_by_kvspec_error": sum("TargetError" in m["detail"] for m in mutants),
            "kill_rate_non_equivalent": report["kill_rate_non_equivalent"],
            "kill_rate_modelled": report["kill_rate_modelled"],
            "survivors": [{k: m[k] for k in ("id", "original", "mutated", "verdict", "outside", "reason")}
                          for m in survivors],
        }  # fmt: skip
    return scores


def cells(values) -> str:
    return " | ".join(values)


def summary_rows(fig: dict) -> list[str]:
    versions, gate, stateful = fig["versions"], fig["measured"]["gate"], fig["measured"]["stateful"]
    rows = [f"| figure | {cells(f'vLLM {v}' for v in versions)} |", "|---|" + "---:|" * len(versions)]

    def row(name, value):
        rows.append(f"| {name} | {cells(value(v) if v in gate else '-' for v in versions)} |")

    row("`kvspec check`, wall s (CPU s)", lambda v: f"{gate[v]['wall_seconds']:.0f} ({gate[v]['cpu_seconds']:.0f})"
        + ("" if gate[v]["ok"] else f", FAILS: {', '.join(gate[v]['failed'])}"))
    row("proof time (the proofs check: Z3 at the default bound, with vLLM replays), s",
        lambda v: f"{gate[v]['check_seconds']['proofs']:.1f}" if "proofs" in gate[v]["check_seconds"] else "-")
    for check, unit in (("prefix-cache lookups", "lookups/s, core + Mooncake, judged"),
                        ("offloading connector lookups", "lookups/s, offloading connector, judged"),
                        ("stateful KVCacheManager", "stateful steps/s in the gate")):  # fmt: skip
        row(unit, lambda v, check=check: f"{gate[v]['judged_per_second'].get(check, 0):,.0f}")
    row("stateful steps/s, real KVCacheManager judged / reference alone (ratio)",
        lambda v: f"{stateful[v]['vllm_steps_per_second']:,.0f} / {stateful[v]['reference_steps_per_second']:,.0f} "
        f"({stateful[v]['ratio']:.3f})")
    row("stateful steps/s, the gate's check / vLLM's floor, the same calls and nothing else (judged / floor)",
        lambda v: (lambda f: f"{f['judged_steps_per_second']:,.0f} / {f['floor_steps_per_second']:,.0f} "
                   f"({f['judged_over_floor']:.1f}x)")(stateful[v]["floor"]) if "floor" in stateful[v] else "-")
    row("the same, split: the gate's runs less their programs judged without Hypothesis (Hypothesis's share) / "
        "those programs less the floor (the judges', reference's and machine's), in floors",
        lambda v: (lambda f: f"{f['hypothesis_over_floor']:.1f}x / {f['without_hypothesis_over_floor'] - 1:.1f}x")(
            stateful[v]["floor"]) if "hypothesis_over_floor" in stateful[v].get("floor", {}) else "-")
    row("Hypothesis alone, µs per step: a RuleBasedStateMachine of one argument-free empty rule / the gate's rules and "
        "argument draws with empty bodies (against the floor's µs per step)",
        lambda v: (lambda f: " / ".join(f"{us:.0f} ({us / f['floor_microseconds_per_step']:.1f}x)" for us in
                                        f["hypothesis_alone_microseconds_per_step"].values())
                   + f" (floor {f['floor_microseconds_per_step']:.0f})")(stateful[v]["floor"])
        if "hypothesis_alone_microseconds_per_step" in stateful[v].get("floor", {}) else "-")
    zoo = fig["zoo"]
    if all(v in zoo["entries"] for v in versions):
        def detected(v):
            entries = zoo["entries"][v]
            full = sum(e["detected"] == f"{zoo['seeds']}/{zoo['seeds']}" for e in entries)
            odd = {kind: sum(len(e[f"{kind}_seeds"]) for e in entries) for kind in ("missed",)}
            notes = [f"{n} seed runs {kind}" for kind, n in odd.items() if n]
            return f"{full}/{len(entries)}" + (f" ({', '.join(notes)})" if notes else "")

        def seconds_range(v, key):
            times = [e[key] for e in zoo["entries"][v] if e[key] is not None]
            return f"{min(times):.2f} to {max(times):.1f} (median {statistics.median(times):.2f})"

        rows.append(f"| zoo entries detected at every one of {zoo['seeds']} seeds | "
                    f"{cells(detected(v) for v in versions)} |")
        for key, what in (("median_seconds", "wall"), ("median_cpu_seconds", "CPU")):
            rows.append(f"| zoo median {what} s to detection, over entries | "
                        f"{cells(seconds_range(v, key) for v in versions)} |")
    mutation = fig["mutation"]

    def kill_rate(v):
        if v not in mutation:
            return "not run"
        m = mutation[v]
        return (f"{100 * m['kill_rate_non_equivalent']:.1f}% / {100 * m['kill_rate_modelled']:.1f}% ({m['killed']} "
                f"of {m['mutants']} killed; {len(m['survivors'])} survive: {m['equivalent']} equivalent, "
                f"{len(m['survivors']) - m['equivalent']} not)"
                + (f"; {m['killed_by_kvspec_error']} killed by a kvspec error" if m["killed_by_kvspec_error"] else ""))

    rows.append(f"| mutation kill rate, non-equivalent / within the model | {cells(kill_rate(v) for v in versions)} |")
    return rows


def not_detected(zoo: dict) -> list[str]:
    """The missed seeds, and what the unpatched vLLM's own failures were on those entries (a
    check failing alike there detects nothing: kvspec/tools/zoo.py:run_entry)."""
    missed = [f"{v} `{e['entry']}` seeds {e['missed_seeds']}"
              + (f" (unpatched vLLM: {'; '.join(e['control_failures'])[:300]})" if e["control_failures"] else "")
              for v, entries in zoo["entries"].items() for e in entries if e["missed_seeds"]]
    if not missed:
        return [f"Every entry detected at every seed on {', '.join(zoo['entries'])}."]
    return [f"- missed: {', '.join(missed)}"]


def markdown(fig: dict) -> str:
    measured, zoo = fig["measured"], fig["zoo"]
    mutation_dates = "; ".join(f"{v} {m['modified']} (seed {m['seed']}, limit {m['limit']})"
                               for v, m in fig["mutation"].items())  # fmt: skip
    lines = [
        f"# kvspec figures, {fig['date']}",
        "",
        f"Machine: {fig['machine']['cores']} cores ({fig['machine']['platform']} Python), shared; load average after "
        f"measuring {measured['load_average_after']}. Seed {measured['seed']}; vLLM {', '.join(fig['versions'])}.",
        f"Gate and stateful figures measured {measured['date']} on kvspec "
        f"{measured.get('source', 'not recorded')}, side by side in one run"
        + (" (QUICK smoke run: not figures)" if measured["quick"] else "")
        + f"; zoo {zoo['date']} on kvspec {zoo['source']} ({zoo['seeds']} seeds, medians); "
        f"mutation {mutation_dates or 'none'}.",
        "",
        *summary_rows(fig),
        "",
        "## Wall seconds per check (`kvspec check`)",
        "",
        f"| check | {cells(fig['versions'])} |",
        "|---|" + "---:|" * len(fig["versions"]),
    ]
    gate = measured["gate"]
    for check in gate[fig["versions"][0]]["check_seconds"]:
        values = (gate[v]["check_seconds"].get(check) for v in fig["versions"])
        lines.append(f"| {check} | {cells('-' if x is None else f'{x:.2f}' for x in values)} |")
    total = (f"{sum(gate[v]['check_seconds'].values()):.1f}" for v in fig["versions"])
    lines.append(f"| **all checks** | {cells(total)} |")
    lines += ["", f"## Time to detection per zoo entry (median over {zoo['seeds']} seeds; wall / CPU s)", "",
              zoo["table"]]  # fmt: skip
    lines += [""] + not_detected(zoo)
    lines += ["", "## Mutation survivors and their verdicts", "",
              "| vLLM | survivor | mutated to | verdict | reason |", "|---|---|---|---|---|"]  # fmt: skip
    for v, m in fig["mutation"].items():
        for s in m["survivors"]:
            verdict = f"gap (needs {s['outside']})" if s["outside"] else s["verdict"] or "untriaged"
            row = [v, f"`{s['id']}`", f"`{s['mutated']}`", verdict, s["reason"]]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The suite's two releases: an older one's recorded findings fail its checks (stateful on 0.30.0),
    # and stateful_floor.py measures no floor under a check that does not hold.
    parser.add_argument("--versions", nargs="+", default=supported_versions()[:2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=100, help="stateful_speed.py runs per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run of the script, not figures")
    parser.add_argument("--reuse", action="store_true", help="measure nothing; take the last measured figures")
    parser.add_argument("--rerun-zoo", action="store_true", help="run benchmarks/zoo_detection.py first (an hour)")
    parser.add_argument("--results", type=Path, default=BENCHMARKS / "results")
    args = parser.parse_args(argv)
    try:
        if args.rerun_zoo:
            zoo = [sys.executable, str(BENCHMARKS / "zoo_detection.py"), "--versions", *args.versions,
                   "--seed", str(args.seed)]  # fmt: skip
            subprocess.run(zoo, check=False, stdout=subprocess.DEVNULL)
        if args.reuse:
            measured = load(args.results / "figures.json", "run benchmarks/figures.py without --reuse")["measured"]
        else:
            measured = measure(args)
        fig = {
            "date": str(date.today()),
            "machine": {"cores": os.cpu_count(), "platform": f"{platform.machine()}, {platform.python_version()}"},
            "versions": measured["versions"], "measured": measured,
            "zoo": collect_zoo(args.results), "mutation": collect_mutation(args.results),
        }  # fmt: skip
    except Missing as exc:
        print(f"figures: error: {exc}", file=sys.stderr)
        return 2
    text = markdown(fig)
    print(text, end="")
    args.results.mkdir(exist_ok=True)
    (args.results / "figures.md").write_text(text)
    (args.results / "figures.json").write_text(json.dumps(fig, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
