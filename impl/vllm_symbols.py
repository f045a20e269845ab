"""Every vLLM module, class, function and method kvspec imports, calls or patches, each once, by
name, and the one resolver that imports them.

A ``Symbol`` is only a dotted name until it is resolved, so this module imports no vLLM and the
emitters of plain-vLLM tests may take their import lines from it (``import_line``). Resolution
happens at each use, never cached: a zoo variant or a mutant replaces a vLLM attribute in place,
and the adapter must call whatever is there now. A symbol this vLLM lacks raises
``SymbolMissing``, naming it.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from kvspec.impl.target import TargetError
from kvspec.spec.releases import (
    DRAFT_LAYERS_FLAGGED_ON_SPEC,
    GROUPS_PLANNED_BEFORE_SIZING,
    HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE,
    LOOKAHEAD_BLOCK_HASHES,
    MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE,
    OFFLOADING_TAKES_LOOKAHEAD_HASHES,
    ReleaseRule,
)


@dataclass(frozen=True)
class Symbol:
    """``qualname`` (``"function"``, ``"Class"`` or ``"Class.method"``) in ``module``; an empty
    qualname is the module itself. ``older_module``: where trees before a move keep it.
    ``takes``: how the adapter calls it, (positional arguments, keywords), a method's ``self``
    or ``cls`` counted; the capability probe (impl/capabilities.py) binds that to the signature.
    ``takes_under``: what the call adds on a target with a release rule of spec/releases.py,
    (rule, extra positional arguments, extra keywords). ``with_rule`` / ``without_rule``: the
    release rule under which the adapter drives it at all (a release's other way to the same
    answer)."""

    module: str
    qualname: str = ""
    older_module: str | None = None
    takes: tuple[int, tuple[str, ...]] | None = None
    takes_under: tuple[tuple[ReleaseRule, int, tuple[str, ...]], ...] = ()
    with_rule: ReleaseRule | None = None  # driven only on a target with this rule
    without_rule: ReleaseRule | None = None  # driven only on a target without it

    def driven_under(self, rules) -> bool:
        """Whether the adapter drives this symbol on a target with ``rules``."""
        return (self.with_rule is None or self.with_rule in rules) and self.without_rule not in rules

    def call_shape(self, rules) -> tuple[int, tuple[str, ...]] | None:
        """(positional arguments, keywords) the adapter passes on a target with ``rules``."""
        if self.takes is None:
            return None
        positional, keywords = self.takes
        for rule, more_positional, more_keywords in self.takes_under:
            if rule in rules:
                positional, keywords = positional + more_positional, (*keywords, *more_keywords)
        return positional, keywords

    @property
    def name(self) -> str:
        """The name an import binds: the attribute's, or the module's last part."""
        return (self.qualname or self.module).rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}" if self.qualname else self.module


class SymbolMissing(TargetError):
    """This vLLM lacks a symbol kvspec drives (a tree that moved or renamed it)."""

    def __init__(self, symbol: Symbol, reason: str, where: str = "this vLLM"):
        super().__init__(f"{where} lacks {symbol}, which kvspec drives ({reason})")
        self.symbol, self.reason = symbol, reason


def module_of(symbol: Symbol):
    """The module holding ``symbol``, imported (the older location if the current one is absent)."""
    failure = None
    for name in (symbol.module, symbol.older_module):
        if name is None:
            continue
        if name in sys.modules:
            return sys.modules[name]
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            failure = exc
        except Exception as exc:  # noqa: BLE001 - the tree is broken (a syntax error in a checkout)
            raise TargetError(f"vLLM's {name} does not import: {_import_failure(exc)}") from None
    raise SymbolMissing(symbol, f"{type(failure).__name__}: {failure}")


def _import_failure(exc: Exception) -> str:
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}"
    return f"{type(exc).__name__}: {exc}"


def import_modules(symbols) -> None:
    """Import every module of ``symbols`` that this tree has, so that a broken tree is refused
    (TargetError) before any check runs; a module it lacks is left to the capability probe."""
    for symbol in symbols:
        try:
            module_of(symbol)
        except SymbolMissing:
            pass


def owner_and_attribute(symbol: Symbol) -> tuple[object, str]:
    """The module or class that holds ``symbol`` as an attribute, and that attribute's name."""
    if not symbol.qualname:
        raise ValueError(f"{symbol} is a module, not an attribute of one")
    *path, attribute = symbol.qualname.split(".")
    owner = module_of(symbol)
    if symbol.older_module and not hasattr(owner, symbol.qualname.split(".")[0]):
        # The module is still there but the symbol moved out of it: look where older trees keep it.
        owner = module_of(Symbol(symbol.older_module))
    for part in path:
        owner = _attribute(symbol, owner, part)
    return owner, attribute


