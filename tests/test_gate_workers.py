"""``kvspec check --jobs N`` (kvspec/tools/gate_workers.py): the checks spread over forked
processes report exactly what one process reports, every check gets a verdict even when its
worker dies, and the shares balance the checks' typical times."""

import json
import os

import pytest
from vllm_copies import run_kvspec

from kvspec.gate.names import Check, Outcome
from kvspec.gate.options import GateOptions
from kvspec.gate.registry import CHECKS, TYPICAL_SECONDS
from kvspec.impl.target import supported_versions
from kvspec.tools import gate_workers, matrix

COMPARED = ("check", "verdict", "covered", "details", "coverage", "minimums", "not_in_release")


def test_the_shares_cover_every_check_once_in_the_registry_order():
    names = list(CHECKS)
    shares = gate_workers.shares(names, 2)
    assert sorted(n for share in shares for n in share) == sorted(names)
    for share in shares:
        assert share == [n for n in names if n in share]
    loads = [sum(TYPICAL_SECONDS[n] for n in share) for share in shares]
    assert max(loads) - min(loads) <= max(TYPICAL_SECONDS.values())  # longest first, onto the least loaded
    assert gate_workers.shares(names, 1) == [names]


# The newest release with a recorded finding (release-findings.toml): its quick gate has checks
# that hold and checks that fail, and the workers' reports must merge both.
WITH_A_FINDING = next(v for v in supported_versions() if any(v in f.releases for f in matrix.load()))


@pytest.mark.release_independent
def test_a_run_over_two_processes_reports_what_one_process_reports(tmp_path):
    reports = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs-{jobs}.json"
        proc = run_kvspec("check", "--quick", "--vllm", WITH_A_FINDING, "--jobs", str(jobs), "--json", str(out),
                          timeout=900)
        assert proc.returncode == 1 and out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
        reports[jobs] = json.loads(out.read_text())
    assert {row["verdict"] for row in reports[1]["checks"]} >= {Outcome.HOLDS, Outcome.RULE_VIOLATED}
    serial, parallel = ([{k: row[k] for k in COMPARED} for row in reports[j]["checks"]] for j in (1, 2))
    assert [row["check"] for row in serial] == [n for n in CHECKS if n != Check.PROOFS]
    assert parallel == serial


def test_a_worker_that_dies_has_its_checks_run_again_by_the_parent(vllm_adapter, monkeypatch):
    parent, real = os.getpid(), gate_workers._run_one

    def dies_in_a_worker(adapter, options, name):
        if os.getpid() != parent and name == Check.WARNING_GATE:
            os._exit(9)  # as a segfault would: no report
        return real(adapter, options, name)

    monkeypatch.setattr(gate_workers, "_run_one", dies_in_a_worker)
    names = [Check.SEED_HYBRID, Check.WARNING_GATE, Check.LIVE_MANAGER]
    results = gate_workers.run_in_workers(vllm_adapter, GateOptions(scale=0.05), names, 2)
    assert [r.name for r in results] == names
    assert all(r.holds for r in results), [r.details for r in results]
