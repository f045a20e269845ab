"""``kvspec check --vllm installed``: the vLLM a developer's own environment imports (an editable
install), with kvspec ``pip install``ed into that environment, not kvspec's ``.venv``."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from vllm_copies import run_kvspec

from kvspec.impl.target import PROJECT_ROOT, releases_home, supported_versions

# Each kvspec run here is on the default release, whichever release this pass targets (tests/conftest.py).
pytestmark = pytest.mark.release_independent


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


@pytest.fixture(scope="module")
def developer_env(tmp_path_factory):
    """A fresh venv where ``import vllm`` finds a release through a ``.pth`` file, as an editable
    install of a checkout does, and kvspec is pip-installed (editable, no deps). vLLM's and
    kvspec's dependencies (torch CPU, hypothesis, z3...) come from kvspec's own environment,
    also through a ``.pth``: installing them again would take minutes."""
    env = tmp_path_factory.mktemp("developer") / "venv"
    # pip and setuptools come with the dependencies' .pth (a venv's bundled setuptools is older)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = _site_packages(python)
    (site / "kvspec-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "__editable__.vllm.pth").write_text(str(releases_home() / supported_versions()[0]) + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                                "--disable-pip-version-check", "-e", str(PROJECT_ROOT)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    return env


def test_check_runs_on_the_vllm_the_environment_imports(developer_env, tmp_path):
    proc = subprocess.run([str(developer_env / "bin" / "kvspec"), "check", "--vllm", "installed",
                           "--check", "grouping", "--quick"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version, root = supported_versions()[0], releases_home() / supported_versions()[0]
    assert f"kvspec check: installed vLLM {version} ({root})" in proc.stdout
    assert "kvspec: 1 checks hold, 0 fail" in proc.stdout


def test_without_an_importable_vllm_installed_is_one_line_and_exit_2():
    # kvspec's own .venv holds no vllm: its releases live under .vllm/, put on the path per run.
    proc = run_kvspec("check", "--vllm", "installed", "--check", "grouping", "--quick", timeout=60)
    assert proc.returncode == 2 and "--vllm installed: no vllm is importable" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
