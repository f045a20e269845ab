"""Every KV-cache kind of spec/layers.py against vLLM's own spec class: the adapter builds it,
reads its kind back, and kvspec's page size and kind sets agree with vLLM's properties and its
manager registry (issue 15)."""

import pytest

from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import Symbol, resolve
from kvspec.spec.layers import (
    HITS_LIKE_FULL_KINDS,
    KIND_MANAGER,
    NOT_PREFIX_CACHEABLE_KINDS,
    VLLM_SPEC_CLASS,
    CacheGroup,
    Kind,
    LayerSpec,
    SpecDecode,
    page_size_bytes,
)

# One layer of each kind, with the fields its spec needs; sink_len a whole number of blocks
# (SinkFullAttentionManager asserts it).
ONE_OF_EACH = {
    Kind.FULL: LayerSpec(Kind.FULL, 16, num_kv_heads=2),
    Kind.MLA: LayerSpec(Kind.MLA, 16, head_size=576),
    Kind.SLIDING_WINDOW: LayerSpec(Kind.SLIDING_WINDOW, 16, window=128),
    Kind.CHUNKED_LOCAL: LayerSpec(Kind.CHUNKED_LOCAL, 16, chunk=64),
    Kind.MAMBA: LayerSpec(Kind.MAMBA, 16, state_bytes=1024),
    Kind.SLIDING_WINDOW_MLA: LayerSpec(Kind.SLIDING_WINDOW_MLA, 16, head_size=576, window=128),
    Kind.RSWA: LayerSpec(Kind.RSWA, 16, num_kv_heads=4, rswa_window=256),
    Kind.SINK_FULL: LayerSpec(Kind.SINK_FULL, 16, sink_len=32),
    Kind.CIRCULAR_BUFFER: LayerSpec(Kind.CIRCULAR_BUFFER, 16, dtype_bytes=4),
    Kind.CROSS_ATTENTION: LayerSpec(Kind.CROSS_ATTENTION, 16, num_kv_heads=8),
    Kind.ENCODER_ONLY: LayerSpec(Kind.ENCODER_ONLY, 16),
    Kind.HIDDEN_STATE: LayerSpec(Kind.HIDDEN_STATE, 16, head_size=4096),
    Kind.HISPARSE_HOT: LayerSpec(Kind.HISPARSE_HOT, 64, page_bytes=8192, blocks_per_request=2),
    Kind.HISPARSE_RESIDENT: LayerSpec(Kind.HISPARSE_RESIDENT, 64, page_bytes=8192),
}
VARIANTS = [
    LayerSpec(Kind.MLA, 64, head_size=576, tokens_per_state=4),  # DeepSeek-V4's compressed state
    LayerSpec(Kind.FULL, 16, num_kv_heads=2, tokens_per_state=2),
    LayerSpec(Kind.MAMBA, 16, state_bytes=1024, tp_replicated=True),
]
ALL_LAYERS = [*ONE_OF_EACH.values(), *VARIANTS]


def test_every_kind_has_a_layer_here():
    assert set(ONE_OF_EACH) == set(Kind)


@pytest.mark.parametrize("layer", ALL_LAYERS, ids=lambda layer: f"{layer.kind}-{layer.tokens_per_state}")
def test_the_adapter_builds_vllms_own_class_and_reads_the_kind_back(vllm_adapter, layer):
    spec = vllm_adapter.vllm_layer_spec(layer)
    assert type(spec).__name__ == VLLM_SPEC_CLASS[layer.kind]
    assert vllm_adapter.kind_of(spec) == layer.kind


@pytest.mark.parametrize("layer", ALL_LAYERS, ids=lambda layer: f"{layer.kind}-{layer.tokens_per_state}")
def test_page_size_is_vllms(vllm_adapter, layer):
    assert page_size_bytes(layer) == vllm_adapter.vllm_layer_spec(layer).page_size_bytes


@pytest.mark.parametrize("kind", list(Kind))
def test_prefix_cacheable_kinds_are_vllms(vllm_adapter, kind):
    spec = vllm_adapter.vllm_layer_spec(ONE_OF_EACH[kind])
    assert spec.prefix_cacheable == (kind not in NOT_PREFIX_CACHEABLE_KINDS)


_MANAGERS = Symbol("vllm.v1.core.single_type_kv_cache_manager")
_REGISTRY = Symbol("vllm.v1.kv_cache_spec_registry", "KVCacheSpecRegistry")


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_gets_the_manager_vllms_registry_names(vllm_adapter, kind):
    registry = resolve(_REGISTRY)
    registry._ensure_registered(vllm_adapter.engine_config(SpecDecode(), hybrid_manager=True))
    manager = registry.get_manager_class(vllm_adapter.vllm_layer_spec(ONE_OF_EACH[kind]), None)
    assert (manager.__name__ if manager else None) == KIND_MANAGER.get(kind)


def test_kinds_that_hit_like_full_attention_keep_its_lookup(vllm_adapter):
    managers = resolve(_MANAGERS)
    full_lookup = managers.FullAttentionManager.__dict__["find_longest_cache_hit"]
    for kind in HITS_LIKE_FULL_KINDS:
        manager = getattr(managers, KIND_MANAGER[kind])
        # The attribute as the class resolves it (a classmethod object, not a fresh bound method).
        owner = next(c for c in manager.__mro__ if "find_longest_cache_hit" in c.__dict__)
        assert owner.__dict__["find_longest_cache_hit"] is full_lookup, kind
    assert managers.CrossAttentionManager.__dict__.get("find_longest_cache_hit") is not None


def test_a_group_of_each_kind_reaches_vllm(vllm_adapter):
    groups = [CacheGroup(Kind.RSWA, 16, rswa_window=64), CacheGroup(Kind.SINK_FULL, 16, sink_len=16),
              CacheGroup(Kind.HISPARSE_HOT, 16), CacheGroup(Kind.CIRCULAR_BUFFER, 16)]
    specs = [g.kv_cache_spec for g in vllm_adapter.vllm_groups(groups)]
    assert [vllm_adapter.kind_of(s) for s in specs] == [g.kind for g in groups]


def test_symbols_name_the_classes_the_vocabulary_names():
    assert {kind: symbol.name for kind, symbol in SPEC_SYMBOLS.items()} == VLLM_SPEC_CLASS


@pytest.mark.parametrize("bad", [
    dict(kind=Kind.RSWA, block_size=16),  # no rswa_window
    dict(kind=Kind.FULL, block_size=16, sink_len=16),  # sink_len on another kind
    dict(kind=Kind.HISPARSE_RESIDENT, block_size=16, page_bytes=64, blocks_per_request=1),
    dict(kind=Kind.MLA, block_size=16, tokens_per_state=3),  # not a whole number of states
    dict(kind=Kind.FULL, block_size=16, tp_replicated=True),
])
def test_a_layer_missing_its_kinds_field_is_refused(bad):
    with pytest.raises(ValueError):
        LayerSpec(**bad)
