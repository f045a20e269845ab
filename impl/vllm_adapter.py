"""The one narrow door from kvspec to real vLLM. Everything else talks to this module, so the
drift between vLLM versions (signatures, module moves) lives here and nowhere else.

It translates kvspec's vocabulary (spec/layers.py) into vLLM objects, calls vLLM's own
functions, and translates the answers back. It computes nothing that vLLM computes.
"""

from __future__ import annotations

import hashlib
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass

from kvspec.impl import vllm_symbols as S
from kvspec.impl.capabilities import DRIVES, probe
from kvspec.impl.grouping_entry import groups_before_sizing
from kvspec.impl.hisparse_grouping import group_hisparse_layers
from kvspec.impl.live import LiveManager
from kvspec.impl.stand_in import StandIn
from kvspec.impl.target import Target, TargetError, activate
from kvspec.impl.vllm_specs import SpecTranslator
from kvspec.impl.vllm_symbols import import_modules, resolve
from kvspec.impl.watchdog import watching
from kvspec.spec.grouping import Group
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode
from kvspec.spec.releases import (
    DRAFT_LAYERS_FLAGGED_ON_SPEC,
    GROUPS_PLANNED_BEFORE_SIZING,
    HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE,
    MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE,
    ReleaseRule,
    rules_of,
)
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import CacheState, Hit, LookupSetting

# vLLM's own message (vllm.v1.core.kv_cache_planning:_warn_if_unannotated_eagle_mamba).
UNANNOTATED_EAGLE_WARNING = "no KV cache group could be identified as the draft model's"


@dataclass(frozen=True)
class GroupingOut:
    groups: tuple[Group, ...]  # vLLM's groups, in the spec's vocabulary
    warnings: tuple[str, ...]  # vLLM's own WARNING records from the grouping module

    @property
    def warned_unannotated_eagle(self) -> bool:
        return any(UNANNOTATED_EAGLE_WARNING in w for w in self.warnings)


@dataclass(frozen=True)
class CoordinatorAnswer:
    """All the core coordinator returns (kv_cache_coordinator:*.find_longest_cache_hit)."""

    hit: Hit
    # The longest single-group hit seen during reconciliation minus the reconciled hit, which
    # KVCacheManager.get_computed_blocks reports as the shared prefix not yet cached; None
    # when the coordinator returns only (blocks, hit).
    uncached_common_prefix: int | None


@dataclass(frozen=True)
class BlockSizes:
    """What the engine core resolves before it builds the KV-cache manager."""

    scheduler_block_size: int
    hash_block_size: int
    cache_hit_alignment: int | None  # None where the engine resolves none (HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE)


def block_hash_bytes(index: int) -> bytes:
    """The stand-in for the chained hash of hash unit ``index``: distinct and deterministic."""
    return hashlib.sha256(b"kvspec-block-%d" % index).digest()


