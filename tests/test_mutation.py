"""``kvspec mutate``: the operators do what they say, mutants are enumerated the same way every
time, one is put into the running vLLM and taken out again, and one known-killable mutant is
killed by the check it is mapped to. The full run is benchmarks/mutation_score.py."""

import inspect
import subprocess
import sys

import parso
import pytest
from cosmic_ray.mutating import mutate_code

from kvspec.tools.mutation import run_forked, select_mutants, verdict_of
from kvspec.tools.mutation_operators import OPERATORS
from kvspec.tools.mutation_targets import (
    TARGETS,
    Stillborn,
    applied,
    available,
    compile_mutant,
    enumerate_mutants,
    mutated_in_place,
    mutation_sites,
    source_of,
)

OWN_OPERATORS = [op for op in OPERATORS.values() if op.__module__ == "kvspec.tools.mutation_operators"]
BY_NAME = {t.name: t for t in TARGETS}


@pytest.mark.parametrize("operator", OWN_OPERATORS, ids=lambda op: op.__name__)
def test_each_own_operator_makes_its_documented_mutation(operator):
    for example in operator.examples():
        got = mutate_code(example.pre_mutation_code, operator(), example.occurrence)
        assert got == example.post_mutation_code, f"{operator.__name__} at {example.occurrence}: {got!r}"


def test_an_operator_with_no_site_left_mutates_nothing():
    assert mutate_code("x = a and b", OPERATORS["DropOperand"](), 2) is None


@pytest.fixture(scope="module")
def mutants(vllm_adapter):
    return {t.name: enumerate_mutants(t) for t in TARGETS if available(t)}


def test_enumeration_is_deterministic_and_ids_are_unique(vllm_adapter, mutants):
    again = {t.name: enumerate_mutants(t) for t in TARGETS if available(t)}
    assert {name: [m.id for m in ms] for name, ms in again.items()} == {
        name: [m.id for m in ms] for name, ms in mutants.items()
    }
    ids = [m.id for ms in mutants.values() for m in ms]
    assert len(ids) == len(set(ids)) >= 150
    assert all(mutants[name] for name in mutants), "a target with no mutant"


def test_each_mutation_made_in_place_prints_what_cosmic_ray_compiles_and_is_undone(vllm_adapter, mutants):
    """enumerate_mutants mutates one parsed tree and undoes each mutation; compile_mutant parses
    the source afresh (cosmic-ray's mutate_code). Every site of every operator, compared on the
    target with the most sites and, for each operator, the smallest target that has it."""
    by_size = sorted(mutants, key=lambda name: (len(mutants[name]), name))
    used = {m.operator for ms in mutants.values() for m in ms}
    chosen = {by_size[-1]} | {next(n for n in by_size if op in {m.operator for m in mutants[n]}) for op in used}
    compared = set()
    for name in sorted(chosen):
        source = source_of(BY_NAME[name])
        tree = parso.parse(source)
        for operator_name, operator in sorted(OPERATORS.items()):
            for site, node, index, _ in mutation_sites(tree, operator()):
                in_place = mutated_in_place(tree, node, operator(), index)
                assert in_place == mutate_code(source, operator(), site), f"{name}:{operator_name}:{site}"
                compared.add(operator_name)
        assert tree.get_code() == source, f"{name}: a mutation was left in the tree"
    assert compared >= used


def test_sites_in_asserts_and_signatures_are_left_out(mutants):
    full = mutants["FullAttentionManager.find_longest_cache_hit"]
    assert not [m for m in full if m.original.startswith("assert") or m.original.startswith("dcp_world_size: int")]


def test_the_sample_is_reproducible_from_the_seed_and_spread_over_functions(mutants):
    every = [m for ms in mutants.values() for m in ms]
    first, again, other = (select_mutants(every, 60, seed) for seed in (0, 0, 1))
    assert [m.id for m in first] == [m.id for m in again] and len(first) == 60
    assert [m.id for m in first] != [m.id for m in other]
    assert len({m.target.name for m in first}) >= 10


def test_a_method_mutant_applies_and_is_undone(vllm_adapter, mutants):
    from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator

    original = HybridKVCacheCoordinator.__dict__["find_longest_cache_hit"]
    mutant = _mamba_gate_dropped(mutants)
    with applied(mutant):
        patched = HybridKVCacheCoordinator.__dict__["find_longest_cache_hit"]
        assert patched is not original
        assert patched.__code__.co_filename == f"<mutant {mutant.id}>"
        assert patched.__globals__ is inspect.getmodule(original).__dict__  # vLLM's own module globals
    assert HybridKVCacheCoordinator.__dict__["find_longest_cache_hit"] is original


