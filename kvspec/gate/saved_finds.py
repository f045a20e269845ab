"""What a fuzzing campaign found, kept as files, and the gate's check that replays them first.

A find is one (invariant, situation): ``<finds>/<slug>.json`` holds the shrunk input as plain
data (kvspec/draws/codec.py), the message, where it was found and, for lookups and groupings, the
ready-to-paste vLLM test (the other gate properties' finds, kvspec/gate/properties.py, carry none yet), also written beside it as ``<slug>.py``. A stateful find also keeps
Hypothesis's failing example in ``<slug>.db/`` (its program is printed in the JSON for people)
and is replayed from there, read-only.

``kvspec check`` replays every saved find against the current target first: a find fails the
gate only if vLLM still breaks the rule on it, so finds committed to the repository are a
regression suite that passes on a fixed vLLM.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from kvspec.draws import codec
from kvspec.gate.files import write_atomically
from kvspec.gate.grouping import conformance_failures
from kvspec.gate.lookups import vllm_coordinator, vllm_mooncake
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.properties import GATE_PROPERTIES, no_new_lookup_divergence, property_key, recorded
from kvspec.gate.result import CheckResult
from kvspec.impl.target import PROJECT_ROOT, TargetError
from kvspec.oracles.lookups import lookup_violations
from kvspec.stateful.campaign import campaign_machine

TARGETS = ("core lookups", "Mooncake lookups", "grouping", *GATE_PROPERTIES, "stateful")
FIELDS = ("target", "invariant", "situation")  # what every find carries (kvspec fuzz writes them)


def finds_home() -> Path:
    """KVSPEC_FINDS, else ``finds/`` in the project."""
    return Path(os.environ.get("KVSPEC_FINDS", PROJECT_ROOT / "finds")).absolute()


def slug(invariant: str, situation: str) -> str:
    words = re.findall(r"[a-z0-9]+", f"{situation} {invariant.split(':')[0]}".lower())
    digest = hashlib.sha256(f"{invariant}\n{situation}".encode()).hexdigest()[:8]
    return "-".join(words[:10]) + "-" + digest


def load(directory: Path | None = None) -> list[dict]:
    """Every saved find, oldest first. A file that is not a find (corrupt JSON, another tool's
    file, a field missing) is refused by its name, before any vLLM is imported."""
    directory = finds_home() if directory is None else directory
    if directory.exists() and not directory.is_dir():
        raise TargetError(f"finds: {directory}: not a directory")
    if not directory.is_dir():
        return []
    finds = []
    for path in sorted(directory.glob("*.json")):
        find = _read(path)
        find["path"] = str(path)
        finds.append(find)
    return sorted(finds, key=lambda f: (f.get("found_at", ""), f["path"]))


def _read(path: Path) -> dict:
    try:
        find = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TargetError(f"finds: {path}: not a readable JSON find ({exc})") from None
    if not isinstance(find, dict):
        raise TargetError(f"finds: {path}: not a find (a JSON object with {', '.join(FIELDS)})")
    missing = [name for name in FIELDS if not isinstance(find.get(name), str)]
    if missing:
        raise TargetError(f"finds: {path}: not a find: no {missing[0]!r} (it needs {', '.join(FIELDS)})")
    if find["target"] not in TARGETS:
        raise TargetError(f"finds: {path}: unknown target {find['target']!r} (one of {', '.join(TARGETS)})")
    if find["target"] != "stateful" and "example" not in find:
        raise TargetError(f"finds: {path}: a {find['target']} find needs its 'example'")
    return find


def save(directory: Path, find: dict) -> Path:
    """Write ``find`` (and its vLLM test) under its slug; returns the JSON's path."""
    directory.mkdir(parents=True, exist_ok=True)
    name = slug(find["invariant"], find["situation"])
    path = directory / f"{name}.json"
    if find.get("regression_test"):  # the test first: a find on disk always has its test
        write_atomically(directory / f"{name}.py", find["regression_test"])
    write_atomically(path, json.dumps(find, indent=2) + "\n")
    return path


