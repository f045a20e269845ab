"""The five outcomes of a check, each shown on a deliberately broken copy of the release under
test: kvspec failing to drive a changed vLLM is never reported as a vLLM bug, and a vLLM that
crashes or hangs is a finding with its input, not a broken set-up."""

import json
import time

import pytest
from vllm_copies import checkout_copy, rewrite, run_emitted_in, run_kvspec

from kvspec.impl.target import resolve
from kvspec.impl.watchdog import VllmHung, watching

RELEASE = resolve()  # the release this test run targets (KVSPEC_VLLM)
STATEFUL, LIVE, LOOKUPS = "stateful KVCacheManager", "live KVCacheManager", "prefix-cache lookups"
# A check that holds on every release at the quick budget (grouping meets 0.31-0.33's recorded
# crash there), run beside the broken one to show the gate goes on.
OTHER = "block sizes"


def broken_copy(tmp_path, relative: str, old: str, new: str, count: int = 1):
    checkout = checkout_copy(RELEASE.root, tmp_path / "vllm-src")
    rewrite(checkout / relative, old, new, count=count)
    return checkout


def check(tmp_path, checkout, *names, extra=()):
    out = tmp_path / "check.json"
    args = ["check", "--quick", "--vllm-src", str(checkout), "--json", str(out), *extra]
    for name in names:
        args += ["--check", name]
    proc = run_kvspec(*args)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report and {c["check"]: c for c in report["checks"]}


def test_a_renamed_method_cannot_drive_the_rows_that_need_it_and_the_rest_get_verdicts(tmp_path):
    checkout = broken_copy(tmp_path, "vllm/v1/core/sched/scheduler.py", "_mamba_block_aligned_split",
                           "_mamba_split_renamed", count=0)
    proc, checks = check(tmp_path, checkout, STATEFUL, LIVE)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert checks[STATEFUL]["verdict"] == "cannot drive"
    first = checks[STATEFUL]["details"][0]
    assert "kvspec cannot drive vllm.v1.core.sched.scheduler:Scheduler._mamba_block_aligned_split" in first
    assert "(used at impl/live.py:" in first
    assert checks[LIVE]["verdict"] == "holds"
    assert any(line.startswith(STATEFUL) and "cannot drive: kvspec cannot drive" in line for line in proc.stdout.splitlines())


def test_a_driven_function_that_raises_is_a_crash_with_a_vllm_test_that_reproduces_it(tmp_path):
    # A sliding window that pops its EAGLE block even when it hit nothing: IndexError.
    manager = "vllm/v1/core/single_type_kv_cache_manager.py"
    checkout = broken_copy(tmp_path, manager, "if drop_eagle_block and computed_blocks[0]:", "if drop_eagle_block:")
    proc, checks = check(tmp_path, checkout, LOOKUPS, OTHER)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = checks[LOOKUPS]
    assert row["verdict"] == "vLLM crashed"
    assert row["details"][0].startswith("vLLM raised IndexError: pop from empty list (at vllm.v1.core.")
    assert any(line.startswith(("Falsifying example", "Failing test case")) for line in row["details"])  # minimal input
    marker = "as a vLLM test that reproduces the crash:"
    source = "\n".join(row["details"][row["details"].index(marker) + 1 :])
    assert checks[OTHER]["verdict"] == "holds"  # the other check still ran
    crashed = run_emitted_in(checkout, source, tmp_path)
    assert crashed.returncode != 0 and "IndexError: pop from empty list" in crashed.stderr
    clean = run_emitted_in(RELEASE.root, source, tmp_path)
    assert clean.returncode == 0, clean.stderr  # the same test passes on the release


