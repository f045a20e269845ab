"""``kvspec fuzz --workers N``: each worker gets the campaign's flags and its own seed, a bug two
workers file at once is saved once, and the workers end with the campaign on SIGINT/SIGTERM."""

import os
import signal
import subprocess
import sys
import time

import pytest

from kvspec.gate import saved_finds as finds
from kvspec.tools.fuzz_workers import worker_argv

pytestmark = pytest.mark.release_independent

KVSPEC = [sys.executable, "-m", "kvspec.cli"]


def test_a_worker_gets_the_campaign_flags_with_its_own_seed():
    argv = ["--minutes", "1", "--workers", "3", "--seed=5", "--db", "redis://h:1", "--inject", "x"]
    assert worker_argv(argv, 5, 2) == ["--minutes", "1", "--db", "redis://h:1", "--inject", "x", "--seed", "7"]


def test_two_workers_filing_one_bug_leave_one_find(tmp_path):
    find = {"target": "grouping", "invariant": "groups equal", "situation": "grouping full", "example": {}}
    assert finds.claim(tmp_path, find) is not None
    assert finds.claim(tmp_path, find) is None
    assert len(finds.load(tmp_path)) == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone, only not yet reaped
        return stat.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("stop, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_campaign_exits_with_the_signal_and_takes_its_workers_along(tmp_path, stop, code):
    env = {k: v for k, v in os.environ.items() if k not in ("KVSPEC_VLLM", "KVSPEC_VLLM_SRC", "KVSPEC_FINDS")}
    campaign = subprocess.Popen([*KVSPEC, "fuzz", "--vllm", os.environ.get("KVSPEC_VLLM", "0.34.0"), "--minutes", "5",
                                 "--workers", "2", "--db", str(tmp_path / "db"), "--finds", str(tmp_path / "finds"),
                                 "--targets", "grouping"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers: list[int] = []
    for _ in range(200):  # the workers appear once the campaign has checked its flags
        children = f"/proc/{campaign.pid}/task/{campaign.pid}/children"
        workers = [int(pid) for pid in open(children).read().split()] if os.path.exists(children) else []
        if len(workers) == 2:
            break
        time.sleep(0.05)
    assert len(workers) == 2, "the campaign started no two workers"
    campaign.send_signal(stop)
    assert campaign.wait(timeout=30) == code
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "a worker outlived the campaign"
