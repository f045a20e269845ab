"""One real vLLM per test process: importing it takes seconds, and two vLLMs cannot share a
process. The target is the pinned default, or KVSPEC_VLLM / KVSPEC_VLLM_SRC."""

import pytest


@pytest.fixture(scope="session")
def vllm_adapter():
    from kvspec.impl.target import resolve
    from kvspec.impl.vllm_adapter import VllmAdapter

    return VllmAdapter(resolve())
