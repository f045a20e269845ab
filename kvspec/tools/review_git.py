"""``kvspec review --repo PATH --base REF --head REF``: the two sides of a review as commits of
a vLLM git checkout, each checked out in a ``git worktree`` of its own (the reviewer's working
tree and index are never touched).

* the repository and both refs are checked before anything else (before any vLLM is imported):
  a ref that does not name a commit is one line and exit 2;
* the worktrees live in one temporary directory and are removed afterwards with
  ``git worktree remove`` and ``git worktree prune``, also when the review is stopped by SIGINT
  or SIGTERM (kvspec/tools/interrupts.py runs the clean-up before it exits);
* the report names both commits and their merge base.

git is driven through its command line: it is what every checkout has, and the porcelain
commands used here are stable. (GitPython would only wrap the same calls.)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvspec.impl.target import TargetError
from kvspec.tools import interrupts


@dataclass(frozen=True)
class Commit:
    ref: str  # as the reviewer wrote it
    sha: str
    subject: str

    def describe(self) -> str:
        return f"{self.ref} ({self.sha[:12]}: {self.subject})"


@dataclass(frozen=True)
class Revisions:
    repo: Path
    base: Commit
    head: Commit
    merge_base: str | None  # None: the two have no common ancestor

    def header(self) -> dict:
        return {"repo": str(self.repo), "base": vars(self.base), "head": vars(self.head),
                "merge_base": self.merge_base}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise TargetError("--repo needs git on PATH") from None


def revisions(repo: str, base: str, head: str) -> Revisions:
    """Both refs resolved to commits in ``repo``, and their merge base; refused in one line."""
    path = Path(repo)
    if not path.is_dir():
        raise TargetError(f"--repo {repo}: no such directory")
    top = _git(path, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise TargetError(f"--repo {repo}: not a git repository")
    path = Path(top.stdout.strip())
    base_commit, head_commit = _commit(path, base, "--base"), _commit(path, head, "--head")
    merged = _git(path, "merge-base", base_commit.sha, head_commit.sha)
    return Revisions(path, base_commit, head_commit, merged.stdout.strip() if merged.returncode == 0 else None)


def _commit(repo: Path, ref: str, flag: str) -> Commit:
    found = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if found.returncode != 0 or not found.stdout.strip():
        raise TargetError(f"{flag} {ref}: no such commit in {repo}")
    sha = found.stdout.strip()
    subject = _git(repo, "log", "-1", "--format=%s", sha).stdout.strip()
    return Commit(ref, sha, subject)


@contextmanager
def worktrees(revs: Revisions):
    """``{"base": path, "head": path}``: each commit checked out (detached) in a worktree of
    ``revs.repo``, removed on leaving and on a stop."""
    holder = Path(tempfile.mkdtemp(prefix="kvspec-review-git-"))
    paths = {"base": holder / "base", "head": holder / "head"}

    def remove() -> None:
        for path in paths.values():
            if path.exists():
                _git(revs.repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(holder, ignore_errors=True)
        _git(revs.repo, "worktree", "prune")

    interrupts.at_stop(remove)
    interrupts.temporary_directory(holder)
    try:
        for label, commit in (("base", revs.base), ("head", revs.head)):
            added = _git(revs.repo, "worktree", "add", "--detach", "--quiet", str(paths[label]), commit.sha)
            if added.returncode != 0:
                reason = (added.stderr.strip().splitlines() or [f"exit {added.returncode}"])[-1]
                raise TargetError(f"--{label} {commit.ref}: git worktree add failed: {reason}")
        yield paths
    finally:
        remove()
        interrupts.forget_cleanup(remove)
        interrupts.release_directory(holder)
