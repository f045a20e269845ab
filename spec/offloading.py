"""Which hits the OffloadingConnector may return: spec/hits.py's safety rules, read in the units
the connector stores and with the connector's answer to unannotated EAGLE.

The connector keeps KV in "chunks" of ``blocks_per_chunk`` GPU blocks per group and keys a
chunk by the hash unit that ends it, exactly as spec/hits.py keys a block. So a group's chunk
is its block in spec/hits.py's vocabulary (``chunk_setting``), and a cache state holds
``(group, hash index)`` entries at chunk ends only (the connector stores nothing else on the
complete-chunk path checked here).

Two decisions differ from the core's prefix cache, each a reading of vLLM's code:

* **Drafter groups.** The KV of a group that may hold the drafter's layers must prove the token
  at the hit (spec/hits.py). With EAGLE on and no group annotated, the core assumes every group
  may (flag-all); the connector assumes none does, on purpose (vLLM #52735,
  offloading/scheduler.py:SchedulerOffloadConfig.from_spec: "drafter KV served one chunk stale
  can only lower speculative acceptance rates -- the target model verifies every draft -- so
  fail toward serving"). kvspec accepts that: stale drafter KV costs acceptance, never output
  correctness, so on this path only annotated groups carry the proof obligation (for them it
  is the connector's own intent: it pops their trailing chunk). The two answers are the two
  policies of spec/drafter.py.
* **Alignment.** The connector never rounds a hit to the lcm of the block sizes (only Mamba's
  chunk, vllm resolve_mamba_align_size), and nothing downstream needs it: the scheduler adopts
  any ``num_external_computed_tokens <= num_tokens``. A hit is safe when every group's KV
  content is right at that length, whatever its alignment.

And one scheduler rule: a hit of the whole prompt is resumed one token earlier (the last token
is recomputed for its logits, vllm.v1.core.sched.scheduler:_update_waiting_for_remote_kv), which
full attention can do from the KV it loaded but a window or a recurrent state cannot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from kvspec.spec.drafter import DrafterPolicy, drafter_groups
from kvspec.spec.hits import group_target_unsafe_reason, group_unsafe_reason
from kvspec.spec.layers import FULL_ATTENTION_KINDS, CacheGroup
from kvspec.spec.setting import CacheState, LookupSetting


@dataclass(frozen=True)
class OffloadSetting:
    """What the connector's lookup depends on besides the cache and the request.

    ``groups`` carry GPU block sizes; ``use_eagle`` is the scheduler's use_eagle_block_drop;
    annotations (``is_eagle_group``) are what vLLM's grouping set. ``lookahead_hashes``: with
    EAGLE, each hash also covers the token after its unit (VllmConfig.num_hash_lookahead_tokens
    1, where the release has spec/releases.py:OFFLOADING_TAKES_LOOKAHEAD_HASHES), so a chunk's
    key proves the drafter saw the next token and no group owes a proof past the hit; a request
    hashes a unit only once that token exists (spec/caching.py:hashed_units)."""

    groups: tuple[CacheGroup, ...]
    hash_block_size: int  # tokens per block hash (OffloadingSpec.tokens_per_hash)
    blocks_per_chunk: int = 1
    use_eagle: bool = False
    lookahead_hashes: bool = False

    @property
    def lookahead_tokens(self) -> int:
        """Tokens after a unit its hash covers (spec/caching.py:hashed_units)."""
        return 1 if self.lookahead_hashes else 0

    def __post_init__(self) -> None:
        if not self.groups or self.blocks_per_chunk < 1:
            raise ValueError("an offload lookup needs a group and at least one block per chunk")
        if self.lookahead_hashes and not self.use_eagle:
            raise ValueError("lookahead hashes come only with EAGLE")
        for group in self.groups:
            if group.block_size % self.hash_block_size:
                raise ValueError(f"block size {group.block_size} is not a multiple of the hash unit")


def tokens_per_chunk(setting: OffloadSetting, gid: int) -> int:
    """One offloaded chunk of the group (offloading/scheduler.py:GroupOffloadConfig.tokens_per_chunk)."""
    return setting.groups[gid].block_size * setting.blocks_per_chunk


def chunk_key(setting: OffloadSetting, gid: int, chunk: int) -> int:
    """The hash index chunk ``chunk`` of a group is stored under: the unit that ends it
    (offloading/scheduler.py:RequestOffloadState.update_offload_keys)."""
    return (chunk + 1) * tokens_per_chunk(setting, gid) // setting.hash_block_size - 1


@functools.lru_cache(maxsize=256)
def chunk_setting(setting: OffloadSetting) -> LookupSetting:
    """spec/hits.py's setting with each group's chunk as its block, and EAGLE on exactly when
    some group is annotated, so that even the core's drafter policy would flag the groups the
    connector does (spec/drafter.py; the safety rules below ask the connector's policy). Under
    lookahead hashes no group owes the drafter's proof past the hit: the key ending at the hit
    covers the next token."""
    groups = tuple(replace(g, block_size=g.block_size * setting.blocks_per_chunk) for g in setting.groups)
    on_path = drafter_groups(setting.groups, setting.use_eagle, DrafterPolicy.OFFLOADING)
    return LookupSetting(groups, setting.hash_block_size, use_eagle=bool(on_path) and not setting.lookahead_hashes)


def offload_unsafe_reason(
    setting: OffloadSetting, state: CacheState, hit: int, num_tokens: int, cap: int | None = None
) -> str | None:
    """Why the connector may not report ``hit`` for a ``num_tokens`` request whose load is
    capped at ``cap`` tokens (None if it may): within the request and the cap, and every group
    able to resume there (offload_group_unsafe_reason)."""
    limit = num_tokens if cap is None else min(num_tokens, cap)
    if not 0 <= hit <= limit:
        return f"hit {hit} outside [0, {limit}]"
    for gid in range(len(setting.groups)):
        if reason := offload_group_unsafe_reason(setting, state, gid, hit, num_tokens):
            return reason
    return None


def offload_group_unsafe_reason(setting: OffloadSetting, state: CacheState, gid: int, hit: int, num_tokens: int) -> str | None:
    """Why group ``gid`` cannot resume at ``hit`` from the chunks in ``state`` (None if it can):
    its KV right at the hit (spec/hits.py:group_unsafe_reason, in chunk units, the drafter's
    groups by the connector's policy; under lookahead hashes the chunk keyed at the hit is the
    drafter's proof too), and a whole-prompt hit only for full attention."""
    group = setting.groups[gid]
    if hit == num_tokens and hit > 0 and group.kind not in FULL_ATTENTION_KINDS:
        return f"whole-prompt hit {hit}: group {gid} ({group.kind}) cannot resume one token earlier"
    if setting.lookahead_hashes:  # the key ending at the hit covers token ``hit`` too: the drafter's proof
        return group_target_unsafe_reason(chunk_setting(setting), state, gid, hit)
    return group_unsafe_reason(chunk_setting(setting), state, gid, hit, DrafterPolicy.OFFLOADING)


def max_safe_offload_hit(setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None = None) -> int:
    """The longest hit offload_unsafe_reason accepts, trying every hash-unit multiple and the
    limit itself (a cap need not fall on a hash unit)."""
    limit = num_tokens if cap is None else min(num_tokens, cap)
    candidates = set(range(0, limit + 1, setting.hash_block_size)) | {limit}
    return max(h for h in candidates if offload_unsafe_reason(setting, state, h, num_tokens, cap) is None)
