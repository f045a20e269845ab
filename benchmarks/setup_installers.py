"""Cold set-up with pip against cold set-up with uv, side by side in one run (issue 17).

Each installer gets its own scratch venv, release trees and EMPTY download caches (a new
PIP_CACHE_DIR and UV_CACHE_DIR), so each pays what a fresh machine pays; the two run one
after the other, never together. Then a warm run of each (nothing to do), and a comparison of
what they installed: the venvs' distributions (name==version, kvspec's own editable install
aside) and the release trees' files (path and size, dist-info aside).

    python3 benchmarks/setup_installers.py                  # pip, then uv; every release
    python3 benchmarks/setup_installers.py --order uv,pip   # the other order
    python3 benchmarks/setup_installers.py --no-write       # print only

Last, `make check`'s own set-up from nothing with the installer that won: the environment and the
pinned release alone (the Makefile's check target), with empty caches again. That is the cold
set-up a new user of the gate pays; `make test` and `make matrix` add the other releases.

Steps, read off the lines scripts/setup.sh prints as they come: "environment" is from the
start to its "environment ready" line (venv, the installer's bootstrap, torch and the rest);
"vLLM trees" is what the releases add after that (they are fetched while the environment
installs, then import-checked one per core); "total" is the whole run. Writes
benchmarks/results/setup_installers.{md,json}. Timings are figures, never assertions.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts/setup.sh"
RESULTS = ROOT / "benchmarks/results"
LIST_DISTS = """
import importlib.metadata as m
names = sorted({f"{d.metadata['Name'].lower().replace('_', '-')}=={d.version}" for d in m.distributions()})
print("\\n".join(n for n in names if not n.startswith("kvspec==")))
"""


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, every process)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_for_a_quiet_machine(limit: float = 180.0) -> float:
    """Wait (up to `limit` s) until other work uses under a third of a core; return what it used."""
    deadline = time.monotonic() + limit
    while True:
        before = machine_busy()
        time.sleep(5)
        busy = (machine_busy() - before) / 5
        if busy < 0.33 or time.monotonic() > deadline:
            return round(busy, 2)


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_setup(installer: str, scratch: Path, label: str, releases: tuple[str, ...] = ()) -> dict:
    env = dict(os.environ)
    env.pop("PIP_NO_CACHE_DIR", None)
    env.update(
        KVSPEC_INSTALLER=installer,
        KVSPEC_VENV=str(scratch / "venv"),
        KVSPEC_VLLM_HOME=str(scratch / "vllm"),
        PIP_CACHE_DIR=str(scratch / "pip-cache"),
        UV_CACHE_DIR=str(scratch / "uv-cache"),
    )
    quiet = wait_for_a_quiet_machine() if label == "cold" else None
    own_before, busy_before = own_cpu(), machine_busy()
    started = time.perf_counter()
    env_at = busy_at_env = None
    lines = []
    proc = subprocess.Popen(["bash", str(SETUP), *releases], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        at = time.perf_counter() - started
        lines.append((round(at, 2), line.rstrip("\n")))
        print(f"  [{installer} {label} {at:6.1f} s] {line}", end="", file=sys.stderr, flush=True)
        if "environment ready" in line or "environment up to date" in line:
            env_at, busy_at_env = at, machine_busy()
    rc = proc.wait()
    total = time.perf_counter() - started
    busy_after, own = machine_busy(), own_cpu() - own_before
    if rc:
        raise SystemExit(f"setup_installers: scripts/setup.sh with {installer} exited {rc}")
    return {
        "environment_s": round(env_at, 1) if env_at is not None else None,
        "vllm_trees_s": round(total - env_at, 1) if env_at is not None else None,
        "total_s": round(total, 1),
        "cores_busy_before": quiet,
        "cpu_s_own": round(own, 1),
        "cpu_s_machine_environment": round(busy_at_env - busy_before, 1) if env_at is not None else None,
        "cpu_s_machine_vllm_trees": round(busy_after - busy_at_env, 1) if env_at is not None else None,
        "cpu_s_others": round(max(0.0, busy_after - busy_before - own), 1),
        "output": lines,
    }


def distributions(venv: Path) -> list[str]:
    out = subprocess.run([str(venv / "bin/python"), "-c", LIST_DISTS], capture_output=True,
                         text=True, check=True).stdout
    return out.split()


def tree_files(trees: Path) -> set[tuple[str, int]]:
    files = set()
    for path in trees.rglob("*"):
        rel = path.relative_to(trees)
        if path.is_file() and "__pycache__" not in rel.parts \
                and not any(p.endswith(".dist-info") for p in rel.parts):
            files.add((str(rel), path.stat().st_size))
    return files


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().split("\n")[0]
    except OSError:
        return "not found"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", default="pip,uv", help="installers, in the order run")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders")
    args = parser.parse_args()
    installers = args.order.split(",")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "scripts/setup.sh",
                            "requirements", "pyproject.toml"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    runs, dists, files = {}, {}, {}
    scratch_root = Path(tempfile.mkdtemp(prefix="kvspec-installers-", dir="/tmp"))
    try:
        for installer in installers:
            scratch = scratch_root / installer
            scratch.mkdir()
            print(f"setup_installers: cold set-up with {installer} in {scratch}", file=sys.stderr)
            cold = run_setup(installer, scratch, "cold")
            warm = run_setup(installer, scratch, "warm")
            dists[installer] = distributions(scratch / "venv")
            files[installer] = tree_files(scratch / "vllm")
            caches = {name: int(subprocess.run(["du", "-sm", str(scratch / name)], capture_output=True,
                                               text=True).stdout.split()[0] or 0)
                      if (scratch / name).exists() else 0 for name in ("pip-cache", "uv-cache")}
            runs[installer] = {"cold": cold, "warm_total_s": warm["total_s"], "cache_mb": caches}
            if not args.keep:
                shutil.rmtree(scratch)
        releases = [v for v in (ROOT / "impl/vllm-versions.txt").read_text().split() if v[0].isdigit()]
        winner = min(installers, key=lambda i: runs[i]["cold"]["total_s"])
        scratch = scratch_root / "gate"
        scratch.mkdir()
        print(f"setup_installers: make check's set-up (vLLM {releases[0]} alone) with {winner} in {scratch}",
              file=sys.stderr)
        gate = run_setup(winner, scratch, "cold", (releases[0],))
        gate.update(installer=winner, release=releases[0])
    finally:
        if not args.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)

    first, *others = installers
    same_packages = all(dists[i] == dists[first] for i in others)
    same_trees = all(files[i] == files[first] for i in others)
    package_diff = {i: {"only_" + first: sorted(set(dists[first]) - set(dists[i])),
                        "only_" + i: sorted(set(dists[i]) - set(dists[first]))} for i in others}
    uv_pin = next((line for line in (ROOT / "requirements/constraints.txt").read_text().split("\n")
                   if line.startswith("uv==")), "")
    machine = {
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "pip": tool_version([sys.executable, "-m", "pip", "--version"]).split(" from ")[0],
        "uv": uv_pin,
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
    }
    command = "python3 benchmarks/setup_installers.py " + " ".join(sys.argv[1:])
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")

    table = ["| step | " + " | ".join(f"{i} (s)" for i in installers) + " |",
             "|---|" + "---:|" * len(installers)]
    for key, name in (("environment_s", "environment (venv, installer, torch, the rest, kvspec)"),
                      ("vllm_trees_s", f"vLLM trees (what the {len(releases)} releases add after the environment)"),
                      ("total_s", "**total, cold**")):
        table.append(f"| {name} | " + " | ".join(f"{runs[i]['cold'][key]}" for i in installers) + " |")
    table.append("| warm run (nothing to do) | "
                 + " | ".join(f"{runs[i]['warm_total_s']}" for i in installers) + " |")
    for key, name in (("cpu_s_own", "CPU seconds the cold set-up used (user + sys, all its processes)"),
                      ("cpu_s_machine_environment", "CPU seconds the machine spent, environment step"),
                      ("cpu_s_machine_vllm_trees", "CPU seconds the machine spent, vLLM trees step"),
                      ("cpu_s_others", "CPU seconds of other work on the machine meanwhile"),
                      ("cores_busy_before", "cores busy with other work just before (5 s sample)")):
        table.append(f"| {name} | " + " | ".join(f"{runs[i]['cold'][key]}" for i in installers) + " |")
    table.append("| download cache after the cold run (MB, pip / uv) | " + " | ".join(
        f"{runs[i]['cache_mb']['pip-cache']} / {runs[i]['cache_mb']['uv-cache']}" for i in installers) + " |")
    verdict = [f"make check's own set-up from nothing (the environment and vLLM {gate['release']} alone, "
               f"{gate['installer']}, empty caches): {gate['total_s']} s, environment {gate['environment_s']} s, "
               f"{gate['cpu_s_own']} CPU-s",
               f"same packages: {'yes' if same_packages else 'no'} "
               f"({len(dists[first])} distributions, kvspec's own editable install aside)",
               f"same vLLM trees: {'yes' if same_trees else 'no'} "
               f"({len(files[first])} files, path and size, dist-info aside)"]
    cores = os.cpu_count() or 1
    verdict.append("CPU floor, were the set-up's own CPU seconds spread evenly over this machine's "
                   f"{cores} idle cores: " + ", ".join(
                       f"{i} {runs[i]['cold']['cpu_s_own'] / cores:.0f} s" for i in installers))
    if not same_packages:
        verdict.append(f"package differences: {json.dumps(package_diff)}")
    print("\n".join(table))
    print()
    print("\n".join(verdict))

    if args.no_write:
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"date": date, "commit": commit + (" (with uncommitted set-up changes)" if dirty else ""),
            "command": command, "machine": machine, "installers": installers, "runs": runs,
            "same_packages": same_packages, "same_trees": same_trees, "package_diff": package_diff,
            "gate_setup": gate, "distributions": dists[first]}
    (RESULTS / "setup_installers.json").write_text(json.dumps(data, indent=1) + "\n")
    md = [
        "# Cold set-up: pip against uv (issue 17)",
        "",
        f"Measured {date} at commit {data['commit']}, with `{command}`, on {machine['platform']}, "
        f"{machine['cores']} cores (shared with other work: its CPU seconds are in the table), Python {machine['python']}, "
        f"{machine['pip']}, {machine['uv']}, PYTHONDONTWRITEBYTECODE={machine['PYTHONDONTWRITEBYTECODE'] or 'unset'}.",
        "Each installer ran `scripts/setup.sh` (KVSPEC_INSTALLER=pip or uv) into its own new venv and "
        "release trees under /tmp, with empty download caches (new PIP_CACHE_DIR and UV_CACHE_DIR), "
        "one after the other; then once more (warm).",
        "",
        *table,
        "",
        *[f"- {line}" for line in verdict],
        "",
    ]
    (RESULTS / "setup_installers.md").write_text("\n".join(md))
    print(f"\nwrote {RESULTS / 'setup_installers.md'} and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