def test_a_driven_loop_that_never_ends_is_a_hang_with_its_input_within_the_deadline(tmp_path):
    # The Mooncake store's fixed point never reached on a hybrid that is not [full, one other
    # kind]: its exit test made strict.
    store = "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/coordinator.py"
    checkout = broken_copy(tmp_path, store, "if curr_hit_length >= hit_length:", "if curr_hit_length > hit_length:")
    started = time.monotonic()
    proc, checks = check(tmp_path, checkout, LOOKUPS, OTHER, extra=["--deadline", "3"])
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = checks[LOOKUPS]
    assert row["verdict"] == "vLLM hung"
    first = row["details"][0]
    mooncake = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator"
    assert first.startswith(f"a call into vLLM ({mooncake}:"), first
    assert "in find_longest_cache_hit) did not return within 3 s (it was running vllm." in first
    assert "entered from vllm_adapter.py:" in first and "mooncake_hit(setting=LookupSetting(" in first
    assert checks[OTHER]["verdict"] == "holds"
    assert elapsed < 120  # one deadline, not one per shrinking step


def test_a_hang_in_the_stateful_machine_carries_the_program_that_hangs_it(tmp_path):
    # The core hybrid coordinator's fixed point made unreachable, as the Mooncake store's above.
    coordinator = "vllm/v1/core/kv_cache_coordinator.py"
    checkout = broken_copy(tmp_path, coordinator, "if curr_hit_length >= hit_length:", "if curr_hit_length > hit_length:")
    proc, checks = check(tmp_path, checkout, STATEFUL, extra=["--deadline", "3"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = checks[STATEFUL]
    assert row["verdict"] == "vLLM hung"
    assert "(vllm.v1.core.kv_cache_manager:" in row["details"][0]  # the call kvspec made
    [program] = [line for line in row["details"] if line.startswith("in the run configured MachineConfig(")]
    operations = program.split("after the operations ", 1)[1]
    assert operations.startswith("[(") and any(f"('{rule}'," in operations for rule in ("add", "schedule", "compute_prompt"))


def test_a_syntax_error_is_one_line_and_exit_2(tmp_path):
    checkout = checkout_copy(RELEASE.root, tmp_path / "vllm-src")
    coordinator = checkout / "vllm/v1/core/kv_cache_coordinator.py"
    rewrite(coordinator, "class HybridKVCacheCoordinator(", "class HybridKVCacheCoordinator((")
    proc = run_kvspec("check", "--quick", "--vllm-src", str(checkout))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # At most the run's header, printed before vLLM is imported; no table, and one error line.
    assert proc.stdout in ("", proc.stdout.splitlines()[0] + "\n") and "covered" not in proc.stdout
    # stderr: progress lines (indented), then the one error line.
    [error] = [line for line in proc.stderr.splitlines() if not line.startswith("  ")]
    assert error.startswith("kvspec: error: vLLM's vllm.v1.core.kv_cache_coordinator does not import: ")
    assert f"{coordinator}:" in error and "SyntaxError" in error


# ------------------------------------------------------------------ the watchdog itself
def _vllm_function(source: str, name: str):
    """A function that runs as vLLM code (its module's name is a vLLM one)."""
    namespace = {"__name__": "vllm.kvspec_watchdog_test"}
    exec(compile(source, "<vllm>", "exec"), namespace)
    return namespace[name]


def test_the_watchdog_stops_a_vllm_call_that_never_returns():
    spin = _vllm_function("def spin():\n    while True:\n        pass\n", "spin")
    started = time.monotonic()
    with pytest.raises(VllmHung) as hung, watching(1.0):
        spin()
    assert 1.0 <= time.monotonic() - started < 5
    assert hung.value.where in ("vllm.kvspec_watchdog_test:2 in spin", "vllm.kvspec_watchdog_test:3 in spin")


def test_the_watchdog_leaves_kvspecs_own_slow_work_and_short_vllm_calls_alone():
    short = _vllm_function("import time\ndef short():\n    time.sleep(0.3)\n", "short")
    with watching(1.0) as watchdog:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:  # kvspec's own loop, longer than the deadline
            pass
        for _ in range(6):  # calls into vLLM, 1.8 s in all but each far under the deadline
            short()
    assert watchdog.longest < 1.0
