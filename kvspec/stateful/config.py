"""The configurations the stateful check draws: KV-cache groups (full attention, sliding
window, chunked local, Mamba align, the hidden-state cache and the circular buffer; one to
five groups; block sizes with lcm and gcd variety),
the hash unit (a prefix-match unit below the Mamba block gives partial hash hits), EAGLE (off,
the legacy last-block drop, or lookahead hashes; annotated or not; a one-token drafter or
multi-module MTP's chain of 2 to 4 modules), the Mamba / sliding-window retention interval, and
a pool small enough to force eviction.

Each configuration is one vLLM accepts: the refusals of the grouping and coordinator code
(a chunked-local group at an alignment other than its block size, or asked to drop for EAGLE;
an MTP chain longer than the scheduler block when a group is the drafter's) are
preconditions, not findings, so they are never drawn.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property, reduce

from hypothesis import strategies as st

from kvspec.spec.drafter import DrafterPolicy, drafter_groups, drafter_kv_groups
from kvspec.spec.hits import lookup_preconditions_hold
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import LOOKAHEAD_BLOCK_HASHES
from kvspec.spec.resolution import cache_hit_alignment, groups_hash_unit, hashing_sizes, scheduler_block_size
from kvspec.spec.setting import LookupSetting

EAGLE_MODES = (None, "drop", "lookahead")
# (num_speculative_tokens, multi-module MTP): a one-token drafter (EAGLE, single-module MTP) with
# one or two draft slots, or a chain of two to four MTP modules, one draft slot each.
DRAFTERS = ((1, False), (2, False), (2, True), (3, True), (4, True))
SHORT_NAMES = {Kind.FULL: "full", Kind.SLIDING_WINDOW: "swa", Kind.CHUNKED_LOCAL: "chunked", Kind.MAMBA: "mamba",
               Kind.HIDDEN_STATE: "hidden", Kind.CIRCULAR_BUFFER: "ring"}
# The kinds a KVCacheManager's pool can hold in a decoder-only model. The others never reach
# it (spec/hits.py: cross attention is encoder-decoder, encoder-only keeps no KV, HiSparse
# runs beside its own coordinator, and no coordinator builds a sink manager on 0.30-0.34).
STATEFUL_KINDS = (Kind.FULL, Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL, Kind.MAMBA, Kind.HIDDEN_STATE,
                  Kind.CIRCULAR_BUFFER)


def eagle_modes(rules) -> tuple[str | None, ...]:
    """The EAGLE modes a release with ``rules`` has: lookahead hashes only with
    spec/releases.py:LOOKAHEAD_BLOCK_HASHES."""
    return EAGLE_MODES if LOOKAHEAD_BLOCK_HASHES in rules else tuple(m for m in EAGLE_MODES if m != "lookahead")


# Real hybrids half the time (Jamba / Qwen3-Next, Gemma 3, gpt-oss, Llama 4 and their
# mixes; a target with extract_hidden_states' cache; DeepSeek V4's compressor ring beside its
# attention), any one to five groups otherwise.
ARCHETYPES = (
    (Kind.FULL, Kind.MAMBA), (Kind.SLIDING_WINDOW, Kind.MAMBA), (Kind.FULL, Kind.SLIDING_WINDOW),
    (Kind.FULL, Kind.SLIDING_WINDOW, Kind.MAMBA), (Kind.FULL, Kind.CHUNKED_LOCAL), (Kind.FULL, Kind.MAMBA, Kind.MAMBA),
    (Kind.FULL, Kind.HIDDEN_STATE), (Kind.FULL, Kind.CIRCULAR_BUFFER), (Kind.SLIDING_WINDOW, Kind.CIRCULAR_BUFFER),
)
KIND_LISTS = st.one_of(
    st.sampled_from(ARCHETYPES),
    st.lists(st.sampled_from(STATEFUL_KINDS), min_size=1, max_size=5),
)


@dataclass(frozen=True)
class MachineConfig:
    groups: tuple[CacheGroup, ...]  # is_eagle_group marks the group holding the drafter's layers
    hash_block_size: int
    eagle: str | None  # None, "drop" (use_eagle_block_drop) or "lookahead" (hashes over the prefill lookahead)
    num_speculative_tokens: int  # draft slots per step; also Mamba's speculative state blocks
    retention_interval: int | None  # prefix_cache_retention_interval: None dense, 0 the engine default
    num_blocks: int
    pool_scale: float = 1.0  # the pool, in multiples of what one longest request needs
    multi_module_mtp: bool = False  # the drafter is a chain of num_speculative_tokens MTP modules

    @property
    def prefill_lookahead(self) -> int:
        """Prompt tokens past a chunk the drafter reads (VllmConfig.num_prefill_lookahead_tokens):
        multi-module MTP's num_speculative_tokens, one for any other EAGLE drafter, none without."""
        if self.eagle is None:
            return 0
        return self.num_speculative_tokens if self.multi_module_mtp else 1

    @property
    def hash_lookahead_tokens(self) -> int:
        """Tokens after a block its hash covers: the prefill lookahead, under lookahead hashes
        (VllmConfig._resolve_num_hash_lookahead_tokens on 0.34, num_hash_lookahead_tokens on 0.33)."""
        return self.prefill_lookahead if self.eagle == "lookahead" else 0

    @property
    def scheduler_block_size(self) -> int:
        return scheduler_block_size(self.setting)

    @cached_property  # one object per configuration, so its sizes are worked out once (spec/setting.py:remembered)
    def setting(self) -> LookupSetting:
        return LookupSetting(self.groups, self.hash_block_size, use_eagle=self.eagle == "drop")

    @property
    def alignment(self) -> int:
        return cache_hit_alignment(self.setting)

    @property
    def drafter_groups(self) -> frozenset[int]:
        """The groups whose blocks may hold the drafter's KV, by the core's policy with EAGLE in
        either mode: the annotated one, or, when no group is annotated, every group but Mamba
        (the drafter's layers are somewhere, and never in a Mamba group; spec/drafter.py)."""
        return drafter_kv_groups(self.groups, self.eagle is not None, DrafterPolicy.CORE)

    @property
    def shape(self) -> str:
        """The group kinds, e.g. ``full+swa+mamba`` (repeats kept)."""
        return "+".join(SHORT_NAMES[g.kind] for g in self.groups)

    @property
    def eagle_label(self) -> str:
        if self.eagle is None:
            return "EAGLE off"
        annotated = any(g.is_eagle_group for g in self.groups)
        return f"EAGLE {self.eagle}, {'annotated' if annotated else 'unannotated'}"

    def mamba_block_size(self) -> int | None:
        return next((g.block_size for g in self.groups if g.kind == Kind.MAMBA), None)


