"""How vLLM groups a model's layers when HiSparse is configured, in small words.

Read from vLLM 0.34.0 (vllm/v1/hisparse/layout.py:get_hisparse_kv_cache_groups,
_partition_hisparse_specs, _lay_out_hisparse_groups; vllm/v1/hisparse/runtime.py:
ResolvedHiSparseConfig.from_vllm_config) and the same in 0.33.0; 0.31 and 0.32 differ only in
the top-k (spec/releases.py:HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER); 0.30 lays HiSparse out
elsewhere (spec/releases.py:HISPARSE_LAID_OUT_WHEN_GROUPED, not stated here).

With ``attention_config.hisparse_config`` set and at least one MLA layer, vLLM's grouping
(kv_cache_planning:get_kv_cache_groups) returns, in this order: the host source group (every
sparse MLA layer), the indexer group (every indexer layer), one resident group per hot group,
the hot groups, then the ordinary groups of the other layers. Out of scope: speculative
decoding (the hot buffer is sized for one decode query per step), DCP sharding, the hybrid
manager turned off, hidden-state layers (MLAAttentionSpec's subclass: its default role would
make it a sparse source layer; no model has both).

An MLA layer with neither role cannot be built: SparseCacheRole has exactly the two members and
every constructor passes one or keeps the default SPARSE. A spec given some other value would be
in no group at all, silently on 0.31-0.32; from 0.33 get_global_kv_cache_groups's
_check_exact_partition then raises. No model reaches it, so it is no finding.

``reference/hisparse_grouping.py`` chains these rules with the ordinary grouping of
``reference/grouping.py`` for the non-MLA layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kvspec.spec.grouping import MLA_FAMILY, UNIFORM_TYPE_CLASS, Group, Refusal
from kvspec.spec.layers import VLLM_SPEC_CLASS, Kind, LayerSpec, page_size_bytes
from kvspec.spec.releases import HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER, NEWEST_RULES

# vllm.v1.hisparse.layout:HISPARSE_HOT_SUFFIX, HISPARSE_RESIDENT_SUFFIX
HOT_SUFFIX = ".hisparse_hot"
RESIDENT_SUFFIX = ".hisparse_resident"
# The largest hot buffer a request may have: its slots are int16 indices
# (runtime.py:ResolvedHiSparseConfig.from_vllm_config, torch.iinfo(torch.int16).max + 1).
MAX_DEVICE_BUFFER_SIZE = 2**15


class GroupRole(StrEnum):
    """What a group is to HiSparse (vllm.v1.kv_cache_interface:KVCacheGroupRole)."""

    DEFAULT = "default"
    HISPARSE_SOURCE = "hisparse_source"
    HISPARSE_INDEXER = "hisparse_indexer"


@dataclass(frozen=True)
class HiSparseSetting:
    """What the grouping reads of HiSparse's configuration: ``device_buffer_size`` of
    vllm.config.attention:HiSparseConfig (None: the default size) and the model's
    ``hf_config.index_topk``."""

    device_buffer_size: int | None = None
    index_topk: int = 2048

    def __post_init__(self) -> None:
        if self.device_buffer_size is not None and self.device_buffer_size <= 0:
            raise ValueError("device_buffer_size is positive (HiSparseConfig: Field(gt=0))")
        if self.index_topk <= 0:
            raise ValueError("index_topk is positive")


@dataclass(frozen=True)
class RoledGroup:
    """One group of HiSparse's grouping: the group, its role, whether it lives in the host pool
    (KVCacheGroupSpec.role, host_resident), for a hot group its blocks per request
    (HiSparseHotSpec.blocks_per_request), and whether a KV connector transfers it
    (KVCacheGroupSpec.enable_kv_transfer, read by KVCacheConfig.transfer_group_ids): every group
    but the resident and hot ones, device replicas rebuilt from the host source after a load."""

    group: Group
    role: GroupRole = GroupRole.DEFAULT
    host_resident: bool = False
    blocks_per_request: int | None = None
    kv_transfer: bool = True


# ----------------------------------------------------------------------------- who takes part


def hisparse_applies(layers: dict[str, LayerSpec], setting: HiSparseSetting | None) -> bool:
    """HiSparse groups the model iff it is configured and some layer is MLA (an instance of
    MLAAttentionSpec) (vllm.v1.hisparse.layout:get_hisparse_kv_cache_groups, its two None returns)."""
    return setting is not None and any(layer.kind in MLA_FAMILY for layer in layers.values())


def mla_layers(layers: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """The layers HiSparse lays out itself, in model order (get_hisparse_kv_cache_groups: mla_specs)."""
    return {name: layer for name, layer in layers.items() if layer.kind in MLA_FAMILY}


def regular_layers(layers: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """The layers left to the ordinary grouping: neither MLA nor a derived HiSparse spec
    (get_hisparse_kv_cache_groups: other_specs)."""
    derived = {Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT}
    return {name: layer for name, layer in layers.items() if layer.kind not in MLA_FAMILY | derived}


def source_layers(layers: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """The sparse MLA layers, whose KV lives on the host
    (vllm.v1.hisparse.layout:_partition_hisparse_specs, cache_role SPARSE)."""
    return {name: layer for name, layer in mla_layers(layers).items() if not layer.indexer}


def indexer_layers(layers: dict[str, LayerSpec]) -> dict[str, LayerSpec]:
    """The indexer's caches (vllm.v1.hisparse.layout:_partition_hisparse_specs, cache_role INDEXER)."""
    return {name: layer for name, layer in mla_layers(layers).items() if layer.indexer}


