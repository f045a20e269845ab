"""Which KV-cache groups may hold the EAGLE drafter's layers, and so must prove the token at a
hit (spec/hits.py's drafter tier): one rule, with vLLM's two answers to unannotated EAGLE as
its policy.

* ``CORE``, the engine core's prefix cache: the annotated groups, or, with EAGLE on and no group
  annotated, every group (flag-all; vllm.v1.core.kv_cache_coordinator:KVCacheCoordinator.__init__,
  drop_eagle_group_ids). With EAGLE off, none.
* ``OFFLOADING``, the OffloadingConnector: the annotated groups only, whatever EAGLE says; with
  nothing annotated no group is the drafter's, on purpose (vLLM #52735;
  offloading/scheduler.py:SchedulerOffloadConfig.from_spec, and _lookup_complete_chunks, whose
  apply_eagle_drop reads is_eagle_group alone). Stale drafter KV costs acceptance, never output.

A Mamba group holds no drafter layers: it may be flagged (the core asks it to drop, which its
finder ignores) but never owes the proof (drafter_kv_groups).
"""

from __future__ import annotations

from enum import StrEnum

from kvspec.spec.layers import CacheGroup, Kind


class DrafterPolicy(StrEnum):
    """Whose answer to unannotated EAGLE applies: the core coordinator's or the connector's."""

    CORE = "core"
    OFFLOADING = "offloading"


def drafter_groups(groups: tuple[CacheGroup, ...], use_eagle: bool, policy: DrafterPolicy) -> frozenset[int]:
    """The groups flagged as possibly holding the drafter's layers (see the module docstring):
    the core's drop_eagle_group_ids, or the connector's is_eagle_group groups."""
    annotated = frozenset(gid for gid, g in enumerate(groups) if g.is_eagle_group)
    if policy == DrafterPolicy.OFFLOADING:
        return annotated
    if not use_eagle:
        return frozenset()
    return annotated or frozenset(range(len(groups)))


def drafter_kv_groups(groups: tuple[CacheGroup, ...], use_eagle: bool, policy: DrafterPolicy) -> frozenset[int]:
    """Of the flagged groups, those whose KV the drafter may have written: all but Mamba."""
    flagged = drafter_groups(groups, use_eagle, policy)
    return frozenset(gid for gid in flagged if groups[gid].kind != Kind.MAMBA)