def _valid(config: MachineConfig) -> bool:
    """vLLM's refusals:

    * chunked local only at an alignment equal to its block size and never asked to drop
      (single_type_kv_cache_manager:ChunkedLocalAttentionManager asserts both);
    * a prefill lookahead above the scheduler block when some group is the drafter's: under the
      EAGLE drop every group if none is annotated, under lookahead hashes the annotated ones
      (KVCacheCoordinator.__init__: eagle_group_ids, 'Multi-module MTP with prefix caching
      requires scheduler_block_size ...')."""
    setting = config.setting
    drops = drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.CORE)
    for gid, group in enumerate(config.groups):
        if group.kind == Kind.CHUNKED_LOCAL and (group.block_size != config.alignment or gid in drops):
            return False
    drafters = drops or any(g.is_eagle_group for g in config.groups)
    return not (drafters and config.prefill_lookahead > config.scheduler_block_size)


def _mtp_left_out(config: MachineConfig) -> bool:
    """Where multi-module MTP meets an open vLLM finding (spec/open_findings.py, held by every
    release read that can reach it), left out of the draws so that no run ends on it:

    * beside Mamba, the scheduler cuts the Mamba split's chunk to keep the prefill lookahead
      (Scheduler._reserve_prefill_lookahead after _mamba_block_aligned_split), ends it inside a
      Mamba block, and then schedules the request no further
      (MAMBA_SPLIT_UNDONE_BY_THE_PREFILL_LOOKAHEAD);
    * with lookahead hashes beside a window, chunked local or Mamba group, a lookup reads past
      the request's block hashes (their finders' block_hashes[i] below max_length // block_size,
      while k lookahead tokens leave fewer hashes): IndexError
      (LOOKUP_READS_PAST_THE_LOOKAHEAD_HASHES)."""
    kinds = {g.kind for g in config.groups}
    if Kind.MAMBA in kinds:
        return True
    return config.eagle == "lookahead" and bool(kinds & {Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL})


