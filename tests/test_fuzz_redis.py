"""A campaign on a real ``redis-server``: two workers share Hypothesis's example database, a
find is filed once, another worker replays it from Redis, and ``kvspec check`` replays it too.
A server that is down costs one line and exit 2."""

import os
import shutil
import socket
import subprocess
import time

import pytest
import vllm_copies

from kvspec.gate import saved_finds as finds

pytestmark = pytest.mark.release_independent

# Found within seconds by the grouping target: every layer in its own group.
VARIANT = "group-size-one-per-layer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    """A fresh redis-server of our own on a free localhost port. CI installs Debian's package
    (.ci/run); there its absence is a failure, elsewhere a skip."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (CI must run the Redis campaign: apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    import redis  # noqa: PLC0415

    port = _free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}", client
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_kvspec(*args: str, finds_dir=None) -> subprocess.CompletedProcess:
    finds_env = {} if finds_dir is None else {"KVSPEC_FINDS": str(finds_dir)}
    return vllm_copies.run_kvspec(*args, env_extra=finds_env, without=("KVSPEC_FINDS",))


def _situations(directory) -> set[tuple[str, str]]:
    return {(f["invariant"], f["situation"]) for f in finds.load(directory)}


def test_a_find_crosses_workers_through_redis_and_kvspec_check_replays_it(redis_url, tmp_path):
    url, client = redis_url
    release = os.environ.get("KVSPEC_VLLM", "0.34.0")
    campaign = ["--vllm", release, "--db", url, "--targets", "grouping", "--inject", VARIANT, "--round-seconds", "3"]
    first, second = tmp_path / "first", tmp_path / "second"

    two = run_kvspec("fuzz", *campaign, "--workers", "2", "--minutes", "0.15", "--seed", "7", "--finds", str(first))
    assert two.returncode == 1, two.stderr[-2000:]
    assert "2 workers ended" in two.stdout, two.stdout
    filed = list(first.glob("*.json"))
    assert filed and len(filed) == len(_situations(first))  # each (invariant, situation) filed once
    assert [key for key in client.scan_iter(b"kvspec-fuzz:*")], "the workers saved nothing in Redis"

    # Another worker, knowing none of the finds, starts from what Redis holds: its first round
    # replays the shrunk input the campaign saved there and files the same bug.
    other = run_kvspec("fuzz", *campaign, "--minutes", "0.02", "--seed", "8", "--finds", str(second))
    assert other.returncode == 1, other.stderr[-2000:]
    assert _situations(second) & _situations(first), (other.stderr[-2000:], _situations(first))

    replay = run_kvspec("check", "--vllm", release, "--check", "saved finds", "--inject", VARIANT, finds_dir=first)
    assert replay.returncode == 1, replay.stdout[-2000:] + replay.stderr[-2000:]
    assert "saved finds" in replay.stdout


def test_a_redis_server_that_is_down_is_one_line_and_exit_2(tmp_path):
    proc = run_kvspec("fuzz", "--minutes", "1", "--db", f"redis://127.0.0.1:{_free_port()}", "--finds", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "the Redis server does not answer" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
