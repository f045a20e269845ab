"""``kvspec review --repo PATH --base REF --head REF``: a vLLM git checkout's two commits, each
in a worktree that is gone afterwards, even after SIGTERM."""

import json
import signal
import subprocess
from pathlib import Path

import pytest
from vllm_copies import KVSPEC, checkout_copy, rewrite, run_kvspec

from kvspec.impl.target import releases_home, supported_versions
from kvspec.oracles.invariants import NULL_BLOCK

pytestmark = pytest.mark.release_independent

MAMBA_GATE = "if drop_eagle_block and not isinstance(spec, MambaSpec):"


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=kvspec", "-c", "user.email=kvspec@localhost",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A vLLM repository: the pinned release as the base commit on main, then a branch whose
    one commit removes the coordinator's Mamba gate (vLLM #43559's bug)."""
    path = checkout_copy(releases_home() / supported_versions()[0], tmp_path_factory.mktemp("vllm-git"))
    _git(path, "init", "--quiet", "--initial-branch=main")
    _git(path, "add", "vllm")
    _git(path, "commit", "--quiet", "-m", "vLLM as released")
    _git(path, "checkout", "--quiet", "-b", "drop-mamba-gate")
    rewrite(path / "vllm/v1/core/kv_cache_coordinator.py", MAMBA_GATE, "if drop_eagle_block:")
    _git(path, "commit", "--quiet", "-am", "coordinator: drop the EAGLE block for every group")
    _git(path, "checkout", "--quiet", "main")
    return path


def _worktrees(repo) -> list[str]:
    return [line for line in _git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def test_review_of_two_commits_reports_the_heads_change_and_leaves_no_worktree(repo, tmp_path):
    out = tmp_path / "review.json"
    proc = run_kvspec("review", "--repo", str(repo), "--base", "main", "--head", "drop-mamba-gate",
                      "--scale", "0.01", "--json", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    base_sha, head_sha = _git(repo, "rev-parse", "main"), _git(repo, "rev-parse", "drop-mamba-gate")
    assert report["git"]["base"]["sha"] == base_sha and report["git"]["head"]["sha"] == head_sha
    assert report["git"]["merge_base"] == base_sha
    header = proc.stdout.split("## Verdict")[0]
    assert base_sha in header and head_sha in header and f"merge base `{base_sha}`" in header
    assert any(r["invariant"] == NULL_BLOCK for r in report["new_violations"])
    assert "--repo" in report["command"] and "--head drop-mamba-gate" in report["command"]
    assert _worktrees(repo) == [f"worktree {repo}"]
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "branch", "--show-current") == "main"


@pytest.mark.parametrize("flags, message", [
    (["--base", "main", "--head", "no-such-branch"], "--head no-such-branch: no such commit in"),
    (["--base", "v0.0.0", "--head", "main"], "--base v0.0.0: no such commit in"),
])
def test_a_ref_that_does_not_exist_is_one_line_and_exit_2(repo, flags, message):
    proc = run_kvspec("review", "--repo", str(repo), *flags, "--quick", timeout=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert _worktrees(repo) == [f"worktree {repo}"]


def test_not_a_git_repository_is_one_line_and_exit_2(tmp_path):
    proc = run_kvspec("review", "--repo", str(tmp_path), "--base", "main", "--head", "main", timeout=60)
    assert proc.returncode == 2 and "not a git repository" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr


def test_sigterm_mid_review_removes_the_worktrees(repo):
    proc = subprocess.Popen([*KVSPEC, "review", "--repo", str(repo), "--base", "main", "--head", "drop-mamba-gate",
                             "--scale", "0.01"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # the worktrees exist once review names the two commits
        if line.startswith("kvspec review: base"):
            break
    checked_out = [line.removeprefix("worktree ") for line in _worktrees(repo)[1:]]
    assert len(checked_out) == 2
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert _worktrees(repo) == [f"worktree {repo}"]
    assert not any(Path(path).parent.exists() for path in checked_out)