def raw(symbol: Symbol):
    """``symbol`` as its owner stores it: a class's own ``classmethod`` or ``staticmethod``
    object, not the bound function ``getattr`` gives (what a patch must save and restore)."""
    owner, attribute = owner_and_attribute(symbol)
    if isinstance(owner, type):
        if attribute not in owner.__dict__:  # inherited: patching it would shadow, not replace
            raise SymbolMissing(symbol, f"{owner.__name__} does not define {attribute} itself")
        return owner.__dict__[attribute]
    return _attribute(symbol, owner, attribute)


def resolve(symbol: Symbol):
    """The object ``symbol`` names, as vLLM holds it now."""
    if not symbol.qualname:
        return module_of(symbol)
    owner, attribute = owner_and_attribute(symbol)
    return _attribute(symbol, owner, attribute)


def exists(symbol: Symbol) -> bool:
    try:
        raw(symbol) if symbol.qualname else module_of(symbol)
    except SymbolMissing:
        return False
    return True


def _attribute(symbol: Symbol, owner, name: str):
    try:
        return getattr(owner, name)
    except AttributeError:
        raise SymbolMissing(symbol, f"no attribute {name!r}") from None


def import_line(*symbols: Symbol, wrapped: bool = False) -> str:
    """The ``from ... import ...`` line of a plain-vLLM test for symbols of one module, in the
    order given; a module symbol is imported from its package. ``wrapped``: one name a line."""
    modules = {_import_source(s) for s in symbols}
    if len(modules) != 1:
        raise ValueError(f"one import line takes symbols of one module, not {sorted(modules)}")
    if any("." in s.qualname for s in symbols):
        raise ValueError("a method is imported through its class")
    names = [s.name for s in symbols]
    if wrapped:
        return "\n".join([f"from {modules.pop()} import (", *(f"    {n}," for n in names), ")"])
    return f"from {modules.pop()} import {', '.join(names)}"


def _import_source(symbol: Symbol) -> str:
    return symbol.module if symbol.qualname else symbol.module.rsplit(".", 1)[0]


# ---------------------------------------------------------------------------- modules
_CORE = "vllm.v1.core"
_UTILS = f"{_CORE}.kv_cache_utils"
_COORDINATOR = f"{_CORE}.kv_cache_coordinator"
_MANAGERS = f"{_CORE}.single_type_kv_cache_manager"
_INTERFACE = "vllm.v1.kv_cache_interface"
_CONNECTORS = "vllm.distributed.kv_transfer.kv_connector.v1"
_MOONCAKE = f"{_CONNECTORS}.mooncake.store.coordinator"
_OFFLOADING = f"{_CONNECTORS}.offloading"
_SCHEDULER = f"{_CORE}.sched.scheduler"

# 0.33 and later group layers in kv_cache_planning; older trees in kv_cache_utils.
PLANNING = Symbol(f"{_CORE}.kv_cache_planning", older_module=_UTILS)
UTILS = Symbol(_UTILS)


def _planning(qualname: str, takes: tuple[int, tuple[str, ...]] | None = None, **when: ReleaseRule) -> Symbol:
    return Symbol(PLANNING.module, qualname, older_module=PLANNING.older_module, takes=takes, **when)


