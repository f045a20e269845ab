"""Plain-vLLM tests (the ones kvspec prints, and those of docs/findings/ reports) run as a vLLM
developer runs them: pytest in a process of its own, with only one vLLM tree importable and none
of kvspec or its settings. Importing vLLM in that process costs seconds, so many tests share one
process where nothing patches vLLM at collection: ``run_each`` reads back each file's outcome
from pytest's JUnit XML; and each such process is forked from one that has imported vLLM's
KV-cache modules on the same path (tests/warm_start.py)."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import warm_start

ARGS = ["-q", "-p", "no:cacheprovider", "-W", "ignore"]


def run_alone(source: str, vllm_root: Path, where: Path, conftest: str | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """``source`` as ``test_replay.py`` (and ``conftest``, when given, beside it), run by pytest."""
    where.mkdir(parents=True)
    (where / "test_replay.py").write_text(source)
    if conftest:
        (where / "conftest.py").write_text(conftest)
    return _pytest(vllm_root, where, [], timeout)


@dataclass(frozen=True)
class Outcome:
    status: str  # "passed", "failed" (a test's assertion or exception) or "error" (it did not run)
    text: str  # pytest's report of the failure or error, "" when it passed


def run_each(sources: dict[str, str], vllm_root: Path, where: Path, timeout: float = 900) -> dict[str, Outcome]:
    """Each source as its own ``test_<name>.py`` in one pytest process: the outcome by name (a
    file with several tests: the worst of them)."""
    where.mkdir(parents=True)
    for name, source in sources.items():
        (where / f"test_{name}.py").write_text(source)
    proc = _pytest(vllm_root, where, ["--continue-on-collection-errors", "--junitxml", str(where / "outcomes.xml")],
                   timeout)
    reported: dict[str, Outcome] = {}
    worst = {"passed": 0, "failed": 1, "error": 2}
    if (where / "outcomes.xml").is_file():
        for case in ET.parse(where / "outcomes.xml").iter("testcase"):
            name = (case.get("classname") or "").rsplit(".", 1)[-1].removeprefix("test_")
            if name not in sources:  # a collection error names the file alone
                name = (case.get("name") or "").removeprefix("test_").removesuffix(".py")
            failure, error = case.find("failure"), case.find("error")
            found = (Outcome("failed", failure.text or "") if failure is not None
                     else Outcome("error", error.text or "") if error is not None else Outcome("passed", ""))
            if name in sources and worst[found.status] >= worst[reported.get(name, found).status]:
                reported[name] = found
    not_run = Outcome("error", f"not reported by pytest:\n{proc.stdout[-3000:]}")
    return {name: reported.get(name, not_run) for name in sources}


def _pytest(vllm_root: Path, where: Path, extra: list[str], timeout: float) -> subprocess.CompletedProcess:
    (where / "pytest.ini").write_text("[pytest]\n")  # not the project's configuration
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPEC_")} | {"PYTHONPATH": str(vllm_root)}
    return warm_start.run_pytest([*ARGS, *extra, "."], where, env, timeout)
