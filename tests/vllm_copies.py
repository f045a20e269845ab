"""Deliberately broken copies of a vLLM release, as a reviewer's checkout would hold them, and
``kvspec`` run on them in a process of its own (one vLLM per process)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import warm_start

KVSPEC = [sys.executable, "-m", "kvspec.cli"]


def run_kvspec(*args: str, env_extra: dict | None = None, without: tuple[str, ...] = (),
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m kvspec.cli *args`` as a user's shell runs it, on the target its arguments name,
    not this process's (and without the variables ``without``): forked from a process that has
    imported vLLM where that is the same (tests/warm_start.py)."""
    drop = ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC", *without)
    env = {k: v for k, v in os.environ.items() if k not in drop} | (env_extra or {})
    return warm_start.run_kvspec(list(args), env, set(env_extra or {}), timeout)


def checkout_copy(release: Path, dest: Path) -> Path:
    """A vLLM checkout as a reviewer has one: the release's files, hard-linked where possible
    (fast), without the _version.py that only a built wheel carries."""
    try:
        shutil.copytree(release / "vllm", dest / "vllm", copy_function=os.link)
    except OSError:
        shutil.copytree(release / "vllm", dest / "vllm")
    (dest / "vllm" / "_version.py").unlink()
    return dest


def rewrite(path: Path, old: str, new: str, *, count: int = 1) -> None:
    """Replace ``old`` (which must occur exactly ``count`` times; 0: every time) with ``new``."""
    text = path.read_text()
    found = text.count(old)
    assert found and (count == 0 or found == count), f"{old!r} occurs {found} times in {path}"
    path.unlink()  # break the hard link before writing: the release must stay intact
    path.write_text(text.replace(old, new))


def run_emitted_in(tree: Path, source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """An emitted plain-vLLM test, run in its own process against the vLLM in ``tree``."""
    test = tmp_path / "emitted_test.py"
    test.write_text(source)
    runner = (
        "import sys, runpy; sys.path.insert(0, sys.argv[1]); module = runpy.run_path(sys.argv[2]); "
        "[fn() for name, fn in module.items() if name.startswith('test_')]"
    )
    return subprocess.run([sys.executable, "-c", runner, str(tree), str(test)], capture_output=True, text=True,
                          timeout=300)