# ---------------------------------------------------------------------------- engine config
VLLM_CONFIG = Symbol("vllm.config", "VllmConfig")
DEVICE_CONFIG = Symbol("vllm.config", "DeviceConfig")
SPECULATIVE_CONFIG = Symbol("vllm.config", "SpeculativeConfig")
KV_TRANSFER_CONFIG = Symbol("vllm.config", "KVTransferConfig", takes=(0, ("kv_connector", "kv_role")))
# How the engine resolves the hash lookahead, asked only where a connector may take one.
RESOLVE_HASH_LOOKAHEAD = Symbol("vllm.config", "VllmConfig._resolve_num_hash_lookahead_tokens", takes=(1, ()),
                                with_rule=OFFLOADING_TAKES_LOOKAHEAD_HASHES)

# ---------------------------------------------------------------------------- KV-cache specs
_ATTENTION_SPEC_KEYWORDS = ("block_size", "num_kv_heads", "head_size", "dtype")
_DRAFT_FLAG = ((DRAFT_LAYERS_FLAGGED_ON_SPEC, 0, ("is_draft",)),)


def _spec_class(qualname: str, *keywords: str) -> Symbol:
    return Symbol(_INTERFACE, qualname, takes=(0, keywords), takes_under=_DRAFT_FLAG)


FULL_ATTENTION_SPEC = _spec_class("FullAttentionSpec", *_ATTENTION_SPEC_KEYWORDS)
MLA_ATTENTION_SPEC = _spec_class("MLAAttentionSpec", *_ATTENTION_SPEC_KEYWORDS)
SLIDING_WINDOW_SPEC = _spec_class("SlidingWindowSpec", *_ATTENTION_SPEC_KEYWORDS, "sliding_window")
CHUNKED_LOCAL_ATTENTION_SPEC = _spec_class("ChunkedLocalAttentionSpec", *_ATTENTION_SPEC_KEYWORDS, "attention_chunk_size")
MAMBA_SPEC = _spec_class("MambaSpec", "block_size", "shapes", "dtypes", "mamba_cache_mode")
KV_CACHE_GROUP_SPEC = Symbol(_INTERFACE, "KVCacheGroupSpec", takes=(2, ("is_eagle_group",)))
# HiSparse's host source: a group whose role picks its manager (HiSparseSourceManager), kept on
# the host (vllm.v1.hisparse.layout:_lay_out_hisparse_groups); built only for such groups.
HISPARSE_SOURCE_GROUP_SPEC = Symbol(_INTERFACE, "KVCacheGroupSpec", takes=(2, ("is_eagle_group", "role", "host_resident")))
KV_CACHE_GROUP_ROLE = Symbol(_INTERFACE, "KVCacheGroupRole")
HISPARSE_SOURCE_ROLE = Symbol(_INTERFACE, "KVCacheGroupRole.HISPARSE_SOURCE")
KV_CACHE_CONFIG = Symbol(_INTERFACE, "KVCacheConfig", takes=(0, ("num_blocks", "kv_cache_tensors", "kv_cache_groups")))
ITER_LAYER_SPECS = Symbol(_INTERFACE, "iter_layer_specs")
# HiSparse's grouping (spec/hisparse_grouping.py): its config, set on attention_config, and the
# role of an indexer's MLA cache (every other MLA layer keeps the default, SPARSE).
HISPARSE_CONFIG = Symbol("vllm.config.attention", "HiSparseConfig", takes=(0, ("device_buffer_size",)))
SPARSE_CACHE_ROLE_INDEXER = Symbol(_INTERFACE, "SparseCacheRole.INDEXER")
# HiSparse's layout functions, mutation targets of the grouping check's HiSparse phase.
_HISPARSE_LAYOUT = "vllm.v1.hisparse.layout"
GET_HISPARSE_KV_CACHE_GROUPS = Symbol(_HISPARSE_LAYOUT, "get_hisparse_kv_cache_groups")
PARTITION_HISPARSE_SPECS = Symbol(_HISPARSE_LAYOUT, "_partition_hisparse_specs")
LAY_OUT_HISPARSE_GROUPS = Symbol(_HISPARSE_LAYOUT, "_lay_out_hisparse_groups")
# By class name, for the emitters (spec/grouping.py:SPEC_CLASS names them).
INTERFACE_CLASSES = {
    s.name: s
    for s in (FULL_ATTENTION_SPEC, MLA_ATTENTION_SPEC, SLIDING_WINDOW_SPEC, CHUNKED_LOCAL_ATTENTION_SPEC, MAMBA_SPEC,
              KV_CACHE_GROUP_SPEC, KV_CACHE_CONFIG)
}  # fmt: skip

