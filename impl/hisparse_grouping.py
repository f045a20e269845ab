"""vLLM's grouping of a model's layers with HiSparse configured: the adapter's grouping entry
(impl/vllm_adapter.py:VllmAdapter.group_workers_layers) on a real VllmConfig whose
attention_config carries vLLM's own HiSparseConfig, so that kv_cache_planning:get_kv_cache_groups
takes its HiSparse branch (vllm.v1.hisparse.layout:get_hisparse_kv_cache_groups).

It reports each group with its role, whether it lives in the host pool, a hot group's blocks per
request and whether a KV connector transfers the group, in the vocabulary of
spec/hisparse_grouping.py; it computes nothing vLLM computes.
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.grouping_entry import groups_before_sizing
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.hisparse_grouping import GroupRole, HiSparseSetting, RoledGroup
from kvspec.spec.layers import LayerSpec, SpecDecode
from kvspec.spec.releases import GROUPS_PLANNED_BEFORE_SIZING


def hisparse_engine_config(adapter, setting: HiSparseSetting):
    """The adapter's engine config with HiSparse configured. The field is set after the config is
    built: VllmConfig.__post_init__ refuses HiSparse on a platform without its backend (CPU), a
    check of the platform, not of the grouping."""
    config = adapter.engine_config(SpecDecode(), hybrid_manager=True)
    config.attention_config.hisparse_config = resolve(S.HISPARSE_CONFIG)(device_buffer_size=setting.device_buffer_size)
    # ResolvedHiSparseConfig.from_vllm_config falls back on the model's index_topk.
    config.model_config.hf_config.index_topk = setting.index_topk
    return config


def group_hisparse_layers(adapter, layers: dict[str, LayerSpec], setting: HiSparseSetting) -> tuple[RoledGroup, ...]:
    """vLLM's groups of one model's layers with HiSparse configured as ``setting``, through the
    entry the grouping check drives (get_global_kv_cache_groups, or on a release without
    GROUPS_PLANNED_BEFORE_SIZING the same steps of get_kv_cache_configs). vLLM's exceptions
    propagate unchanged."""
    config = hisparse_engine_config(adapter, setting)
    specs = [{name: adapter.vllm_layer_spec(layer) for name, layer in layers.items()}]
    if adapter.has(GROUPS_PLANNED_BEFORE_SIZING):
        groups = resolve(S.GET_GLOBAL_KV_CACHE_GROUPS)(config, specs)
    else:
        groups = groups_before_sizing(config, specs)
    return tuple(_roled(adapter, group) for group in groups)


def _roled(adapter, group) -> RoledGroup:
    return RoledGroup(
        group=adapter.group_out(group),
        role=GroupRole(group.role.value),
        host_resident=group.host_resident,
        blocks_per_request=getattr(group.kv_cache_spec, "blocks_per_request", None),
        kv_transfer=group.enable_kv_transfer,
    )
