"""Every plain-vLLM test kvspec emits passes vLLM's own ``ruff check`` and ``ruff format --check``
(line length 88, vLLM's rule set: kvspec/emit/vllm_style.py): grouping tests, lookup tests on
both coordinators, offloading tests, stateful replays and the recorded divergence replays."""

import pytest

from kvspec.divergences.known import KNOWN_FILE
from kvspec.draws.lookups import lookups
from kvspec.draws.models import models
from kvspec.draws.offloading import offload_cases
from kvspec.draws.real_models import REAL_MODELS
from kvspec.emit.lookup_test import regression_test
from kvspec.emit.stateful_test import Expected, stateful_test
from kvspec.emit.vllm_style import WIDTH, style_problems
from kvspec.emit.vllm_tests import grouping_test, offloading_test
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.stateful.config import MachineConfig
from kvspec.stateful.machine import live_manager
from kvspec.tools.review import draw

DRAWN = 12  # per emitter: enough shapes to meet the long lines (many groups, Mamba, windows)


def _lint(tmp_path, sources: dict[str, str]) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    paths = []
    for name, source in sources.items():
        path = tmp_path / f"test_{name}.py"
        path.write_text(source)
        paths.append(path)
    return style_problems(paths)


def test_grouping_tests_are_paste_ready(tmp_path):
    shapes = {f"real_{i}": m for i, m in enumerate(REAL_MODELS.values())}
    shapes |= {f"drawn_{i}": m for i, m in enumerate(draw(models(), DRAWN, seed=1))}
    assert not _lint(tmp_path, {name: grouping_test(model) for name, model in shapes.items()})


def test_lookup_tests_on_both_coordinators_are_paste_ready(tmp_path):
    sources = {}
    for i, (setting, state, cap) in enumerate(draw(lookups(), DRAWN, seed=2)):
        reason = "the longest hit every group can resume from, and a long reason to wrap " * 2
        sources[f"core_{i}"] = regression_test(setting, state, cap, 0, reason, path="core")
        sources[f"mooncake_{i}"] = regression_test(setting, state, cap, 0, reason, path="mooncake",
                                                   partial_hash_hits=None, name="a store lookup")
    assert not _lint(tmp_path, sources)


def test_offloading_tests_are_paste_ready(tmp_path):
    sources = {f"offload_{i}": offloading_test(*case, 0, "0 is the longest safe hit; vLLM returns 1", f"cause {i}")
               for i, case in enumerate(draw(offload_cases(), DRAWN, seed=3))}
    assert not _lint(tmp_path, sources)


def test_a_stateful_replay_is_paste_ready(vllm_adapter, tmp_path):
    config = MachineConfig((CacheGroup(Kind.FULL, 4), CacheGroup(Kind.SLIDING_WINDOW, 4, window=5),
                            CacheGroup(Kind.MAMBA, 4)), 4, None, 0, None, 24)
    live = live_manager(vllm_adapter, config)
    prompt = list(range(8)) * 3
    live.add_request("r0", prompt)
    live.schedule("r0", 8, 3)
    live.preempt("r0")
    live.schedule("r0", 2048, 1)
    live.finish("r0")
    live.lookup(prompt[:13])
    expected = Expected("the pool as vLLM left it, after a preemption and a re-admission of the request",
                        ref_counts=list(live.ref_counts().values()), free_queue=live.free_block_ids())
    args = (live.trace.setup, live.trace.calls, expected, vllm_adapter.rules, "full window mamba")
    # (its raw text was laid out at 88 columns before: only vLLM's rule set is new to it)
    assert not _lint(tmp_path, {"stateful": stateful_test(*args)})


def test_the_recorded_divergence_replays_are_paste_ready():
    replays = sorted((KNOWN_FILE.parent / "divergences").glob("test_*.py"))
    assert len(replays) >= 20
    assert not style_problems(replays)


@pytest.mark.parametrize("emitter", [grouping_test, regression_test, offloading_test])
def test_the_check_catches_what_the_emitters_would_print_unformatted(emitter, tmp_path):
    """The lint is not vacuous: kvspec's raw text (before ruff lays it out) breaks vLLM's rules."""
    raw = emitter.__wrapped__
    if emitter is grouping_test:
        source = raw(REAL_MODELS[next(iter(REAL_MODELS))])
    elif emitter is regression_test:
        setting, state, cap = draw(lookups(), 1, seed=2)[0]
        source = raw(setting, state, cap, 0, "x" * WIDTH)
    else:
        source = raw(*draw(offload_cases(), 1, seed=3)[0], 0, "x" * WIDTH, "cause")
    assert _lint(tmp_path, {"raw": source})