# ---------------------------------------------------------------------------- grouping
GET_GLOBAL_KV_CACHE_GROUPS = _planning("get_global_kv_cache_groups", takes=(2, ()), with_rule=GROUPS_PLANNED_BEFORE_SIZING)
# Where the workers' groups are not planned on their own, get_kv_cache_configs groups them on its
# way to sizing memory; the adapter takes them at its call to get_kv_cache_groups (impl/grouping_entry.py).
GET_KV_CACHE_CONFIGS = _planning("get_kv_cache_configs", takes=(3, ()), without_rule=GROUPS_PLANNED_BEFORE_SIZING)
PLANNING_LOGGER = _planning("logger")
WARN_UNANNOTATED_EAGLE = _planning("_warn_if_unannotated_eagle_mamba")
GET_KV_CACHE_GROUPS = _planning("get_kv_cache_groups")
GROUPS_UNIFORM_PAGE_SIZE = _planning("_get_kv_cache_groups_uniform_page_size")
UNIFY_PAGE_SIZE = _planning("unify_kv_cache_spec_page_size")
IS_SPEC_UNIFORM = _planning("is_kv_cache_spec_uniform")
UNIFY_HYBRID_SPECS = _planning("unify_hybrid_kv_cache_specs")
PROMOTE_LOCAL_SPECS = _planning("_promote_local_kv_cache_specs")
FULL_ALLOCATION_FALLBACK = _planning("_try_get_full_allocation_fallback_groups")

# ---------------------------------------------------------------------------- hashes and block sizes
BLOCK_HASH = Symbol(_UTILS, "BlockHash")
MAKE_BLOCK_HASH_WITH_GROUP_ID = Symbol(_UTILS, "make_block_hash_with_group_id")
BLOCK_HASH_LIST_WITH_BLOCK_SIZE = Symbol(_UTILS, "BlockHashListWithBlockSize")
GET_REQUEST_BLOCK_HASHER = Symbol(_UTILS, "get_request_block_hasher", takes=(2, ()),
                                  takes_under=((LOOKAHEAD_BLOCK_HASHES, 1, ()),))
INIT_NONE_HASH = Symbol(_UTILS, "init_none_hash")
RESOLVE_BLOCK_HASHES = Symbol(_UTILS, "resolve_block_hashes")
RESOLVE_BLOCK_SIZES = Symbol(_UTILS, "resolve_kv_cache_block_sizes", takes=(2, ()))
_ENGINE_ALIGNMENT = {"with_rule": HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE}
RESOLVE_HIT_ALIGNMENT = Symbol(_UTILS, "resolve_cache_hit_alignment_tokens", takes=(4, ()), **_ENGINE_ALIGNMENT)
RESOLVE_DCP_BLOCK_SIZE = Symbol(_UTILS, "resolve_dcp_kv_block_size")
PARTIAL_HASH_HITS_ENABLED = Symbol(_UTILS, "partial_hash_hits_enabled", **_ENGINE_ALIGNMENT)
EAGLE_PROOF_MARGIN = Symbol(_UTILS, "eagle_proof_margin", takes=(3, ()), **_ENGINE_ALIGNMENT)
SHA256 = Symbol("vllm.utils.hashing", "sha256")

