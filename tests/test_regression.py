"""The emitted plain-vLLM tests (kvspec/emit/lookup_test.py) run on real vLLM: they pass where vLLM
answers as the spec says and fail where it does not."""

import pytest

from kvspec.emit.lookup_test import regression_test
from kvspec.gate.lookups import check_lookups
from kvspec.gate.options import GateOptions
from kvspec.impl.broken import applied
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting

SEED = LookupSetting((CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)), 16, use_eagle=True)
REASON = "Mamba resumes at the attention-verified 48, not one block past it (#43559)"


def run_emitted(source: str) -> None:
    namespace: dict = {}
    exec(compile(source, "<emitted vLLM test>", "exec"), namespace)
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()


@pytest.mark.parametrize("path", ["core", "mooncake"])
def test_emitted_seed_test_passes_on_vllm_and_fails_on_the_bug(vllm_adapter, path):
    source = regression_test(SEED, CacheState.full_prefix(2, 4), 64, 48, REASON, path=path)
    assert "kvspec" not in source.split("def ", 1)[0]  # imports only vLLM (and torch, hashlib)
    run_emitted(source)
    with applied(vllm_adapter, ["mamba-peek-margin"]):
        with pytest.raises(AssertionError):
            run_emitted(source)


def test_a_failing_gate_prints_a_vllm_test_that_reproduces_it(vllm_adapter):
    with applied(vllm_adapter, ["mamba-peek-margin"]):
        result = check_lookups(vllm_adapter, GateOptions(scale=0.05))
        source = "\n".join(result.details[result.details.index("as a vLLM test:") + 1 :])
        with pytest.raises(AssertionError):
            run_emitted(source)
    run_emitted(source)  # the same test passes once the bug is gone