@st.composite
def machine_configs(draw, modes: tuple[str | None, ...] = EAGLE_MODES) -> MachineConfig:
    """A configuration vLLM accepts, EAGLE in one of ``modes`` (the target release's, eagle_modes)."""
    base = draw(st.sampled_from([2, 4, 8]))
    mamba_size = base * draw(st.sampled_from([1, 2, 4]))
    groups = []
    kinds = draw(KIND_LISTS)
    if not lookup_preconditions_hold(tuple(CacheGroup(kind, base) for kind in kinds)):
        kinds = (Kind.FULL, *kinds)  # several groups and none prefix-cacheable: vLLM refuses the model
    for kind in kinds:
        size = mamba_size if kind == Kind.MAMBA else base * draw(st.sampled_from([1, 2, 4]))
        if kind == Kind.SLIDING_WINDOW:
            groups.append(CacheGroup(kind, size, window=draw(st.integers(2, 4 * size))))
        elif kind == Kind.CHUNKED_LOCAL:
            groups.append(CacheGroup(kind, size, chunk=size * draw(st.integers(1, 4))))
        else:
            groups.append(CacheGroup(kind, size))
    sizes = [g.block_size for g in groups]
    unit = None
    if len(groups) > 1 and draw(st.booleans()):  # a prefix-match unit below the gcd
        gcd = reduce(math.gcd, hashing_sizes(groups))
        unit = draw(st.sampled_from([d for d in range(1, gcd + 1) if gcd % d == 0]))
    hash_block_size = groups_hash_unit(groups, unit)

    eagle = draw(st.sampled_from(modes))
    attention = [gid for gid, g in enumerate(groups) if g.kind in (Kind.FULL, Kind.SLIDING_WINDOW)]
    if eagle and attention and draw(st.booleans()):
        annotated = draw(st.sampled_from(attention))
        groups[annotated] = CacheGroup(groups[annotated].kind, groups[annotated].block_size,
                                       groups[annotated].window, groups[annotated].chunk, is_eagle_group=True)
    scheduler_block_size = reduce(math.lcm, sizes)
    sparse = any(g.kind in (Kind.SLIDING_WINDOW, Kind.MAMBA) for g in groups)
    retention = draw(st.sampled_from([None, 0, 1, 2])) if sparse else None
    if retention in (1, 2):
        retention *= scheduler_block_size
    scale = draw(st.sampled_from([1.0, 1.25, 1.5, 2.0]))
    num_speculative_tokens, multi_module_mtp = draw(st.sampled_from(DRAFTERS)) if eagle else (0, False)
    config = MachineConfig(tuple(groups), hash_block_size, eagle, num_speculative_tokens, retention, 0, scale,
                           multi_module_mtp)
    if not _valid(config):  # drop the groups vLLM refuses here, keep the rest of the draw
        kept = tuple(g for g in config.groups if g.kind != Kind.CHUNKED_LOCAL) or (CacheGroup(Kind.FULL, base),)
        if not lookup_preconditions_hold(kept):  # only rings were left: the drawn unit divided no block of theirs
            kept, unit = (CacheGroup(Kind.FULL, base), *kept), None
        config = MachineConfig(kept, groups_hash_unit(list(kept), unit if len(kept) > 1 else None), eagle,
                               num_speculative_tokens, retention if any(
                                   g.kind in (Kind.SLIDING_WINDOW, Kind.MAMBA) for g in kept) else None,
                               0, scale, multi_module_mtp)
    if multi_module_mtp and _mtp_left_out(config):  # the drafter stays, one module
        config = dataclasses.replace(config, multi_module_mtp=False)
    if not _valid(config):  # only a chain longer than vLLM accepts is left to refuse: the longest it does
        config = dataclasses.replace(config, num_speculative_tokens=config.scheduler_block_size)
    return config


def pool_need(config: MachineConfig, num_tokens: int) -> int:
    """Blocks one request of ``num_tokens`` tokens may hold at once: every attention position
    plus the draft slots, and a Mamba group's running, previous and speculative state blocks
    (plus a copy-on-write block), a circular buffer's one ring block; and the null block."""
    need = 1
    for group in config.groups:
        if group.kind == Kind.CIRCULAR_BUFFER:
            need += 1  # CircularBufferManager.get_num_blocks_to_allocate: one block per request
        elif group.kind == Kind.MAMBA:
            need += 3 + config.num_speculative_tokens
        else:
            need += -(-(num_tokens + config.num_speculative_tokens) // group.block_size) + 1
    return need