# ---------------------------------------------------------------------------- finders (single-type managers)
FULL_FIND = Symbol(_MANAGERS, "FullAttentionManager.find_longest_cache_hit")
SLIDING_WINDOW_FIND = Symbol(_MANAGERS, "SlidingWindowManager.find_longest_cache_hit")
SLIDING_WINDOW_RUN = Symbol(_MANAGERS, "SlidingWindowManager._contiguous_blocks_for_hit")
CHUNKED_LOCAL_FIND = Symbol(_MANAGERS, "ChunkedLocalAttentionManager.find_longest_cache_hit")
MAMBA_FIND = Symbol(_MANAGERS, "MambaManager.find_longest_cache_hit")
# Issue 15's managers (spec/hits.py): the circular buffer's and HiSparse's finders answer 0;
# cross attention's raises (never asked: ModelConfig.is_prefix_caching_supported).
CIRCULAR_BUFFER_FIND = Symbol(_MANAGERS, "CircularBufferManager.find_longest_cache_hit")
CIRCULAR_BUFFER_CACHE_BLOCKS = Symbol(_MANAGERS, "CircularBufferManager.cache_blocks")
CIRCULAR_BUFFER_REMOVE_SKIPPED = Symbol(_MANAGERS, "CircularBufferManager.remove_skipped_blocks")
CIRCULAR_BUFFER_SKIPPED = Symbol(_MANAGERS, "CircularBufferManager.get_num_skipped_tokens")
RSWA_REMOVE_SKIPPED = Symbol(_MANAGERS, "RSWAManager.remove_skipped_blocks")
CROSS_ATTENTION_FIND = Symbol(_MANAGERS, "CrossAttentionManager.find_longest_cache_hit")
CROSS_ATTENTION_CACHE_BLOCKS = Symbol(_MANAGERS, "CrossAttentionManager.cache_blocks")
HISPARSE_AUXILIARY_FIND = Symbol(_MANAGERS, "_HiSparseAuxiliaryManager.find_longest_cache_hit")

# ---------------------------------------------------------------------------- the write side (spec/caching.py)
CACHE_BLOCKS = Symbol(_MANAGERS, "SingleTypeKVCacheManager.cache_blocks")
FULL_PARTIAL_TAIL = Symbol(_MANAGERS, "FullAttentionManager._cache_partial_tail_block")
SLIDING_WINDOW_MASK = Symbol(_MANAGERS, "SlidingWindowManager.reachable_block_mask")
SLIDING_WINDOW_SKIPPED = Symbol(_MANAGERS, "SlidingWindowManager.get_num_skipped_tokens")
CHUNKED_LOCAL_SKIPPED = Symbol(_MANAGERS, "ChunkedLocalAttentionManager.get_num_skipped_tokens")
REMOVE_SKIPPED_BLOCKS = Symbol(_MANAGERS, "SingleTypeKVCacheManager.remove_skipped_blocks")
MAMBA_MASK = Symbol(_MANAGERS, "MambaManager.reachable_block_mask")
MAMBA_CACHE_BLOCKS = Symbol(_MANAGERS, "MambaManager.cache_blocks")
MAMBA_PARTIAL_TAIL = Symbol(_MANAGERS, "MambaManager._cache_partial_tail_block")
CACHE_FULL_BLOCKS = Symbol(f"{_CORE}.block_pool", "BlockPool.cache_full_blocks")
FREE_BLOCKS = Symbol(f"{_CORE}.block_pool", "BlockPool.free_blocks")

# ---------------------------------------------------------------------------- core coordinators
GET_KV_CACHE_COORDINATOR = Symbol(_COORDINATOR, "get_kv_cache_coordinator", takes=(1, (
    "max_model_len", "max_in_flight_tokens", "use_eagle", "enable_caching", "enable_kv_cache_events", "dcp_world_size",
    "pcp_world_size", "scheduler_block_size", "hash_block_size", "allow_partial_hash_hits")))
UNITARY_FIND = Symbol(_COORDINATOR, "UnitaryKVCacheCoordinator.find_longest_cache_hit")
HYBRID_FIND = Symbol(_COORDINATOR, "HybridKVCacheCoordinator.find_longest_cache_hit")
HYBRID_FIND_PER_GROUP = Symbol(_COORDINATOR, "HybridKVCacheCoordinator.find_longest_cache_hit_per_group", takes=(3, ()))
KV_CACHE_TENSOR = Symbol(_INTERFACE, "KVCacheTensor", takes=(0, ("size", "layers", "layer_stride", "block_stride")))
SIMPLE_CPU_OFFLOAD_SCHEDULER = Symbol("vllm.v1.simple_kv_offload.manager", "SimpleCPUOffloadScheduler", takes=(2, (
    "cpu_capacity_bytes", "scheduler_block_size", "hash_block_size", "lazy_offload")))
SIMPLE_CPU_OFFLOAD_MATCHED = Symbol("vllm.v1.simple_kv_offload.manager",
                                    "SimpleCPUOffloadScheduler.get_num_new_matched_tokens", takes=(3, ()))
