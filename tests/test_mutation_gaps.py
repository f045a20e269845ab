"""Each situation added to the gate for a survivor of ``kvspec mutate`` catches that mutant: the
piece holds on vLLM as it is, fails with the mutant applied in memory, and holds again once it
is taken out. (The whole gate against the same mutants: ``kvspec mutate --id <mutant>``.)"""

import pytest

from kvspec.draws.block_sizes import FIXED_DCP_AND_CACHE_CASES
from kvspec.draws.lookups import FIXED_DCP_LOOKUPS
from kvspec.gate.block_sizes import resolves_as_spec_dcp_says
from kvspec.gate.grouping import workers_conform
from kvspec.gate.lookups import core_conforms, dcp_core_conforms
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.stateful.fixed import FIXED_RUNS, run_fixed
from kvspec.stateful.machine import make_cache_machine
from kvspec.tools.mutation_targets import TARGETS, applied, available, enumerate_mutants

FULL, MAMBA = Kind.FULL, Kind.MAMBA

# [full 16, mamba 16]: full attention caches 4 blocks, Mamba only block 1. The hit is 32, the
# longest single-group hit 64, so vLLM reports 32 uncached common-prefix tokens.
UNCACHED_PREFIX_CASE = (
    LookupSetting((CacheGroup(FULL, 16), CacheGroup(MAMBA, 16)), 16),
    CacheState(4, frozenset({(0, j) for j in range(4)} | {(1, 1)})),
    64,
)
LAYER = LayerSpec(FULL, 16)
DISAGREEING_WORKERS = (
    Model({"model.layers.0.attn": LAYER, "model.layers.1.attn": LAYER}),
    [{"model.layers.0.attn": LAYER, "model.layers.1.attn": LAYER},
     {"model.layers.0.attn": LayerSpec(FULL, 32), "model.layers.1.attn": LAYER}],
)  # fmt: skip
PIPELINE_STAGES = (DISAGREEING_WORKERS[0], [{"model.layers.0.attn": LAYER}, {"model.layers.1.attn": LAYER}])
# The stateful check's fixed runs (kvspec/stateful/fixed.py): four under multi-module MTP, then
# two sliding windows under the EAGLE drop.
(ONE_GROUP_MTP, ONE_TOKEN_BLOCKS_MTP, BESIDE_A_WINDOW_MTP, BESIDE_MAMBA_MTP,
 WINDOW_REPLAY_BOUNDARIES, WINDOW_DENSE_TAILS) = FIXED_RUNS


def fixed_run_holds(run):
    return lambda adapter: run_fixed(make_cache_machine(adapter), run)


CASES = {
    "HybridKVCacheCoordinator.find_longest_cache_hit:ReplaceBinaryOperator_Sub_Add:0":
        lambda adapter: core_conforms(adapter, UNCACHED_PREFIX_CASE),
    "FullAttentionManager.find_longest_cache_hit:ReplaceComparisonOperator_Gt_LtE:0":
        lambda adapter: dcp_core_conforms(adapter, FIXED_DCP_LOOKUPS[0]),
    "resolve_kv_cache_block_sizes:DropOperand:1":
        lambda adapter: resolves_as_spec_dcp_says(adapter, FIXED_DCP_AND_CACHE_CASES[0]),
    "partial_hash_hits_enabled:ReplaceComparisonOperator_Gt_Lt:1":
        lambda adapter: resolves_as_spec_dcp_says(adapter, FIXED_DCP_AND_CACHE_CASES[1]),
    "resolve_kv_cache_block_sizes:ReplaceConditionWithFalse:3":
        lambda adapter: resolves_as_spec_dcp_says(adapter, FIXED_DCP_AND_CACHE_CASES[2]),
    "get_global_kv_cache_groups:ReplaceConditionWithTrue:0":
        lambda adapter: workers_conform(adapter, DISAGREEING_WORKERS),
    "KVCacheCoordinator.get_num_cacheable_tokens:ReplaceBinaryOperator_Sub_Add:0": fixed_run_holds(ONE_GROUP_MTP),
    "KVCacheCoordinator.get_num_cacheable_tokens:NumberReplacer:0": fixed_run_holds(ONE_TOKEN_BLOCKS_MTP),
    "HybridKVCacheCoordinator.get_num_cacheable_tokens:ReplaceBinaryOperator_Sub_Add:0":
        fixed_run_holds(BESIDE_A_WINDOW_MTP),
    "HybridKVCacheCoordinator.get_num_cacheable_tokens:NumberReplacer:0": fixed_run_holds(BESIDE_MAMBA_MTP),
    **{f"replay_boundaries:{op}": fixed_run_holds(WINDOW_REPLAY_BOUNDARIES)
       for op in ("NumberReplacer:3", "ReplaceBinaryOperator_FloorDiv_Mul:0", "ReplaceBinaryOperator_FloorDiv_Mul:1",
                  "ReplaceBinaryOperator_Sub_Add:1")},
    **{f"SlidingWindowManager.reachable_block_mask:{op}": fixed_run_holds(WINDOW_DENSE_TAILS)
       for op in ("DropOperand:0", "ReplaceConditionWithTrue:10")},
    "HybridKVCacheCoordinator.get_num_cacheable_tokens:NumberReplacer:2": fixed_run_holds(BESIDE_MAMBA_MTP),
}  # fmt: skip


@pytest.fixture(scope="module")
def mutants_by_id(vllm_adapter):
    return {m.id: m for t in TARGETS if available(t) for m in enumerate_mutants(t)}


@pytest.mark.parametrize("mutant_id", sorted(CASES))
def test_the_new_situation_kills_the_survivor(vllm_adapter, mutants_by_id, mutant_id):
    piece = CASES[mutant_id]
    piece(vllm_adapter)  # holds on vLLM as it is
    with applied(mutants_by_id[mutant_id]), pytest.raises(AssertionError):
        piece(vllm_adapter)
    piece(vllm_adapter)  # and again once the mutant is out


def test_the_uncached_prefix_is_what_vllm_reports(vllm_adapter):
    answer = vllm_adapter.coordinator_answer(UNCACHED_PREFIX_CASE[0], UNCACHED_PREFIX_CASE[1], 64)
    assert (answer.hit.length, answer.uncached_common_prefix) == (32, 32)


def test_pipeline_stages_group_as_one_worker_and_disagreeing_workers_are_refused(vllm_adapter):
    workers_conform(vllm_adapter, PIPELINE_STAGES)
    with pytest.raises(AssertionError):
        vllm_adapter.group_workers_layers(DISAGREEING_WORKERS[1])
