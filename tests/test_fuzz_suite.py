"""Every campaign target, the stateful machine included, is a test pytest (and so HypoFuzz)
collects without fixtures."""

import os
import subprocess
import sys

from kvspec.impl.target import PROJECT_ROOT


def test_pytest_collects_the_three_properties_and_the_stateful_machine():
    env = {k: v for k, v in os.environ.items() if k != "KVSPEC_VLLM_SRC"}
    env.setdefault("KVSPEC_VLLM", "0.34.0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(PROJECT_ROOT / "kvspec" / "tools" / "fuzz_suite.py")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = {line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line}
    assert collected == {"test_core_lookups", "test_mooncake_lookups", "test_grouping", "TestCacheMachine::runTest"}