# Its bookkeeping between a lookup and the load (spec/simple_offload_pins.py).
SIMPLE_CPU_OFFLOAD_ADMIT = Symbol("vllm.v1.simple_kv_offload.manager",
                                  "SimpleCPUOffloadScheduler.update_state_after_alloc", takes=(4, ()))
SIMPLE_CPU_OFFLOAD_FINISHED = Symbol("vllm.v1.simple_kv_offload.manager", "SimpleCPUOffloadScheduler.request_finished",
                                     takes=(3, ()))
SIMPLE_CPU_OFFLOAD_OUTPUT = Symbol("vllm.v1.simple_kv_offload.manager",
                                   "SimpleCPUOffloadScheduler.update_connector_output", takes=(2, ()))
SIMPLE_CPU_OFFLOAD_BIND_GPU_POOL = Symbol("vllm.v1.simple_kv_offload.manager",
                                          "SimpleCPUOffloadScheduler.bind_gpu_block_pool", takes=(2, ()))
BLOCK_POOL = Symbol(f"{_CORE}.block_pool", "BlockPool", takes=(1, ("enable_caching", "hash_block_size")))
POOL_INSERT_BLOCK_HASH = Symbol(f"{_CORE}.block_pool", "BlockPool._insert_block_hash", takes=(4, ()))
KV_CACHE_BLOCKS = Symbol(f"{_CORE}.kv_cache_manager", "KVCacheBlocks", takes=(1, ()))
KV_CONNECTOR_OUTPUT = Symbol("vllm.v1.outputs", "KVConnectorOutput", takes=(0, ("finished_recving",)))
CONNECTOR_COMPUTED_BLOCKS = Symbol(f"{_CORE}.kv_cache_manager", "KVCacheManager.get_computed_blocks_for_connector",
                                   takes=(2, ()))
HYBRID_VERIFY_AND_SPLIT = Symbol(_COORDINATOR, "HybridKVCacheCoordinator.verify_and_split_kv_cache_groups")
HYBRID_ALIGNMENT = Symbol(_COORDINATOR, "HybridKVCacheCoordinator._cache_hit_alignment_tokens")
# What a hybrid step publishes, and where a replay resumes (0.32 and later; inline before).
HYBRID_CACHEABLE = Symbol(_COORDINATOR, "HybridKVCacheCoordinator.get_num_cacheable_tokens")
# One group (and SimpleCPUOffload's CPU coordinator): the cacheable prefix without the hybrid alignment.
COORDINATOR_CACHEABLE = Symbol(_COORDINATOR, "KVCacheCoordinator.get_num_cacheable_tokens")
REPLAY_BOUNDARIES = Symbol(_COORDINATOR, "replay_boundaries")

# ---------------------------------------------------------------------------- the Mooncake store connector
MOONCAKE_COORDINATOR = Symbol(_MOONCAKE, "MooncakeStoreCoordinator", takes=(
    1, ("scheduler_block_size", "hash_block_size", "use_eagle")),
    takes_under=((MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE, 0, ("enable_partial_hash_hits",)),))
EXTERNAL_CACHED_BLOCK_POOL = Symbol(_MOONCAKE, "ExternalCachedBlockPool")
MOONCAKE_FIND_HIT_BLOCKS = Symbol(_MOONCAKE, "MooncakeStoreCoordinator._find_hit_blocks")
MOONCAKE_VERIFY_AND_SPLIT = Symbol(_MOONCAKE, "MooncakeStoreCoordinator._verify_and_split_kv_cache_groups")
MOONCAKE_FIND = Symbol(_MOONCAKE, "MooncakeStoreCoordinator.find_longest_cache_hit")
EXTERNAL_POOL_GET_CACHED_BLOCK = Symbol(_MOONCAKE, "ExternalCachedBlockPool.get_cached_block")
# The store side: which blocks a save puts (spec/stores.py); (self, aligned_token_len, start_token).
MOONCAKE_STORE_MASK = Symbol(_MOONCAKE, "MooncakeStoreCoordinator.store_mask", takes=(3, ("num_prompt_tokens",)))
MOONCAKE_REACHABLE_MASKS = Symbol(_MOONCAKE, "MooncakeStoreCoordinator._reachable_masks")

