"""A stateful failure carries a plain-vLLM test that replays the whole run on a KVCacheManager
(kvspec/emit/stateful_test.py, from impl/call_trace.py's record): run alone by pytest on
unpatched vLLM, with nothing of kvspec importable, it passes; with the bug put back, it fails."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import plain_vllm
import pytest

from kvspec.emit.stateful_test import Expected, stateful_test
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.stateful import check_stateful_manager
from kvspec.impl.broken import VARIANTS, applied
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.stateful.config import MachineConfig
from kvspec.stateful.machine import live_manager

HEADING = "as a vLLM test replaying the whole run (every call on the KVCacheManager):"
# A hit kvspec expected longer (the Mamba margin) and a window hit reading a null block.
# And the write side's bugs: a key a column's block must (or must not) carry.
# The short window run also shrinks what a window caches, which the write judge sees first.
CAUGHT = {"mamba-peek-margin": "assert hit == ", "sliding-window-short-run": "keys.contain(key, block_id)",
          **dict.fromkeys(["window-keeps-one-block-too-few", "mamba-state-cached-one-block-late",
                           "last-full-block-never-cached"], "keys.contain(key, block_id)")}
RUFF = Path(sys.executable).with_name("ruff")


def replay_from_the_gate(adapter, variant: str) -> str:
    """The FAILS row of the gate's stateful check with ``variant`` in: its replay test."""
    with applied(adapter, [variant]):
        row = check_stateful_manager(adapter, GateOptions())
    assert row.name == Check.STATEFUL and not row.holds, row.details
    assert HEADING in row.details, row.details
    lines = row.details[row.details.index(HEADING) + 1:]
    end = next(i for i, line in enumerate(lines) if line.startswith("def test_")) + 1
    while end < len(lines) and (not lines[end] or lines[end].startswith("    ")):  # the test's body
        end += 1
    return "\n".join(lines[:end]) + "\n"


def run_alone(adapter, source: str, where: Path) -> subprocess.CompletedProcess:
    """``source`` run by pytest in its own process, with only the target's vLLM importable."""
    return plain_vllm.run_alone(source, adapter.target.root, where)


def ruff_problems(source: str, where: Path) -> list[str]:
    """What ruff says of ``source`` at vLLM's line length (vllm its first party, as in its repo)."""
    where.mkdir()
    (where / "test_replay.py").write_text(source)
    base = [str(RUFF), "--isolated", "--line-length", "88"]
    check = [*base[:1], "check", *base[1:], "--config", "lint.isort.known-first-party = ['vllm']", "."]
    fmt = [*base[:1], "format", "--check", "--diff", *base[1:], "."]
    return [p.stdout + p.stderr for p in (subprocess.run(c, cwd=where, capture_output=True, text=True)
                                          for c in (check, fmt)) if p.returncode]


@pytest.mark.parametrize("variant", sorted(CAUGHT))
def test_a_stateful_failure_prints_a_replay_that_fails_only_with_the_bug(vllm_adapter, variant, tmp_path):
    if variant not in VARIANTS:
        pytest.skip(f"{variant} is not in impl/broken.py")
    source = replay_from_the_gate(vllm_adapter, variant)
    assert CAUGHT[variant] in source
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, re.M))
    assert imported <= {"torch", "vllm"}, imported
    # On unpatched vLLM, alone: it passes.
    clean = run_alone(vllm_adapter, source, tmp_path / "alone")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # With the bug back (the same file, in this process): it fails at the final assertion.
    namespace: dict = {}
    exec(compile(source, "test_replay.py", "exec"), namespace)  # noqa: S102 - the test kvspec printed
    [test] = [value for name, value in namespace.items() if name.startswith("test_")]
    test()
    with applied(vllm_adapter, [variant]), pytest.raises(AssertionError) as failure:
        test()
    tb = failure.tb
    while tb.tb_next:
        tb = tb.tb_next
    # It fails at what kvspec expected, not earlier in the replay.
    assert tb.tb_lineno > source.splitlines().index("    # kvspec expected: " + source.split("# kvspec expected: ")[1]
                                                    .splitlines()[0])
    if RUFF.exists() or shutil.which("ruff"):
        assert not ruff_problems(source, tmp_path / "ruff")


def test_a_pool_expectation_replays_every_call_and_asserts_the_pool(vllm_adapter):
    """A run with an admission, a preemption, a re-admission and a probe, emitted with the pool
    vLLM holds as the expectation: the replay reproduces it exactly."""
    config = MachineConfig((CacheGroup(Kind.FULL, 4), CacheGroup(Kind.MAMBA, 4)), 4, None, 0, None, 24)
    live = live_manager(vllm_adapter, config)
    prompt = list(range(8)) * 3
    live.add_request("r0", prompt)
    live.schedule("r0", 8, 3)
    live.schedule("r0", 2048, 5)
    live.preempt("r0")
    live.schedule("r0", 2048, 1)
    live.finish("r0")
    live.lookup(prompt[:13])
    expected = Expected("the pool as vLLM left it", ref_counts=list(live.ref_counts().values()),
                        free_queue=live.free_block_ids())
    source = stateful_test(live.trace.setup, live.trace.calls, expected, vllm_adapter.rules, "full mamba")
    for call in ("r0.status = RequestStatus.PREEMPTED", "r0.append_output_token_ids(1)", "manager.free(r0)",
                 "manager.cache_blocks(r0, ", "probe = make_request"):
        assert call in source
    namespace: dict = {}
    exec(compile(source, "test_replay.py", "exec"), namespace)  # noqa: S102 - the test kvspec printed
    namespace["test_kvspec_stateful_full_mamba"]()


def test_a_multi_module_mtp_run_replays_on_plain_vllm(vllm_adapter, tmp_path):
    """The engine's setup for a chain of three MTP modules beside a window (the prefill
    lookahead, the window's retained tail) is in the replay, which passes alone on vLLM."""
    config = MachineConfig((CacheGroup(Kind.FULL, 4), CacheGroup(Kind.SLIDING_WINDOW, 4, window=5)), 4, "drop", 3,
                           None, 40, multi_module_mtp=True)
    live = live_manager(vllm_adapter, config)
    prompt = list(range(8)) * 3
    live.add_request("r0", prompt)
    for budget in (4, 5, 2048):
        live.schedule("r0", budget, 3)
    live.finish("r0")
    live.lookup(prompt[:13])
    expected = Expected("the pool as vLLM left it", ref_counts=list(live.ref_counts().values()),
                        free_queue=live.free_block_ids())
    source = stateful_test(live.trace.setup, live.trace.calls, expected, vllm_adapter.rules, "full swa")
    assert "num_prefill_lookahead=3" in source and "extra_retained_tokens=2" in source
    clean = run_alone(vllm_adapter, source, tmp_path / "alone")
    assert clean.returncode == 0, clean.stdout + clean.stderr