# ----------------------------------------------------------------------------- refusals


def value_error(message: str) -> Refusal:
    """vLLM's ValueError whose message begins with ``message``, vLLM's own words in 0.31-0.34: a
    ValueError of Python's own (say max() of nothing) is not this refusal."""
    return Refusal(ValueError, message, message=message)


def mla_refusal(layers: dict[str, LayerSpec]) -> Refusal | None:
    """The MLA layers must form one uniform-type spec, which for MLA means one block size; else
    an AssertionError, before the regular layers are grouped (get_hisparse_kv_cache_groups:
    ``assert mla_group_spec is not None`` after UniformTypeKVCacheSpecs.from_specs)."""
    if len({layer.block_size for layer in mla_layers(layers).values()}) > 1:
        return Refusal(AssertionError, "the MLA layers are not one uniform type (block sizes differ)")
    return None


def partition_refusal(layers: dict[str, LayerSpec]) -> Refusal | None:
    """No DeepSeek-V4 layer; at least one sparse and one indexer layer; one block size over both,
    each a ValueError (vllm.v1.hisparse.layout:_partition_hisparse_specs, _lay_out_hisparse_groups).
    The last cannot fire after mla_refusal passed: the two together are the MLA layers."""
    mla = mla_layers(layers)
    if any(layer.model_version == "deepseek_v4" for layer in mla.values()):
        return value_error("HiSparse does not support DeepSeek V4.")
    if not source_layers(layers) or not indexer_layers(layers):
        return value_error("HiSparse requires sparse-MLA and indexer cache specs.")
    if len({layer.block_size for layer in mla.values()}) != 1:
        return value_error("HiSparse requires one resolved GPU block size.")
    return None


# ----------------------------------------------------------------------------- the hot buffer


def max_decode_query_len() -> int:
    """Tokens of the widest decode query: one without speculative decoding
    (vllm.v1.attention.backend:max_decode_query_len)."""
    return 1


def model_top_k(layers: dict[str, LayerSpec], setting: HiSparseSetting, rules=NEWEST_RULES) -> int:
    """The top-k the hot buffer must hold: the widest top-k buffer of the sparse layers, one
    without a width counting the model's index_topk; index_topk alone on a release without
    spec/releases.py:HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER (_lay_out_hisparse_groups)."""
    if HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER not in rules:
        return setting.index_topk
    widths = (layer.topk_width for layer in source_layers(layers).values())
    return max(setting.index_topk if width is None else width for width in widths)


def device_buffer_size(setting: HiSparseSetting, top_k: int) -> int | Refusal:
    """Hot-buffer rows per request: the configured size, else (max decode query len + 1) * top_k;
    a ValueError below max decode query len * top_k or above MAX_DEVICE_BUFFER_SIZE
    (vllm.v1.hisparse.runtime:ResolvedHiSparseConfig.from_vllm_config)."""
    query_len = max_decode_query_len()
    size = setting.device_buffer_size
    if size is None:
        size = (query_len + 1) * top_k
    if size < query_len * top_k:
        return value_error("HiSparse device_buffer_size must cover every decode query's index_topk rows.")
    if size > MAX_DEVICE_BUFFER_SIZE:
        return value_error("HiSparse device_buffer_size exceeds the int16 slot-index limit")
    return size