# ---------------------------------------------------------------------------- the live manager and scheduler
KV_CACHE_MANAGER = Symbol(f"{_CORE}.kv_cache_manager", "KVCacheManager", takes=(1, (
    "max_model_len", "scheduler_block_size", "hash_block_size", "enable_caching", "use_eagle", "num_prefill_lookahead")),
    takes_under=((LOOKAHEAD_BLOCK_HASHES, 0, ("num_hash_lookahead_tokens",)),))
REQUEST = Symbol("vllm.v1.request", "Request")
REQUEST_STATUS = Symbol("vllm.v1.request", "RequestStatus")
SAMPLING_PARAMS = Symbol("vllm.sampling_params", "SamplingParams")
SCHEDULER_MAMBA_SPLIT = Symbol(_SCHEDULER, "Scheduler._mamba_block_aligned_split", takes=(4, ()))
SCHEDULER_PREFILL_LOOKAHEAD = Symbol(_SCHEDULER, "Scheduler._reserve_prefill_lookahead", takes=(4, ()))

# ---------------------------------------------------------------------------- the NIXL connector (decode side)
# What a load after a flagged connector hit writes (impl/connector_hits.py:nixl_load_after_a_hit).
NIXL_PULL_SCHEDULER = Symbol(f"{_CONNECTORS}.nixl.pull_scheduler", "NixlPullConnectorScheduler", takes=(3, ()))
KV_TRANSFER_CONFIG = Symbol("vllm.config", "KVTransferConfig",
                            takes=(0, ("kv_connector", "kv_role", "engine_id")))

# ---------------------------------------------------------------------------- the OffloadingConnector
OFFLOADING_SCHEDULER = Symbol(f"{_OFFLOADING}.scheduler", "OffloadingConnectorScheduler", takes=(3, ()))
OFFLOAD_CONFIG_FROM_SPEC = Symbol(f"{_OFFLOADING}.scheduler", "SchedulerOffloadConfig.from_spec")
# 0.32 and earlier keep it in the scheduler module.
WINDOW_IN_CHUNKS = Symbol(f"{_OFFLOADING}.config", "get_sliding_window_size_in_chunks",
                          older_module=f"{_OFFLOADING}.scheduler", takes=(2, ()))
OFFLOADING_EVENTS_CONFIG = Symbol("vllm.v1.kv_offload.base", "OffloadingKVEventsConfig")
OFFLOAD_REQ_CONTEXT = Symbol("vllm.v1.kv_offload.base", "ReqContext")
MAKE_OFFLOAD_KEY = Symbol("vllm.v1.kv_offload.base", "make_offload_key")
CPU_OFFLOADING_MANAGER = Symbol("vllm.v1.kv_offload.cpu.manager", "CPUOffloadingManager", takes=(0, ("num_chunks",)))
# The load bound (impl/offloading_load_bound.py): how far past the local hit a load may reach when
# some groups are not offloaded (offloading_connector.py:_bounding_group_ids, _max_loadable_tokens).
OFFLOADING_CONNECTOR = Symbol(f"{_CONNECTORS}.offloading_connector", "OffloadingConnector")
OFFLOADING_MAX_LOADABLE = Symbol(f"{_CONNECTORS}.offloading_connector", "OffloadingConnector._max_loadable_tokens",
                                 takes=(3, ()))
KV_CACHE_GROUP_ROLE = Symbol(_INTERFACE, "KVCacheGroupRole")
# The OffloadingConnector's store side (spec/offloading_stores.py): which chunks a step stores.
OFFLOAD_STORABLE_CHUNKS = Symbol(f"{_OFFLOADING}.scheduler", "RequestOffloadState.storable_chunks")  # patched only
OFFLOAD_BUILD_CONNECTOR_META = Symbol(f"{_OFFLOADING}.scheduler", "OffloadingConnectorScheduler.build_connector_meta",
                                      takes=(2, ()))
OFFLOAD_REQUEST_FINISHED = Symbol(f"{_OFFLOADING}.scheduler", "OffloadingConnectorScheduler.request_finished",
                                  takes=(2, ()))
