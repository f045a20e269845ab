"""The capability probe (impl/capabilities.py) and the adapter's calls under the target's release
rules: where a rule of spec/releases.py changes a call (a keyword, an argument, a module a symbol
moved out of), the call and the probe that checks it before any example follow the rule."""

from types import SimpleNamespace

from kvspec.gate.names import Check, Outcome
from kvspec.impl import vllm_symbols as S
from kvspec.impl.capabilities import DRIVES, _missing, probe
from kvspec.impl.failures import classify, describe
from kvspec.impl.stand_in import StandIn
from kvspec.impl.vllm_symbols import Symbol, resolve
from kvspec.spec.layers import Kind, LayerSpec
from kvspec.spec.releases import (
    DRAFT_LAYERS_FLAGGED_ON_SPEC,
    GROUPS_PLANNED_BEFORE_SIZING,
    LOOKAHEAD_BLOCK_HASHES,
    MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE,
    ReleaseRule,
)

# A rule no release has, to give a call a shape vLLM never took.
NEVER_READ = ReleaseRule("a keyword vLLM never took", (), "nowhere", "a call no release binds")


def test_every_check_says_which_vllm_symbols_it_drives():
    assert list(DRIVES) == list(Check)
    named = {value for value in vars(S).values() if isinstance(value, Symbol)}
    assert all(symbol in named for symbols in DRIVES.values() for symbol in symbols)


def test_a_call_takes_the_keywords_and_arguments_of_the_rules_its_target_has():
    assert "num_hash_lookahead_tokens" in S.KV_CACHE_MANAGER.call_shape({LOOKAHEAD_BLOCK_HASHES})[1]
    assert "num_hash_lookahead_tokens" not in S.KV_CACHE_MANAGER.call_shape(frozenset())[1]
    assert S.GET_REQUEST_BLOCK_HASHER.call_shape({LOOKAHEAD_BLOCK_HASHES})[0] == 3
    assert S.GET_REQUEST_BLOCK_HASHER.call_shape(frozenset())[0] == 2
    assert "is_draft" in S.MAMBA_SPEC.call_shape({DRAFT_LAYERS_FLAGGED_ON_SPEC})[1]
    assert "is_draft" not in S.MAMBA_SPEC.call_shape(frozenset())[1]
    told = S.MOONCAKE_COORDINATOR.call_shape({MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE})[1]
    assert "enable_partial_hash_hits" in told
    assert "enable_partial_hash_hits" not in S.MOONCAKE_COORDINATOR.call_shape(frozenset())[1]


def test_the_probe_binds_each_call_as_the_adapter_makes_it_under_the_targets_rules(vllm_adapter):
    assert probe(list(Check), vllm_adapter.rules) == {check: [] for check in Check}
    assert probe([Check.STATEFUL], frozenset())[Check.STATEFUL] == []  # the older call binds too
    wrong = Symbol(S.KV_CACHE_MANAGER.module, "KVCacheManager", takes=S.KV_CACHE_MANAGER.takes,
                   takes_under=((NEVER_READ, 0, ("no_such_keyword",)),))
    assert _missing(wrong, frozenset()) is None
    missing = _missing(wrong, {NEVER_READ})
    assert missing is not None and "no_such_keyword" in missing.reason and missing.signature


def test_a_release_s_other_way_to_an_answer_is_probed_only_on_that_release():
    driven = {rules: [s for s in DRIVES[Check.GROUPING] if s.driven_under(rules)]
              for rules in (frozenset({GROUPS_PLANNED_BEFORE_SIZING}), frozenset())}
    assert S.GET_GLOBAL_KV_CACHE_GROUPS in driven[frozenset({GROUPS_PLANNED_BEFORE_SIZING})]
    assert S.GET_KV_CACHE_CONFIGS not in driven[frozenset({GROUPS_PLANNED_BEFORE_SIZING})]
    assert S.GET_GLOBAL_KV_CACHE_GROUPS not in driven[frozenset()]
    assert S.GET_KV_CACHE_CONFIGS in driven[frozenset()]


def test_a_symbol_that_moved_out_of_a_module_is_found_where_older_trees_keep_it(vllm_adapter):
    moved = Symbol("vllm.v1.core.kv_cache_utils", "KVCacheManager", older_module="vllm.v1.core.kv_cache_manager")
    assert resolve(moved) is resolve(S.KV_CACHE_MANAGER)


def test_a_release_without_the_spec_draft_flag_is_not_given_one(vllm_adapter, monkeypatch):
    draft = LayerSpec(Kind.FULL, 16, num_kv_heads=2, head_size=64, is_draft=True)
    assert vllm_adapter.vllm_layer_spec(draft).is_draft
    monkeypatch.setattr(vllm_adapter, "rules", vllm_adapter.rules - {DRAFT_LAYERS_FLAGGED_ON_SPEC})
    assert not vllm_adapter.vllm_layer_spec(draft).is_draft


def _split_with(scheduler, request):
    try:
        resolve(S.SCHEDULER_MAMBA_SPLIT)(scheduler, request, 16, 0)
    except AttributeError as exc:
        return exc
    raise AssertionError("vLLM read no field of the empty objects")


def test_vllm_reading_a_field_a_stand_in_lacks_is_kvspecs_failure_not_a_crash(vllm_adapter):
    exc = _split_with(StandIn("Scheduler"), StandIn("Request"))
    assert classify(exc) is Outcome.CANNOT_DRIVE
    assert "which kvspec's stand-in lacks" in describe(exc) and "vllm.v1.core.sched.scheduler:" in describe(exc)
    # The same read of an object that is not kvspec's stand-in is vLLM's own crash.
    assert classify(_split_with(SimpleNamespace(), SimpleNamespace())) is Outcome.VLLM_CRASHED
