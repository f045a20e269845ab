"""What the engine core's lookup for a request scheduled with a KV connector may answer
(vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks_for_connector), in
spec/hits.py's vocabulary.

For a hybrid model with Mamba whose first spec group is full attention, vLLM looks every group
up on its own (kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit_per_group)
and reports the full-attention hit as the local prefix, flagging ``hit_diverged`` when some
group lags behind it. The scheduler acts on the flag (sched/scheduler.py, its use of
``hit_diverged``): with no external tokens it falls back to ``get_computed_blocks``, the core's
reconciled hit; with some, allocate_slots gives each lagging group fresh blocks from its own
hit on and the connector loads them, attention KV and Mamba state alike
(kvspec/oracles/connector_hits.py:flagged_hit_gaps has the paths). So the flag is the safety
valve, and the rules are:

* an unflagged hit is safe for every group, both tiers (spec/hits.py:unsafe_reason);
* a flagged hit is full attention's own: the full-attention group vLLM reports
  (HybridKVCacheCoordinator.full_attention_group_id, the first) holds its KV, whatever the
  lagging groups lack;
* every per-group hit is safe for its own group at that length (the numbers a connector reads).

A flag on a hit every group could resume at costs a fallback, never correctness: a divergence
(kvspec/divergences/connector_hits.py), as is an unflagged hit shorter than the core's.
Each property takes the lookup's ``limit`` (max_connector_hit) and returns the ways an answer
breaks it, empty when it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.hits import group_target_unsafe_reason, group_unsafe_reason, unsafe_reason
from kvspec.spec.layers import FULL_ATTENTION_KINDS, Kind
from kvspec.spec.setting import CacheState, LookupSetting


@dataclass(frozen=True)
class ConnectorAnswer:
    """get_computed_blocks_for_connector's numbers, with the per-group hits it decided from
    (None where it took the core's path without asking them)."""

    hit: int  # the local computed tokens
    hit_diverged: bool
    per_group: tuple[int, ...] | None
    boundary: int = 0  # the shared-prefix boundary (get_computed_blocks' third value)


def takes_the_per_group_path(setting: LookupSetting) -> bool:
    """The model has Mamba layers, more than one group (so a HybridKVCacheCoordinator) and a
    full-attention first spec group (HybridKVCacheCoordinator.full_attention_group_id: spec
    groups are ordered full attention first); otherwise vLLM answers as get_computed_blocks."""
    groups = setting.groups
    return (
        len(groups) > 1
        and any(g.kind == Kind.MAMBA for g in groups)
        and any(g.kind in FULL_ATTENTION_KINDS for g in groups)
    )


def max_connector_hit(num_tokens: int, cap: int | None = None) -> int:
    """The last token is always recomputed for its logits, and the scheduler's cap (its aux
    output connector's bound) may lower it (Request.get_max_cache_hit_length)."""
    return num_tokens - 1 if cap is None else min(num_tokens - 1, cap)


def an_unflagged_hit_is_safe(setting: LookupSetting, state: CacheState, limit: int,
                             answer: ConnectorAnswer) -> list[str]:
    if answer.hit_diverged:
        return []
    reason = unsafe_reason(setting, state, answer.hit, limit)
    return [f"unflagged hit {answer.hit} is unsafe: {reason}"] if reason else []


def reported_full_attention_group(setting: LookupSetting) -> int:
    """The group whose own hit a flagged answer reports: the first full-attention one."""
    return next(gid for gid, group in enumerate(setting.groups) if group.kind in FULL_ATTENTION_KINDS)


def a_flagged_hit_is_full_attentions_own(setting: LookupSetting, state: CacheState, limit: int,
                                         answer: ConnectorAnswer) -> list[str]:
    if not answer.hit_diverged:
        return []
    found = []
    if not 0 < answer.hit <= limit:
        found.append(f"flagged hit {answer.hit} outside (0, {limit}]")
    gid = reported_full_attention_group(setting)
    if reason := group_target_unsafe_reason(setting, state, gid, answer.hit):
        found.append(f"flagged hit {answer.hit}: {reason}")
    return found


def lagging_groups_gaps(setting: LookupSetting, state: CacheState, answer: ConnectorAnswer) -> list[str]:
    """Under a flag, the attention KV the hit claims that a lagging group lacks: the connector's
    to load (not a rule; Mamba's state at the hit is always the connector's)."""
    if not answer.hit_diverged:
        return []
    reported = reported_full_attention_group(setting)
    return [f"flagged hit {answer.hit}: {reason}" for gid, group in enumerate(setting.groups)
            if gid != reported and group.kind != Kind.MAMBA
            and (reason := group_target_unsafe_reason(setting, state, gid, answer.hit))]


def only_the_per_group_path_flags(setting: LookupSetting, state: CacheState, limit: int,
                                  answer: ConnectorAnswer) -> list[str]:
    if answer.hit_diverged and not takes_the_per_group_path(setting):
        return [f"hit {answer.hit} flagged diverged on a model that takes get_computed_blocks' path"]
    return []


def every_per_group_hit_is_safe_for_its_group(setting: LookupSetting, state: CacheState, limit: int,
                                              answer: ConnectorAnswer) -> list[str]:
    if answer.per_group is None:
        return []
    found = []
    for gid, hit in enumerate(answer.per_group):
        if hit > limit:
            found.append(f"group {gid}'s own hit {hit} is past {limit}")
        elif reason := group_unsafe_reason(setting, state, gid, hit):
            found.append(f"group {gid}'s own hit {hit} is unsafe for it: {reason}")
    return found


def spurious_flag(setting: LookupSetting, state: CacheState, limit: int, answer: ConnectorAnswer) -> bool:
    """A flag on a hit every group could resume at (a needless fallback; not a safety rule)."""
    return answer.hit_diverged and unsafe_reason(setting, state, answer.hit, limit) is None


CONNECTOR_HIT_PROPERTIES = (
    an_unflagged_hit_is_safe,
    a_flagged_hit_is_full_attentions_own,
    only_the_per_group_path_flags,
    every_per_group_hit_is_safe_for_its_group,
)
