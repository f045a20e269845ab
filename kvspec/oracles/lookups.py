"""The judge of one prefix-cache lookup (the core coordinators, the Mooncake store, DCP), and of
the Mooncake store's load mask: every rule of spec/hits.py and reference/lookup.py the answer
breaks, as data. The gate asserts there are none (kvspec/gate/lookups.py); review and fuzz file
what there is."""

from __future__ import annotations

from kvspec.divergences.known import DRAFTER_KIND, drafter_where
from kvspec.oracles.invariants import (
    BLOCKS_EQUAL,
    CAP_ALIGNED,
    DRAFTER_PROVEN,
    EQUALS_REFERENCE,
    LOAD_MASK,
    MAMBA_STATE,
    NULL_BLOCK,
    SAFE_HIT,
    UNCACHED_PREFIX,
    Violation,
)
from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.dcp import DcpSetting
from kvspec.spec.hits import blocks_read, drafter_unproven_reason, group_unsafe_reason, target_unsafe_reason
from kvspec.spec.layers import Kind
from kvspec.spec.releases import NEWEST_RULES
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import CacheState, Hit, LookupSetting


def reference_hit(path: str, setting: LookupSetting, state: CacheState, max_length: int, rules=NEWEST_RULES) -> Hit:
    """reference/lookup.py's answer on the core path or the Mooncake store's, for a release with
    ``rules`` (spec/releases.py)."""
    return (coordinator_lookup if path == "core" else mooncake_lookup)(setting, state, max_length, rules)


def lookup_violations(
    path: str,
    answer: Hit,
    setting: LookupSetting,
    state: CacheState,
    max_length: int,
    *,
    known: dict | None = None,
    reference: Hit | None = None,
    uncached: tuple[int | None, int] | None = None,
    rules=NEWEST_RULES,
) -> list[Violation]:
    """Every rule vLLM's ``answer`` on ``path`` breaks (``reference``: reference/lookup.py's
    answer, computed when not given):

    * the target's KV and state are all there at the hit (always a violation);
    * a group that may hold the drafter proves the token at the hit, unless ``known`` records
      that drafter-unproven situation (``known=None``: nothing is excused);
    * no group reads a null block; Mamba adopts the state at the hit, not past it;
    * the hit is within the cap and on the alignment;
    * it equals the reference's, with the same real blocks, and (``uncached``: vLLM's and the
      reference's uncached common prefix, vLLM's None when it does not report one) the same
      uncached common prefix.
    """
    reference = reference_hit(path, setting, state, max_length, rules) if reference is None else reference
    alignment = cache_hit_alignment(setting)
    hit, found = answer.length, []
    if reason := target_unsafe_reason(setting, state, hit, max_length):
        found.append(Violation(SAFE_HIT, f"vLLM's hit {hit} is unsafe: {reason}"))
    if reason := drafter_unproven_reason(setting, state, hit):
        where = drafter_where(path, setting)
        if known is None:
            found.append(Violation(DRAFTER_PROVEN, f"vLLM's hit {hit} is drafter-unproven: {reason}"))
        elif (DRAFTER_KIND, where) not in known:
            found.append(Violation(DRAFTER_PROVEN, f"vLLM's hit {hit} is drafter-unproven: {reason}; "
                                                   f"NEW divergence: {DRAFTER_KIND} at {where!r}"))
    if missing := null_blocks_read(setting, answer):
        found.append(Violation(NULL_BLOCK, f"vLLM hands null blocks {missing}"))
    for gid, group in enumerate(setting.groups):
        if group.kind == Kind.MAMBA and len(answer.real_blocks[gid]) != -(-hit // group.block_size):
            found.append(Violation(MAMBA_STATE, f"Mamba group {gid} gets {len(answer.real_blocks[gid])} blocks for hit {hit}"))
    return found + answer_violations(answer, reference, max_length, alignment, uncached)


def answer_violations(answer: Hit, reference: Hit, max_length: int, alignment: int,
                      uncached: tuple[int | None, int] | None) -> list[Violation]:
    """The hit within the cap and on the alignment, and the reference's answer: the same length,
    the same real blocks, and (vLLM's None: a vLLM that does not report it) the same uncached
    common prefix."""
    hit, found = answer.length, []
    if not (hit <= max_length and hit % alignment == 0):
        found.append(Violation(CAP_ALIGNED, f"hit {hit}, cap {max_length}, alignment {alignment}"))
    if hit != reference.length:
        found.append(Violation(EQUALS_REFERENCE, f"hit: vLLM {hit} != reference {reference.length}"))
    elif answer.real_blocks != reference.real_blocks:
        found.append(Violation(BLOCKS_EQUAL, f"real blocks differ: vLLM {answer.real_blocks} != reference {reference.real_blocks}"))
    if uncached is not None and uncached[0] is not None and uncached[0] != uncached[1]:
        found.append(Violation(UNCACHED_PREFIX, f"uncached common prefix: vLLM {uncached[0]} != reference {uncached[1]}"))
    return found


def null_blocks_read(setting: LookupSetting, hit: Hit) -> list[tuple[int, int]]:
    """(group, block) pairs a group reads at the hit but the lookup gave it no real block for."""
    return [
        (gid, block)
        for gid, real in enumerate(hit.real_blocks)
        for block in blocks_read(setting, gid, hit.length)
        if block >= len(real) or not real[block]
    ]


def load_mask_violations(masks, expected, hit: int) -> list[Violation]:
    """The Mooncake store's receive side loads, at ``hit``, the reference's blocks."""
    if masks == expected:
        return []
    return [Violation(LOAD_MASK, f"load mask at {hit}: vLLM {masks}, reference {expected}")]


def dcp_lookup_violations(path: str, answer: Hit, setting: DcpSetting, state: CacheState, max_length: int, *,
                          reference: Hit, uncached: tuple[int | None, int]) -> list[Violation]:
    """The same rules under decode context parallelism (DCP > 1), at the sharded block sizes
    (spec/dcp.py): each group safe at the hit (both tiers: no DCP situation is a recorded
    drafter divergence), no null block read, the DCP hit alignment, and the reference's answer."""
    view, hit, found = setting.view(), answer.length, []
    for gid in range(len(setting.groups)):
        if reason := group_unsafe_reason(view, state, gid, hit):
            found.append(Violation(SAFE_HIT, f"vLLM's hit {hit} is unsafe: {reason}"))
    if missing := null_blocks_read(view, answer):
        found.append(Violation(NULL_BLOCK, f"vLLM hands null blocks {missing}"))
    return found + answer_violations(answer, reference, max_length, cache_hit_alignment(setting), uncached)