def claim(directory: Path, find: dict) -> Path | None:
    """Like ``save``, but only the first of several workers filing the same (invariant,
    situation) saves it: the JSON is linked into place, which fails if it exists (an atomic
    test-and-create, so two workers racing on one bug leave one find). None: already filed."""
    directory.mkdir(parents=True, exist_ok=True)
    name = slug(find["invariant"], find["situation"])
    path = directory / f"{name}.json"
    if path.exists():
        return None
    if find.get("regression_test"):  # the test first: a find on disk always has its test
        write_atomically(directory / f"{name}.py", find["regression_test"])
    draft = directory / f".{name}.{os.getpid()}.draft"
    draft.write_text(json.dumps(find, indent=2) + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:
        return None
    finally:
        draft.unlink(missing_ok=True)
    return path


# ----------------------------------------------------------------------------- replay
def replay(adapter, find: dict, machine_class=None, known: dict | None = None) -> str | None:
    """Why vLLM still breaks the rule on the saved input, or None if it holds now (a gate
    property's new divergence holds once ``known``, the recorded divergences, has it)."""

    target = find["target"]
    try:
        if target in ("core lookups", "Mooncake lookups"):
            setting, state, max_length = codec.decode(find["example"])
            path = "core" if target == "core lookups" else "mooncake"
            ask = vllm_coordinator if path == "core" else vllm_mooncake
            hit = ask(adapter, setting, state, max_length)
            broken = lookup_violations(path, hit, setting, state, max_length, rules=adapter.rules)
            if not broken:  # a find of a new divergence holds once it is recorded
                no_new_lookup_divergence(adapter, path, (setting, state, max_length), hit,
                                         recorded() if known is None else known)
        elif target == "grouping":
            broken = conformance_failures(adapter, codec.decode(find["example"]))
        elif target in GATE_PROPERTIES:
            return property_key(target, adapter, codec.decode(find["example"]), known)[2] or None
        elif target == "stateful":
            return replay_stateful(adapter, find, machine_class)
        else:
            return f"unknown target {target!r} in {find['path']}"
    except Exception as exc:  # noqa: BLE001 - a crash on the saved input is the verdict
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "; ".join(f"{name}: {why}" for name, why in broken) or None


def replay_stateful(adapter, find: dict, machine_class=None) -> str | None:
    """Run the saved failing example from the find's own example database, read-only."""
    import hypothesis  # noqa: PLC0415
    from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase  # noqa: PLC0415


    database = Path(find["path"]).with_suffix(".db")
    if not database.is_dir():
        return f"its example database {database} is missing"
    machine = machine_class or campaign_machine(adapter)
    machine.TestCase.settings = hypothesis.settings(
        database=ReadOnlyDatabase(DirectoryBasedExampleDatabase(str(database))),
        phases=[hypothesis.Phase.reuse], max_examples=1, deadline=None, report_multiple_bugs=False,
        suppress_health_check=list(hypothesis.HealthCheck), stateful_step_count=60,
    )
    try:
        machine.TestCase().runTest()
    except Exception as exc:  # noqa: BLE001
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def check_saved_finds(adapter, options: GateOptions) -> CheckResult:
    """Every find a campaign saved (kvspec fuzz) replayed on the target, oldest first."""
    home = finds_home()
    finds = load(home)
    if not finds:
        return CheckResult(Check.SAVED_FINDS, f"none in {home}", holds=True, details=["no saved finds to replay"])
    failing, tested = [], False
    for find in finds:
        why = replay(adapter, find, known=options.known())
        if why is not None:
            failing.append(f"{Path(find['path']).name} ({find['invariant']}; {find['situation']}): {why}")
            tested |= Path(find["path"]).with_suffix(".py").exists()
    covered = f"{len(finds)} finds from {home}"
    if failing:
        details = [f"{len(failing)} of {len(finds)} saved finds still fail", *failing]
        details += ["their vLLM tests are beside them (.py)"] if tested else []
        return CheckResult(Check.SAVED_FINDS, covered, holds=False, details=details)
    return CheckResult(Check.SAVED_FINDS, covered, holds=True, details=[f"all {len(finds)} saved finds hold"])
