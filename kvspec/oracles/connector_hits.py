"""The judge of one lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector): every rule of spec/connector_hits.py and
reference/connector_hits.py its answer breaks, as data."""

from __future__ import annotations

from kvspec.oracles.invariants import BLOCKS_EQUAL, EQUALS_REFERENCE, NULL_BLOCK, SAFE_HIT, Violation
from kvspec.oracles.lookups import null_blocks_read
from kvspec.spec.connector_hits import (
    CONNECTOR_HIT_PROPERTIES,
    ConnectorAnswer,
    a_flagged_hit_holds_every_attention_kv,
    an_unflagged_hit_is_safe,
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

    * safety: spec/connector_hits.py's properties but the flagged hit's (flagged_hit_gaps); an
      unsafe unflagged hit is SAFE_HIT, the others are named by their sentence;
    * the blocks: no group reads a null block at an unflagged hit;
    * the reference: the same hit, flag, per-group hits, shared-prefix boundary and blocks.
    """
    found = []
    for prop in CONNECTOR_HIT_PROPERTIES:
        if prop is a_flagged_hit_holds_every_attention_kv:
            continue  # flagged_hit_gaps: the connector's to fill, not judged here
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
    """Under a flag, the attention KV the hit claims but the cache lacks
    (spec/connector_hits.py:a_flagged_hit_holds_every_attention_kv). vLLM leaves a flagged hit
    to the connector (the scheduler falls back to get_computed_blocks when the connector finds
    no tokens); whether a connector that does find tokens fills these gaps is beyond this
    check, so they are reported as a latent finding, never passed silently."""
    return a_flagged_hit_holds_every_attention_kv(setting, state, limit, answer)
