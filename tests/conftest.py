"""One real vLLM per test process: importing it takes seconds, and two vLLMs cannot share a
process. The target is the pinned default, or KVSPEC_VLLM / KVSPEC_VLLM_SRC.

A test marked ``every_release`` runs every supported release in processes of its own, whatever
this process's target: `make test` runs the suite once per release, so it runs only in the run
on the default target. So does one marked ``release_independent``: it tests kvspec's own
plumbing (signals, bad input, git worktrees, Redis, worker processes, replays, reports), which no
vLLM release changes, or it runs ``kvspec`` only on the default release (vllm_copies.run_kvspec
leaves this process's target out), so a second run on another release would repeat it, not widen
it."""

import os

import pytest

from kvspec.impl.target import default_version


def pytest_collection_modifyitems(config, items):
    for item in items:  # plumbing that drives the target's vLLM in process is not independent of it
        if item.get_closest_marker("release_independent") and "vllm_adapter" in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} is marked release_independent but uses the target's vLLM")
    on_default = os.environ.get("KVSPEC_VLLM", default_version()) == default_version() and not os.environ.get(
        "KVSPEC_VLLM_SRC")
    if on_default:
        return
    reasons = {"every_release": "runs every release in its own process: once, in the run on the default target",
               "release_independent": "kvspec's own plumbing, the same on every release: once, on the default target"}
    for item in items:
        for marker, reason in reasons.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
                break


@pytest.fixture(scope="session")
def vllm_adapter():
    from kvspec.impl.target import resolve
    from kvspec.impl.vllm_adapter import VllmAdapter

    return VllmAdapter(resolve())