def test_a_module_function_is_replaced_wherever_vllm_imported_it(vllm_adapter, mutants):
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import coordinator as mooncake
    from vllm.v1.core import kv_cache_coordinator, kv_cache_utils

    original = kv_cache_utils.eagle_proof_margin
    [always_block] = [m for m in mutants["eagle_proof_margin"] if m.operator == "ReplaceConditionWithFalse"]
    with applied(always_block):
        assert kv_cache_utils.eagle_proof_margin is not original
        assert kv_cache_coordinator.eagle_proof_margin is kv_cache_utils.eagle_proof_margin
        assert mooncake.eagle_proof_margin is kv_cache_utils.eagle_proof_margin
        assert vllm_adapter.eagle_proof_margin(16, 4, True) == 16  # the fine-grained margin is gone
    assert kv_cache_utils.eagle_proof_margin is original is kv_cache_coordinator.eagle_proof_margin
    assert vllm_adapter.eagle_proof_margin(16, 4, True) == 4


def test_a_mutant_that_does_not_compile_is_stillborn(mutants):
    # cosmic-ray's AddNot writes `if not x := f():`, which Python rejects.
    walrus = [m for m in mutants["MambaManager.find_longest_cache_hit"] if m.operator == "AddNot" and ":=" in m.original]
    assert walrus
    with pytest.raises(Stillborn, match="SyntaxError"):
        compile_mutant(walrus[0])


def test_the_dropped_mamba_gate_is_killed_by_the_seed_check_it_is_mapped_to(vllm_adapter, mutants):
    from kvspec.tools.mutation import _run_one

    mutant = _mamba_gate_dropped(mutants)
    assert mutant.target.checks[0] == "seed: hybrid coordinator"
    row = _run_one(vllm_adapter, mutant, seed=0, check_seconds={})
    assert (row["status"], row["killed_by"]) == ("killed", "seed: hybrid coordinator")
    assert "vLLM hit 64, expected 48" in row["detail"]


def test_a_hung_child_is_reported_as_a_timeout_not_a_verdict():
    import time

    assert run_forked(lambda: time.sleep(60), timeout=0.5) == ("timeout", None)
    assert run_forked(lambda: 6 * 7, timeout=30) == ("ok", 42)


def test_a_verdict_for_another_version_of_the_line_does_not_carry_over(mutants):
    mutant = mutants["eagle_proof_margin"][0]
    assert verdict_of(mutant, {mutant.id: {"verdict": "equivalent", "reason": "r", "line": mutant.original}}) == (
        "equivalent",
        "r",
    )
    assert verdict_of(mutant, {mutant.id: {"verdict": "gap", "line": "something else"}})[0] == "untriaged"
    # One verdict for each release's version of the line.
    both = {mutant.id: {"verdict": "gap", "reason": "r", "line": ["something else", mutant.original]}}
    assert verdict_of(mutant, both) == ("gap", "r")


def test_an_unknown_function_is_refused_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "kvspec.cli", "mutate", "--function", "no_such_function"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("kvspec: error: unknown function 'no_such_function'")
    assert len(proc.stderr.strip().splitlines()) == 1


def _mamba_gate_dropped(mutants):
    """`if drop_eagle_block and not isinstance(spec, MambaSpec):` -> `if (drop_eagle_block):`:
    the missing Mamba gate of vLLM #43559."""
    [mutant] = [
        m
        for m in mutants["HybridKVCacheCoordinator.find_longest_cache_hit"]
        if m.operator == "DropOperand" and m.mutated == "if (drop_eagle_block):"
    ]
    return mutant


@pytest.mark.parametrize("release", ["0.34.0", "0.33.0"])
def test_every_survivor_of_the_recorded_run_is_triaged(tmp_path, release):
    """The committed report (benchmarks/results/) judged again with the committed triage: no
    survivor is left without a verdict, and each verdict gives its reason."""
    import json
    import tomllib

    from kvspec.impl.target import PROJECT_ROOT

    recorded = PROJECT_ROOT / "benchmarks" / "results" / f"mutation_score-{release}.json"
    out = tmp_path / "again.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kvspec.cli", "mutate", "--from-json", str(recorded), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "untriaged in" not in proc.stdout, proc.stdout[-2000:]
    survivors = [m for m in json.loads(out.read_text())["mutants"] if m["status"] == "survived"]
    assert survivors and all(m["verdict"] in ("equivalent", "gap") and m["reason"] for m in survivors)
    triage = tomllib.loads((PROJECT_ROOT / "benchmarks" / "mutation_triage.toml").read_text())
    assert all(entry["verdict"] in ("equivalent", "gap") and entry["reason"] for entry in triage.values())
    assert all(entry["verdict"] == "gap" for entry in triage.values() if "outside" in entry)