class VllmAdapter:
    """Real vLLM, imported from one target."""

    def __init__(self, target: Target):
        self.target = target
        self.vllm = activate(target)
        self.version = self.vllm.__version__
        self.rules = rules_of(self.version)  # how this release's rules differ (spec/releases.py)
        try:
            import torch  # noqa: PLC0415
        except ImportError as exc:
            raise TargetError(f"{target.label} lacks a module kvspec drives: {exc}") from None
        # A tree that does not compile is refused now; a symbol it lacks is the probe's (impl/capabilities.py).
        import_modules(symbol for symbols in DRIVES.values() for symbol in symbols)
        dtypes = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}
        self.specs = SpecTranslator(dtypes, lambda: self.has(DRAFT_LAYERS_FLAGGED_ON_SPEC))

    def probe(self, checks) -> dict:
        """Per check, what it drives that this vLLM lacks (impl/capabilities.py)."""
        return probe(checks, self.rules)

    def has(self, rule: ReleaseRule) -> bool:
        """Whether this target's release has ``rule`` (spec/releases.py)."""
        return rule in self.rules

    @staticmethod
    def watching(deadline: float):
        """Every call into vLLM inside the block gets ``deadline`` seconds (impl/watchdog.py)."""
        return watching(deadline)

    # ----------------------------------------------------------------- translation
    # The spec-building half lives in impl/vllm_specs.py; these keep the adapter the one door.
    def vllm_layer_spec(self, layer: LayerSpec):
        return self.specs.vllm_layer_spec(layer)

    def kind_of(self, vllm_spec) -> Kind:
        return self.specs.kind_of(vllm_spec)

    def vllm_groups(self, groups) -> list:
        """vLLM's KVCacheGroupSpecs for kvspec groups, one layer each, in order."""
        return self.specs.vllm_groups(groups)

    # ------------------------------------------------------------------- grouping
    def _spec_config(self, spec_decode: SpecDecode):
        """A real SpeculativeConfig carrying only the fields the KV-cache code reads, so that
        vLLM's own methods (use_eagle_block_drop, speculator_config) decide. Its validator is
        skipped: it loads the draft model's config from a hub."""
        if spec_decode.method is None:
            return None
        spec_config = resolve(S.SPECULATIVE_CONFIG)
        config = spec_config.__new__(spec_config)
        fields = dict(
            method=spec_decode.method,
            disable_eagle_block_drop=spec_decode.disable_eagle_block_drop,
            disable_lookahead_block_hashes=False,
            num_speculative_tokens=1,
        )
        for name, value in fields.items():
            object.__setattr__(config, name, value)
        return config

    def engine_config(self, spec_decode: SpecDecode, hybrid_manager: bool):
        """A real VllmConfig on CPU with this speculative decoding, as far as the KV-cache code
        reads it (no model loaded)."""
        config = resolve(S.VLLM_CONFIG)(device_config=resolve(S.DEVICE_CONFIG)(device="cpu"))
        # The platform would choose this flag silently (True with no GPU): set it.
        config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid_manager
        # A layer-outer layout, as on GPU; grouping refuses to run until one is resolved.
        config.cache_config.kv_cache_layout = "LBNHC"
        # No model is loaded: the grouping asks only whether the model groups its own layers and
        # (before 0.33, to place an MTP drafter) whether it is a DeepSeek-V4; it is neither.
        hf_config = StandIn("PretrainedConfig", model_type="kvspec-stand-in")
        object.__setattr__(config, "model_config",
                           StandIn("ModelConfig", supports_kv_cache_grouping=False, hf_config=hf_config))
        object.__setattr__(config, "speculative_config", self._spec_config(spec_decode))
        return config

    def group_layers(
        self,
        layers: dict[str, LayerSpec],
        spec_decode: SpecDecode = SpecDecode(),
        *,
        hybrid_manager: bool = True,
    ) -> GroupingOut:
        """vLLM's grouping of one model's layers, with the EAGLE annotation and the warnings
        it logged (vllm.v1.core.kv_cache_planning:get_global_kv_cache_groups). vLLM's
        exceptions propagate unchanged."""
        return self.group_workers_layers([layers], spec_decode, hybrid_manager=hybrid_manager)

    def group_workers_layers(
        self,
        workers: list[dict[str, LayerSpec]],
        spec_decode: SpecDecode = SpecDecode(),
        *,
        hybrid_manager: bool = True,
    ) -> GroupingOut:
        """vLLM's grouping of several workers' layer specs (pipeline stages hold different
        layers, tensor-parallel ranks the same ones), merged by vLLM itself
        (kv_cache_planning:get_global_kv_cache_groups, or on older releases the same steps of
        kv_cache_utils:get_kv_cache_configs, impl/grouping_entry.py). vLLM's exceptions
        propagate unchanged."""
        config = self.engine_config(spec_decode, hybrid_manager)
        vllm_specs = [{name: self.vllm_layer_spec(layer) for name, layer in w.items()} for w in workers]
        with self._captured_warnings(resolve(S.PLANNING_LOGGER)) as records:
            if self.has(GROUPS_PLANNED_BEFORE_SIZING):
                groups = resolve(S.GET_GLOBAL_KV_CACHE_GROUPS)(config, vllm_specs)
            else:
                groups = groups_before_sizing(config, vllm_specs)
        return GroupingOut(
            groups=tuple(self.group_out(g) for g in groups),
            warnings=tuple(r.getMessage() for r in records),
        )

    def group_out(self, group) -> Group:
        """One of vLLM's KVCacheGroupSpecs in the spec's vocabulary."""
        spec = group.kv_cache_spec
        members = list(resolve(S.ITER_LAYER_SPECS)(spec))
        return Group(
            layer_names=tuple(group.layer_names),
            spec_class=type(spec).__name__,
            kinds=tuple(self.kind_of(m) for m in members),
            block_size=spec.block_size,
            page_size_bytes=spec.page_size_bytes,
            is_eagle_group=group.is_eagle_group,
        )

    def group_hisparse_layers(self, layers: dict[str, LayerSpec], setting):
        """vLLM's groups with HiSparse configured as ``setting`` (a spec/hisparse_grouping.py:
        HiSparseSetting), each with its role (impl/hisparse_grouping.py)."""
        return group_hisparse_layers(self, layers, setting)

    @staticmethod
    @contextmanager
    def _captured_warnings(logger: logging.Logger):
        records: list[logging.LogRecord] = []

        class Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.levelno >= logging.WARNING:
                    records.append(record)

        handler, level = Capture(), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)  # whatever VLLM_LOGGING_LEVEL says
        try:
            yield records
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)

    # ------------------------------------------------------------------- lookups
    def block_hashes(self, num_hashes: int) -> list:
        """vLLM BlockHashes standing for ``num_hashes`` chained hash units (block_hash_bytes)."""
        block_hash = resolve(S.BLOCK_HASH)
        return [block_hash(block_hash_bytes(i)) for i in range(num_hashes)]

    def resolve_block_sizes(
        self,
        groups: list[CacheGroup],
        prefix_match_unit: int | None = None,
        *,
        dcp: int = 1,
        prefix_caching: bool = True,
    ) -> BlockSizes:
        """The block sizes the engine core resolves for these groups (no KV connector)
        (kv_cache_utils:resolve_kv_cache_block_sizes, resolve_cache_hit_alignment_tokens),
        after setting the cache block size to the smallest group's, as the core does, with
        ``dcp`` decode-context-parallel ranks. vLLM's ValueError for a prefix-match unit it
        refuses propagates."""
        config = self.engine_config(SpecDecode(), hybrid_manager=True)
        config.cache_config.enable_prefix_caching = prefix_caching
        config.cache_config.block_size = min(g.block_size for g in groups)
        config.cache_config.prefix_match_unit = prefix_match_unit
        config.parallel_config.decode_context_parallel_size = dcp
        kv_config = resolve(S.KV_CACHE_CONFIG)(
            num_blocks=1, kv_cache_tensors=[], kv_cache_groups=self.vllm_groups(groups)
        )
        scheduler_bs, hash_bs = resolve(S.RESOLVE_BLOCK_SIZES)(kv_config, config)
        alignment = None
        if self.has(HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE):
            alignment = resolve(S.RESOLVE_HIT_ALIGNMENT)(kv_config, config, scheduler_bs, hash_bs)
        return BlockSizes(scheduler_bs, hash_bs, alignment)

    def eagle_proof_margin(self, block_size: int, hash_block_size: int, fine_grained: bool) -> int:
        return resolve(S.EAGLE_PROOF_MARGIN)(block_size, hash_block_size, fine_grained)

    def whole_blocks(self, num_tokens: int, hash_block_size: int, block_size: int) -> int:
        """How many whole blocks of ``block_size`` a group sees in ``num_tokens`` hashed at
        ``hash_block_size`` (kv_cache_utils:BlockHashListWithBlockSize.__len__)."""
        hashes = self.block_hashes(num_tokens // hash_block_size)
        return len(resolve(S.BLOCK_HASH_LIST_WITH_BLOCK_SIZE)(hashes, hash_block_size, block_size))

    def block_sizes(self, groups: list[CacheGroup], hash_block_size: int | None, dcp: int = 1) -> tuple[int, int]:
        """(scheduler block size, hash block size): vLLM's resolution, or, when a test fixes
        the hash unit itself, the lcm of the groups' block sizes (as DCP stretches them,
        kv_cache_utils:resolve_dcp_kv_block_size) with that unit."""
        if hash_block_size is None:
            resolved = self.resolve_block_sizes(groups, dcp=dcp)
            return resolved.scheduler_block_size, resolved.hash_block_size
        if dcp == 1:
            return math.lcm(*(g.block_size for g in groups)), hash_block_size
        specs = [group.kv_cache_spec for group in self.vllm_groups(groups)]
        dcp_block_size = resolve(S.RESOLVE_DCP_BLOCK_SIZE)
        return math.lcm(*(dcp_block_size(s, dcp) for s in specs)), hash_block_size

    def coordinator_hit(self, setting: LookupSetting, state: CacheState, max_length: int, *,
                        engine_block_sizes: bool = False) -> Hit:
        """The hit vLLM's core coordinator returns (Unitary for one group, Hybrid otherwise)
        for a pool holding exactly ``state`` (kv_cache_coordinator:find_longest_cache_hit)."""
        return self.coordinator_answer(setting, state, max_length, engine_block_sizes=engine_block_sizes).hit

    def coordinator_answer(self, setting: LookupSetting, state: CacheState, max_length: int, *,
                           engine_block_sizes: bool = False) -> CoordinatorAnswer:
        """Everything the core coordinator returns for a pool holding exactly ``state``, with
        ``setting.dcp`` decode-context-parallel ranks (a spec/dcp.py:DcpSetting's groups at
        their per-rank block sizes) (kv_cache_coordinator:find_longest_cache_hit). ``engine_block_sizes``: the scheduler
        and hash block sizes are the ones vLLM's engine core resolves for these groups, not the
        setting's hash unit (the seed checks drive that resolution too)."""
        groups, dcp = list(setting.groups), setting.dcp
        scheduler_bs, hash_bs = self.block_sizes(groups, None if engine_block_sizes else setting.hash_block_size, dcp)
        vllm_groups = self.vllm_groups(groups)
        coordinator = resolve(S.GET_KV_CACHE_COORDINATOR)(
            resolve(S.KV_CACHE_CONFIG)(
                num_blocks=len(state.cached) + 2, kv_cache_tensors=[], kv_cache_groups=vllm_groups
            ),
            max_model_len=max(max_length, state.num_hashes * hash_bs) + 1,
            max_in_flight_tokens=max(max_length, 1) + 1,
            use_eagle=setting.use_eagle,
            enable_caching=True,
            enable_kv_cache_events=False,
            dcp_world_size=dcp,
            pcp_world_size=1,
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            allow_partial_hash_hits=setting.allow_partial_hash_hits,
        )
        pool, hashes = coordinator.block_pool, self.block_hashes(state.num_hashes)
        make_key = resolve(S.MAKE_BLOCK_HASH_WITH_GROUP_ID)
        for (gid, index), block in zip(sorted(state.cached), pool.get_new_blocks(len(state.cached))):
            pool.cached_block_hash_to_block.insert(make_key(hashes[index], gid), block)
        answer = coordinator.find_longest_cache_hit(hashes, max_length)
        (blocks, hit), uncached = answer[:2], (answer[2] if len(answer) > 2 else None)  # or (blocks, hit)
        return CoordinatorAnswer(Hit(hit, tuple(tuple(not b.is_null for b in group) for group in blocks)), uncached)

    def _mooncake_coordinator(self, setting: LookupSetting, engine_block_sizes: bool = False):
        groups = list(setting.groups)
        scheduler_bs, hash_bs = self.block_sizes(groups, None if engine_block_sizes else setting.hash_block_size)
        # The core's decision, as from_kv_cache_config tells it (a release without the rule decides).
        told = {"enable_partial_hash_hits": partial_hash_hits_enabled(setting)}
        coordinator = resolve(S.MOONCAKE_COORDINATOR)(
            self.vllm_groups(groups),
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            use_eagle=setting.use_eagle,
            **(told if self.has(MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE) else {}),
        )
        return coordinator, hash_bs

    def mooncake_hit(self, setting: LookupSetting, state: CacheState, max_length: int, *,
                     engine_block_sizes: bool = False) -> Hit:
        """The hit the Mooncake store connector's coordinator returns for an external store
        holding exactly ``state`` (mooncake/store/coordinator:find_longest_cache_hit), with
        vLLM's own duck-typed pool (ExternalCachedBlockPool)."""
        coordinator, hash_bs = self._mooncake_coordinator(setting, engine_block_sizes)
        hashes = self.block_hashes(state.num_hashes)
        exists = {(gid, bytes(hashes[index])) for gid, index in state.cached}
        pool = resolve(S.EXTERNAL_CACHED_BLOCK_POOL)(hash_bs, exists)
        masks, hit = coordinator.find_longest_cache_hit(hashes, max_length, pool)
        return Hit(hit, tuple(tuple(m) for m in masks))

    def mooncake_load_mask(self, setting: LookupSetting, num_hashes: int, token_len: int) -> tuple[tuple[bool, ...], ...]:
        """Which blocks the Mooncake store connector's receive side loads per group for a hit
        of ``token_len`` tokens (mooncake/store/coordinator:MooncakeStoreCoordinator.load_mask)."""
        coordinator, _ = self._mooncake_coordinator(setting)
        return tuple(tuple(m) for m in coordinator.load_mask(self.block_hashes(num_hashes), token_len))

    # ------------------------------------------------------------------- live manager
    def live_manager(self, groups: list[CacheGroup], *, num_blocks: int, use_eagle: bool = False, hash_block_size: int | None = None, max_model_len: int = 4096):
        scheduler_bs, hash_bs = self.block_sizes(groups, hash_block_size)
        return LiveManager(
            self.vllm_groups(groups),
            rules=self.rules,
            num_blocks=num_blocks,
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            use_eagle=use_eagle,
            max_model_len=max_model_len,
        )
