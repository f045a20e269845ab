"""One real vLLM per test process: importing it takes seconds, and two vLLMs cannot share a
process. The target is the pinned default, or KVSPEC_VLLM / KVSPEC_VLLM_SRC.

A test marked ``every_release`` runs every supported release in processes of its own, whatever
this process's target: `make test` runs the suite once per release, so it runs only in the run
on the default target."""

import os

import pytest

from kvspec.impl.target import default_version


def pytest_collection_modifyitems(config, items):
    on_default = os.environ.get("KVSPEC_VLLM", default_version()) == default_version() and not os.environ.get(
        "KVSPEC_VLLM_SRC")
    if on_default:
        return
    skip = pytest.mark.skip(reason="runs every release in its own process: once, in the run on the default target")
    for item in items:
        if item.get_closest_marker("every_release"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_adapter():
    from kvspec.impl.target import resolve
    from kvspec.impl.vllm_adapter import VllmAdapter

    return VllmAdapter(resolve())
