"""``kvspec review``: one workload, drawn once, answered by two vLLMs in their own processes."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import vllm_copies
from vllm_copies import checkout_copy, rewrite

from kvspec.draws import codec
from kvspec.impl.target import releases_home, supported_versions
from kvspec.oracles.invariants import DRAFTER_PROVEN, EQUALS_REFERENCE, NULL_BLOCK, SAFE_HIT
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.tools.review import make_workload, seed_lookups
from kvspec.tools.review_markdown import markdown
from kvspec.tools.review_report import compare


def run_kvspec(*args: str) -> subprocess.CompletedProcess:
    return vllm_copies.run_kvspec(*args, timeout=600)


def _workload_in_a_fresh_process(seed: int) -> str:
    code = "import json, sys; from kvspec.draws import codec; from kvspec.tools.review import make_workload; "
    code += f"sys.stdout.write(json.dumps(codec.encode(make_workload({seed}, 0.005))))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_the_workload_is_plain_data_and_the_same_for_the_same_seed():
    """The same seed gives the same workload run after run. Within one process it need not:
    Hypothesis mixes constants from the modules loaded so far into its draws, and the first
    draw loads more of them."""
    first, other = make_workload(3, 0.005), make_workload(4, 0.005)
    encoded = json.dumps(codec.encode(first))
    assert _workload_in_a_fresh_process(3) == _workload_in_a_fresh_process(3)
    assert encoded != json.dumps(codec.encode(other))
    assert codec.decode(json.loads(encoded)) == first  # crosses a process boundary unchanged
    # The gate's seed scenario comes first, so a report can show it when a bug reaches it.
    assert [case["name"] for case in first["lookups"][:2]] == [case["name"] for case in seed_lookups()]
    assert len(first["models"]) > len(first["real_models"]) and first["programs"]


def _lookup_result(length: int, blocks, violations=()):
    return {"core": {"hit": {"$": "Hit", "length": length, "real_blocks": {"$tuple": [{"$tuple": list(b)} for b in blocks]}},
                     "violations": [list(v) for v in violations]}}


def test_compare_files_new_violations_and_deltas_by_situation():
    """Synthetic answers: input 0 turns unsafe in head, input 1 gains a block, input 2 is unchanged."""
    setting = LookupSetting((CacheGroup(Kind.FULL, 4),), 4)
    cases = [{"setting": setting, "state": CacheState.full_prefix(1, n), "max_length": 4 * n, "paths": ("core",)} for n in (2, 3, 4)]
    workload = {"models": [], "real_models": [], "lookups": cases, "programs": []}
    side = {"label": "x", "version": "x", "seconds": 1, "models": [], "programs": []}
    base = dict(side, lookups=[_lookup_result(4, [[True]]), _lookup_result(4, [[True]]), _lookup_result(8, [[True, True]])])
    head = dict(side, lookups=[
        _lookup_result(8, [[True, True]], [(SAFE_HIT, "vLLM's hit 8 is unsafe"), (EQUALS_REFERENCE, "vLLM 8 != reference 4")]),
        _lookup_result(8, [[True, True]]),
        _lookup_result(8, [[True, True]]),
    ])
    report = compare(workload, base, head)
    [new] = report["new_violations"]
    assert (new["invariant"], new["count"], new["also"]) == (SAFE_HIT, 1, [EQUALS_REFERENCE])
    assert "assert hit ==" in new["regression_test"]  # a plain-vLLM test for the new violation
    [delta] = report["deltas"]
    assert (delta["change"], delta["count"], delta["tokens"]) == ("longer hit", 1, 4)
    text = markdown(dict(report, seed=0, seconds=1, command="kvspec review ..."))
    assert "**The head breaks 1 rule(s) the base keeps**" in text and "```python" in text


def _checkout_with_mamba_gate_removed(dest):
    release = releases_home() / supported_versions()[0]
    try:
        shutil.copytree(release / "vllm", dest / "vllm", copy_function=os.link)
    except OSError:
        shutil.copytree(release / "vllm", dest / "vllm")
    (dest / "vllm" / "_version.py").unlink()
    coordinator = dest / "vllm/v1/core/kv_cache_coordinator.py"
    text = coordinator.read_text()
    gate = "if drop_eagle_block and not isinstance(spec, MambaSpec):"
    assert gate in text
    coordinator.unlink()  # break the hard link: the release stays intact
    coordinator.write_text(text.replace(gate, "if drop_eagle_block:"))
    return dest


@pytest.mark.release_independent
def test_review_names_the_bug_of_a_checkout_and_gives_its_test(tmp_path):
    head = _checkout_with_mamba_gate_removed(tmp_path / "vllm-src")
    out = tmp_path / "review.json"
    proc = run_kvspec("review", "--base", supported_versions()[0], "--head", str(head), "--scale", "0.01",
                      "--json", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]  # head breaks a rule the base keeps
    report = json.loads(out.read_text())
    assert report["fixed_violations"] == [] and report["unchanged_violations"] == []
    seed = [r for r in report["new_violations"] if r["example"].startswith("the seed scenario")]
    # Hit 64 with full attention's blocks cut at 48: the target reads a null block (the
    # corruption of #43559); the hit also lacks the drafter's proof of token 64.
    assert seed and seed[0]["invariant"] == NULL_BLOCK
    assert DRAFTER_PROVEN in seed[0]["also"]
    assert "assert hit == 48" in seed[0]["regression_test"]
    assert "# kvspec review:" in proc.stdout and f". {NULL_BLOCK}\n" in proc.stdout  # one section per invariant


@pytest.mark.release_independent
def test_review_of_a_head_kvspec_cannot_drive_says_so_and_finds_no_new_violation(tmp_path):
    head = checkout_copy(releases_home() / supported_versions()[0], tmp_path / "vllm-src")
    rewrite(head / "vllm/v1/core/sched/scheduler.py", "_mamba_block_aligned_split", "_mamba_split_renamed", count=0)
    out = tmp_path / "review.json"
    proc = run_kvspec("review", "--base", supported_versions()[0], "--head", str(head), "--scale", "0.01",
                      "--json", str(out))
    assert proc.returncode == 3, proc.stderr[-2000:]  # kvspec's problem, not a head that breaks a rule
    report = json.loads(out.read_text())
    assert report["new_violations"] == [] and list(report["cannot_drive"]) == ["head"]
    [reason] = report["cannot_drive"]["head"]["programs"]
    assert "kvspec cannot drive vllm.v1.core.sched.scheduler:Scheduler._mamba_block_aligned_split" in reason
    assert report["inputs"]["operations"] == 0 and report["inputs"]["lookup"] > 0  # the rest is compared
    assert "**kvspec cannot drive the head** for programs" in proc.stdout
    assert "**The head introduces no new violation.**" in proc.stdout


@pytest.mark.release_independent
@pytest.mark.parametrize(
    "args, message",
    [
        (["--base", "0.35.0", "--head", "0.34.0"], "unsupported vLLM version '0.35.0'"),
        (["--base", "0.34.0", "--head", "/nonexistent"], "--head /nonexistent: no such directory"),
        (["--base", "0.34.0"], "the following arguments are required: --head"),
        (["--base", "0.34.0", "--head", "0.33.0", "--json", "/nonexistent/r.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_kvspec("review", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("kvspec: error: ")
    assert message in proc.stderr


def _run_emitted(source: str) -> None:
    namespace: dict = {}
    exec(compile(source, "<emitted vLLM test>", "exec"), namespace)  # noqa: S102 - our own output
    [test] = [f for name, f in namespace.items() if name.startswith("test_kvspec_")]
    test()


def test_an_emitted_grouping_test_passes_on_vllm_and_fails_on_the_bug(vllm_adapter):
    from kvspec.draws.real_models import GPT_OSS_EAGLE
    from kvspec.emit.vllm_tests import grouping_test
    from kvspec.impl.broken import applied

    source = grouping_test(GPT_OSS_EAGLE)  # 13 full and 12 sliding-window layers: the larger bucket sets the size
    assert "get_global_kv_cache_groups" in source and "import kvspec" not in source
    _run_emitted(source)
    with applied(vllm_adapter, ["group-size-always-smallest"]):
        with pytest.raises(AssertionError):
            _run_emitted(source)