def hot_blocks_per_request(buffer_rows: int, block_size: int) -> int:
    """ceil(buffer_rows / block_size) (_lay_out_hisparse_groups: hot_blocks_per_request)."""
    return -(-buffer_rows // block_size)


# ----------------------------------------------------------------------------- hot units and packing


def hot_units(layers: dict[str, LayerSpec]) -> list[list[str]]:
    """The sparse layers in model order, cut before each index-group leader: a unit is a leader
    and the layers reading its top-k (the first unit starts at the first layer, leader or not)
    (_lay_out_hisparse_groups: hot_units)."""
    units: list[list[str]] = []
    for name, layer in source_layers(layers).items():
        if layer.index_leader or not units:
            units.append([])
        units[-1].append(name)
    return units


def pack_units(unit_pages: list[int], budget: int) -> list[list[int]]:
    """Consecutive units packed greedily: a unit joins the current group while the group's summed
    page stays within ``budget`` (the indexer group's summed page); a unit larger than the budget
    is a group of its own. Returns each group's unit indices (_lay_out_hisparse_groups)."""
    groups: list[list[int]] = []
    total = 0
    for index, page in enumerate(unit_pages):
        if groups and total + page > budget:
            groups.append([])
            total = 0
        if not groups:
            groups.append([])
        groups[-1].append(index)
        total += page
    return groups


def hot_group_refusal(names: list[str], layers: dict[str, LayerSpec]) -> Refusal | None:
    """A hot group's layers must share one page size, else a ValueError
    (_lay_out_hisparse_groups.append_hot_group)."""
    if len({page_size_bytes(layers[n]) for n in names}) != 1:
        return value_error("HiSparse hot-cache groups require one page size")
    return None


# ----------------------------------------------------------------------------- the layout


def _uniform_group(names: list[str], layers: dict[str, LayerSpec]) -> Group:
    """A UniformTypeKVCacheSpecs group of ``names``: pages summed (UniformTypeKVCacheSpecs.page_size_bytes)."""
    members = [layers[n] for n in names]
    return Group(tuple(names), UNIFORM_TYPE_CLASS, tuple(m.kind for m in members), members[0].block_size,
                 sum(map(page_size_bytes, members)), False)


def _declared_group(kind: Kind, names: list[str], block_size: int, page: int) -> Group:
    return Group(tuple(names), VLLM_SPEC_CLASS[kind], (kind,), block_size, page, False)


def laid_out_groups(layers: dict[str, LayerSpec], setting: HiSparseSetting,
                    rules=NEWEST_RULES) -> list[RoledGroup] | Refusal:
    """HiSparse's own groups, before the regular ones: the host source, the indexer, one
    resident group per hot group, the hot groups; or the refusal of
    vllm.v1.hisparse.layout:_lay_out_hisparse_groups. Call after mla_refusal passed."""
    if refusal := partition_refusal(layers):
        return refusal
    sources, indexers = source_layers(layers), indexer_layers(layers)
    block_size = next(iter(sources.values())).block_size
    buffer_rows = device_buffer_size(setting, model_top_k(layers, setting, rules))
    if isinstance(buffer_rows, Refusal):
        return buffer_rows
    per_request = hot_blocks_per_request(buffer_rows, block_size)
    units = hot_units(layers)
    budget = sum(map(page_size_bytes, indexers.values()))
    packed = pack_units([sum(page_size_bytes(layers[n]) for n in unit) for unit in units], budget)
    residents, hots = [], []
    for unit_indices in packed:
        names = [n for i in unit_indices for n in units[i]]
        if refusal := hot_group_refusal(names, layers):
            return refusal
        page = page_size_bytes(layers[names[0]])
        residents.append(RoledGroup(_declared_group(Kind.HISPARSE_RESIDENT, [n + RESIDENT_SUFFIX for n in names],
                                                    block_size, page), kv_transfer=False))
        hots.append(RoledGroup(_declared_group(Kind.HISPARSE_HOT, [n + HOT_SUFFIX for n in names], block_size, page),
                               blocks_per_request=per_request, kv_transfer=False))
    source = RoledGroup(_uniform_group(list(sources), layers), GroupRole.HISPARSE_SOURCE, host_resident=True)
    indexer = RoledGroup(_uniform_group(list(indexers), layers), GroupRole.HISPARSE_INDEXER)
    return [source, indexer, *residents, *hots]
