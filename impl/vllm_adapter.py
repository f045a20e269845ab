"""The one narrow door from kvspec to real vLLM. Everything else talks to this module, so the
drift between vLLM versions (signatures, module moves) lives here and nowhere else.

It translates kvspec's vocabulary (spec/layers.py) into vLLM objects, calls vLLM's own
functions, and translates the answers back. It computes nothing that vLLM computes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import types
from contextlib import contextmanager
from dataclasses import dataclass

from kvspec.impl.target import Target, TargetError, activate
from kvspec.spec.grouping import Group
from kvspec.spec.hits import CacheState, Hit
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode

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
    cache_hit_alignment: int


def block_hash_bytes(index: int) -> bytes:
    """The stand-in for the chained hash of hash unit ``index``: distinct and deterministic."""
    return hashlib.sha256(b"kvspec-block-%d" % index).digest()


class VllmAdapter:
    """Real vLLM, imported from one target."""

    def __init__(self, target: Target):
        self.target = target
        self.vllm = activate(target)
        self.version = self.vllm.__version__
        try:
            import torch  # noqa: PLC0415
            from vllm.config import DeviceConfig, SpeculativeConfig, VllmConfig  # noqa: PLC0415
            from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import (  # noqa: PLC0415
                coordinator as mooncake,
            )
            from vllm.v1 import kv_cache_interface as iface  # noqa: PLC0415
            from vllm.v1.core import kv_cache_coordinator, kv_cache_utils  # noqa: PLC0415

            try:  # 0.33 and later; older trees keep grouping in kv_cache_utils
                from vllm.v1.core import kv_cache_planning as planning  # noqa: PLC0415
            except ImportError:
                planning = kv_cache_utils
        except ImportError as exc:  # a checkout that moved or lacks what kvspec drives
            raise TargetError(f"{target.label} lacks a module kvspec drives: {exc}") from None
        self._torch, self._iface, self._planning = torch, iface, planning
        self._utils, self._coordinator, self._mooncake = kv_cache_utils, kv_cache_coordinator, mooncake
        self._VllmConfig, self._DeviceConfig, self._SpeculativeConfig = (
            VllmConfig,
            DeviceConfig,
            SpeculativeConfig,
        )
        self._dtypes = {1: torch.float8_e4m3fn, 2: torch.float16, 4: torch.float32}

    # ----------------------------------------------------------------- translation
    def vllm_layer_spec(self, layer: LayerSpec):
        i, dtype = self._iface, self._dtypes[layer.dtype_bytes]
        attention = dict(
            block_size=layer.block_size,
            num_kv_heads=layer.num_kv_heads,
            head_size=layer.head_size,
            dtype=dtype,
            is_draft=layer.is_draft,
        )
        if layer.kind == Kind.FULL:
            return i.FullAttentionSpec(**attention)
        if layer.kind == Kind.MLA:
            return i.MLAAttentionSpec(**attention)
        if layer.kind == Kind.SLIDING_WINDOW:
            return i.SlidingWindowSpec(**attention, sliding_window=layer.window)
        if layer.kind == Kind.CHUNKED_LOCAL:
            return i.ChunkedLocalAttentionSpec(**attention, attention_chunk_size=layer.chunk)
        return i.MambaSpec(
            block_size=layer.block_size,
            shapes=((layer.state_bytes // layer.dtype_bytes,),),
            dtypes=(dtype,),
            mamba_cache_mode="align",  # the only mode with prefix caching
            is_draft=layer.is_draft,
        )

    def kind_of(self, vllm_spec) -> Kind:
        i = self._iface
        for cls, kind in (
            (i.MLAAttentionSpec, Kind.MLA),
            (i.FullAttentionSpec, Kind.FULL),
            (i.SlidingWindowSpec, Kind.SLIDING_WINDOW),
            (i.ChunkedLocalAttentionSpec, Kind.CHUNKED_LOCAL),
            (i.MambaSpec, Kind.MAMBA),
        ):
            if isinstance(vllm_spec, cls):
                return kind
        raise TypeError(f"kvspec has no kind for {type(vllm_spec).__name__}")

    def _group_specs(self, groups: list[CacheGroup]) -> list:
        return [self._group_spec(gid, g) for gid, g in enumerate(groups)]

    def _group_spec(self, gid: int, group: CacheGroup):
        layer = LayerSpec(
            kind=group.kind,
            block_size=group.block_size,
            window=group.window,
            chunk=group.chunk,
            state_bytes=64 if group.kind == Kind.MAMBA else None,
        )
        return self._iface.KVCacheGroupSpec(
            [f"layers.{gid}"], self.vllm_layer_spec(layer), is_eagle_group=group.is_eagle_group
        )

    # ------------------------------------------------------------------- grouping
    def _spec_config(self, spec_decode: SpecDecode):
        """A real SpeculativeConfig carrying only the fields the KV-cache code reads, so that
        vLLM's own methods (use_eagle_block_drop, speculator_config) decide. Its validator is
        skipped: it loads the draft model's config from a hub."""
        if spec_decode.method is None:
            return None
        config = self._SpeculativeConfig.__new__(self._SpeculativeConfig)
        fields = dict(
            method=spec_decode.method,
            disable_eagle_block_drop=spec_decode.disable_eagle_block_drop,
            disable_lookahead_block_hashes=False,
            num_speculative_tokens=1,
        )
        for name, value in fields.items():
            object.__setattr__(config, name, value)
        return config

    def _vllm_config(self, spec_decode: SpecDecode, hybrid_manager: bool):
        config = self._VllmConfig(device_config=self._DeviceConfig(device="cpu"))
        # The platform would choose this flag silently (True with no GPU): set it.
        config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid_manager
        # A layer-outer layout, as on GPU; grouping refuses to run until one is resolved.
        config.cache_config.kv_cache_layout = "LBNHC"
        # No model is loaded: the grouping only asks whether the model groups its own layers.
        object.__setattr__(config, "model_config", types.SimpleNamespace(supports_kv_cache_grouping=False))
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
        (kv_cache_planning:get_global_kv_cache_groups). vLLM's exceptions propagate unchanged."""
        config = self._vllm_config(spec_decode, hybrid_manager)
        vllm_specs = [{name: self.vllm_layer_spec(layer) for name, layer in w.items()} for w in workers]
        with self._captured_warnings(self._planning.logger) as records:
            groups = self._planning.get_global_kv_cache_groups(config, vllm_specs)
        return GroupingOut(
            groups=tuple(self._group_out(g) for g in groups),
            warnings=tuple(r.getMessage() for r in records),
        )

    def _group_out(self, group) -> Group:
        spec = group.kv_cache_spec
        members = list(self._iface.iter_layer_specs(spec))
        return Group(
            layer_names=tuple(group.layer_names),
            spec_class=type(spec).__name__,
            kinds=tuple(self.kind_of(m) for m in members),
            block_size=spec.block_size,
            page_size_bytes=spec.page_size_bytes,
            is_eagle_group=group.is_eagle_group,
        )

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
    def _hashes(self, num_hashes: int) -> list:
        return [self._utils.BlockHash(block_hash_bytes(i)) for i in range(num_hashes)]

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
        config = self._vllm_config(SpecDecode(), hybrid_manager=True)
        config.cache_config.enable_prefix_caching = prefix_caching
        config.cache_config.block_size = min(g.block_size for g in groups)
        config.cache_config.prefix_match_unit = prefix_match_unit
        config.parallel_config.decode_context_parallel_size = dcp
        kv_config = self._iface.KVCacheConfig(
            num_blocks=1, kv_cache_tensors=[], kv_cache_groups=self._group_specs(groups)
        )
        scheduler_bs, hash_bs = self._utils.resolve_kv_cache_block_sizes(kv_config, config)
        alignment = self._utils.resolve_cache_hit_alignment_tokens(kv_config, config, scheduler_bs, hash_bs)
        return BlockSizes(scheduler_bs, hash_bs, alignment)

    def eagle_proof_margin(self, block_size: int, hash_block_size: int, fine_grained: bool) -> int:
        return self._utils.eagle_proof_margin(block_size, hash_block_size, fine_grained)

    def whole_blocks(self, num_tokens: int, hash_block_size: int, block_size: int) -> int:
        """How many whole blocks of ``block_size`` a group sees in ``num_tokens`` hashed at
        ``hash_block_size`` (kv_cache_utils:BlockHashListWithBlockSize.__len__)."""
        hashes = self._hashes(num_tokens // hash_block_size)
        return len(self._utils.BlockHashListWithBlockSize(hashes, hash_block_size, block_size))

    def block_sizes(self, groups: list[CacheGroup], hash_block_size: int | None, dcp: int = 1) -> tuple[int, int]:
        """(scheduler block size, hash block size): vLLM's resolution, or, when a test fixes
        the hash unit itself, the lcm of the groups' block sizes (as DCP stretches them,
        kv_cache_utils:resolve_dcp_kv_block_size) with that unit."""
        if hash_block_size is None:
            resolved = self.resolve_block_sizes(groups, dcp=dcp)
            return resolved.scheduler_block_size, resolved.hash_block_size
        if dcp == 1:
            return math.lcm(*(g.block_size for g in groups)), hash_block_size
        specs = [group.kv_cache_spec for group in self._group_specs(groups)]
        return math.lcm(*(self._utils.resolve_dcp_kv_block_size(s, dcp) for s in specs)), hash_block_size

    def coordinator_hit(
        self,
        groups: list[CacheGroup],
        state: CacheState,
        max_length: int,
        *,
        use_eagle: bool,
        hash_block_size: int | None = None,
        allow_partial_hash_hits: bool = True,
    ) -> Hit:
        """The hit vLLM's core coordinator returns (Unitary for one group, Hybrid otherwise)
        for a pool holding exactly ``state`` (kv_cache_coordinator:find_longest_cache_hit)."""
        return self.coordinator_answer(
            groups, state, max_length, use_eagle=use_eagle, hash_block_size=hash_block_size,
            allow_partial_hash_hits=allow_partial_hash_hits,
        ).hit  # fmt: skip

    def coordinator_answer(
        self,
        groups: list[CacheGroup],
        state: CacheState,
        max_length: int,
        *,
        use_eagle: bool,
        hash_block_size: int | None = None,
        allow_partial_hash_hits: bool = True,
        dcp: int = 1,
    ) -> CoordinatorAnswer:
        """Everything the core coordinator returns for a pool holding exactly ``state``, with
        ``dcp`` decode-context-parallel ranks (kv_cache_coordinator:find_longest_cache_hit)."""
        scheduler_bs, hash_bs = self.block_sizes(groups, hash_block_size, dcp)
        vllm_groups = self._group_specs(groups)
        coordinator = self._coordinator.get_kv_cache_coordinator(
            self._iface.KVCacheConfig(
                num_blocks=len(state.cached) + 2, kv_cache_tensors=[], kv_cache_groups=vllm_groups
            ),
            max_model_len=max(max_length, state.num_hashes * hash_bs) + 1,
            max_in_flight_tokens=max(max_length, 1) + 1,
            use_eagle=use_eagle,
            enable_caching=True,
            enable_kv_cache_events=False,
            dcp_world_size=dcp,
            pcp_world_size=1,
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            allow_partial_hash_hits=allow_partial_hash_hits,
        )
        pool, hashes = coordinator.block_pool, self._hashes(state.num_hashes)
        for (gid, index), block in zip(sorted(state.cached), pool.get_new_blocks(len(state.cached))):
            key = self._utils.make_block_hash_with_group_id(hashes[index], gid)
            pool.cached_block_hash_to_block.insert(key, block)
        answer = coordinator.find_longest_cache_hit(hashes, max_length)
        blocks, hit = answer[0], answer[1]
        uncached = answer[2] if len(answer) > 2 else None  # older trees return (blocks, hit)
        return CoordinatorAnswer(Hit(hit, tuple(tuple(not b.is_null for b in group) for group in blocks)), uncached)

    def _mooncake_coordinator(self, groups, hash_block_size, use_eagle, enable_partial_hash_hits):
        scheduler_bs, hash_bs = self.block_sizes(groups, hash_block_size)
        coordinator = self._mooncake.MooncakeStoreCoordinator(
            self._group_specs(groups),
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            use_eagle=use_eagle,
            enable_partial_hash_hits=enable_partial_hash_hits,
        )
        return coordinator, hash_bs

    def mooncake_hit(
        self,
        groups: list[CacheGroup],
        state: CacheState,
        max_length: int,
        *,
        use_eagle: bool,
        hash_block_size: int | None = None,
        enable_partial_hash_hits: bool = False,
    ) -> Hit:
        """The hit the Mooncake store connector's coordinator returns for an external store
        holding exactly ``state`` (mooncake/store/coordinator:find_longest_cache_hit), with
        vLLM's own duck-typed pool (ExternalCachedBlockPool)."""
        coordinator, hash_bs = self._mooncake_coordinator(groups, hash_block_size, use_eagle, enable_partial_hash_hits)
        hashes = self._hashes(state.num_hashes)
        exists = {(gid, bytes(hashes[index])) for gid, index in state.cached}
        pool = self._mooncake.ExternalCachedBlockPool(hash_bs, exists)
        masks, hit = coordinator.find_longest_cache_hit(hashes, max_length, pool)
        return Hit(hit, tuple(tuple(m) for m in masks))

    def mooncake_load_mask(
        self,
        groups: list[CacheGroup],
        num_hashes: int,
        token_len: int,
        *,
        use_eagle: bool,
        hash_block_size: int | None = None,
        enable_partial_hash_hits: bool = False,
    ) -> tuple[tuple[bool, ...], ...]:
        """Which blocks the Mooncake store connector's receive side loads per group for a hit
        of ``token_len`` tokens (mooncake/store/coordinator:MooncakeStoreCoordinator.load_mask)."""
        coordinator, _ = self._mooncake_coordinator(groups, hash_block_size, use_eagle, enable_partial_hash_hits)
        return tuple(tuple(m) for m in coordinator.load_mask(self._hashes(num_hashes), token_len))

    # ------------------------------------------------------------------- live manager
    def live_manager(self, groups: list[CacheGroup], *, num_blocks: int, use_eagle: bool = False, hash_block_size: int | None = None, max_model_len: int = 4096):
        from kvspec.impl.live import LiveManager  # noqa: PLC0415

        scheduler_bs, hash_bs = self.block_sizes(groups, hash_block_size)
        return LiveManager(
            self,
            self._group_specs(groups),
            num_blocks=num_blocks,
            scheduler_block_size=scheduler_bs,
            hash_block_size=hash_bs,
            use_eagle=use_eagle,
            max_model_len=max_model_len,
        )
