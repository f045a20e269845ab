"""The judge of one lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector): every rule of spec/connector_hits.py and
reference/connector_hits.py its answer breaks, as data."""

from __future__ import annotations

from kvspec.oracles.invariants import BLOCKS_EQUAL, EQUALS_REFERENCE, NULL_BLOCK, SAFE_HIT, Violation
from kvspec.oracles.lookups import null_blocks_read
from kvspec.spec.connector_hits import (
    CONNECTOR_HIT_PROPERTIES,
    ConnectorAnswer,
    an_unflagged_hit_is_safe,
    lagging_groups_gaps,
)
from kvspec.spec.setting import CacheState, Hit, LookupSetting

# What a flag or a per-group hit must equal, beside the hit itself.
FLAG_EQUAL = "hit_diverged equals the reference's (reference/connector_hits.py)"
PER_GROUP_EQUAL = "per-group hits equal the reference's (reference/connector_hits.py:per_group_hits)"
BOUNDARY_EQUAL = "the shared-prefix boundary equals the reference's (reference/connector_hits.py)"


def connector_violations(
    blocks: Hit, answer: ConnectorAnswer, reference_blocks: Hit, reference: ConnectorAnswer,
    setting: LookupSetting, state: CacheState, limit: int,
) -> list[Violation]:
    """vLLM's answer breaks:

    * safety: spec/connector_hits.py's properties; an unsafe unflagged hit is SAFE_HIT, the
      others are named by their sentence (a lagging group's gap is not one: flagged_hit_gaps);
    * the blocks: no group reads a null block at an unflagged hit;
    * the reference: the same hit, flag, per-group hits, shared-prefix boundary and blocks.
    """
    found = []
    for prop in CONNECTOR_HIT_PROPERTIES:
        name = SAFE_HIT if prop is an_unflagged_hit_is_safe else prop.__name__.replace("_", " ")
        found += [Violation(name, detail) for detail in prop(setting, state, limit, answer)]
    unread = [] if answer.hit_diverged else null_blocks_read(setting, blocks)
    if unread:
        found.append(Violation(NULL_BLOCK, f"vLLM gives null blocks a group reads {unread}"))
    if answer.hit != reference.hit:
        found.append(Violation(EQUALS_REFERENCE, f"hit: vLLM {answer.hit} != reference {reference.hit}"))
    if answer.hit_diverged != reference.hit_diverged:
        found.append(Violation(FLAG_EQUAL, f"hit_diverged: vLLM {answer.hit_diverged}, reference {reference.hit_diverged}"))
    if answer.per_group != reference.per_group:
        found.append(Violation(PER_GROUP_EQUAL, f"per-group hits: vLLM {answer.per_group}, reference {reference.per_group}"))
    if answer.boundary != reference.boundary:
        found.append(Violation(BOUNDARY_EQUAL, f"shared-prefix boundary: vLLM {answer.boundary}, reference {reference.boundary}"))
    if not found and blocks.real_blocks != reference_blocks.real_blocks:
        found.append(Violation(BLOCKS_EQUAL, f"blocks differ: vLLM {blocks.real_blocks}, reference {reference_blocks.real_blocks}"))
    return found


def flagged_hit_gaps(setting: LookupSetting, state: CacheState, limit: int, answer: ConnectorAnswer) -> list[str]:
    """Under a flag, the attention KV the hit claims but a lagging group lacks
    (spec/connector_hits.py:lagging_groups_gaps). Counted, never failed: on 0.30.0-0.34.0
    every connector that can meet such a hit fills its gaps before the model reads them
    (the paths below under vllm/; tests/test_connector_hits.py drives the NIXL one).

    * Only a connector whose ``supports_divergent_local_hybrid_hits`` holds is asked this lookup
      (v1/core/sched/scheduler.py:681-693; kv_connector/v1/base.py:190 defaults it to False):
      NIXL pull and push (nixl/connector.py:99), Mooncake's P2P connector as a kv_consumer of
      a Mamba model (mooncake/mooncake_connector.py:788, 806-812), MoRIIO reading Mamba state
      (moriio/moriio_connector.py:291, 316-319), a MultiConnector of only these
      (multi_connector.py:214), which routes the load to one (:481-524). The offloading,
      Mooncake store, SimpleCPUOffload and LMCache connectors keep the default: get_computed_blocks.
    * With no external tokens the scheduler takes get_computed_blocks' hit instead
      (scheduler.py:1238-1247, after the aux-output cap, all or nothing:
      aux_output_connector/connector.py:148-154).
    * With some, allocate_slots gives a lagging group its own hit's blocks and fresh ones up to
      the hit plus the external tokens (kv_cache_coordinator.py:265-313;
      single_type_kv_cache_manager.py:273-330, then 332-373: cdiv(total, block) - held), left
      unhashed while an async load is pending (scheduler.py:1497-1513, kv_cache_manager.py:634).
      So the gap lies in blocks the connector loads. NIXL hands its worker every unhashed
      block of every transfer group (pull_scheduler.py:145-179, push_scheduler.py:171;
      kv_cache_manager.py:114), a window's tail only (base_scheduler.py:253-294), and the
      worker pairs them with the prefiller's whole-prompt list from its end
      (nixl/base_worker.py:3878-3973), or by position from each group's own cached count
      under DCP (:3756-3815). Mooncake pulls the same unhashed blocks
      (mooncake_connector.py:1215-1233), the prefiller writing its list's tail into them, an
      error if the decode holds more (:2102-2125). MoRIIO READ reads into all of each group's
      blocks, paired with the prefiller's by position (moriio_connector.py:1082-1116, 1552-1578).
    * A failed load of a multi-group request is recomputed from 0 or failed
      (scheduler.py:3839-3852; block-level failures are refused for several groups,
      :3863-3873), never resumed at the hit.

    Outside this: groups outside prefix caching (circular buffer, HiSparse's hot and resident
    ones, which transfer nothing) claim nothing, so have no gap; the Mamba state at the hit is
    the transfer's by design (kv_cache_manager.py:352-372)."""
    return lagging_groups_gaps(setting, state, answer)
