"""Names for what went wrong, and for where: every violation kvspec review and kvspec fuzz
report is an (invariant, situation) pair, so two vLLMs' results can be compared and a campaign's
finds deduplicated. The conditions are the gate's (kvspec/gate/lookups.py,
kvspec/gate/grouping.py, kvspec/stateful/machine.py), evaluated all at once instead of stopping at
the first failed assertion, so a report names every rule an answer breaks.
"""

from __future__ import annotations

from kvspec.gate.lookups import null_blocks_read, situation
from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.grouping_properties import PROPERTIES, Model
from kvspec.spec.hits import (
    CacheState,
    Hit,
    LookupSetting,
    cache_hit_alignment,
    drafter_unproven_reason,
    target_unsafe_reason,
)
from kvspec.spec.layers import Kind, block_drop_in_effect

lookup_situation = situation  # the gate's name for where a lookup happened

# Invariant names, most severe first: a find is filed under the first it breaks.
SAFE_HIT = "safe hit: every group can resume at the hit (spec/hits.py)"
DRAFTER_PROVEN = "drafter proven: a group that may hold the drafter proves the token at the hit (spec/hits.py)"
NULL_BLOCK = "no null block is read at the hit"
MAMBA_STATE = "Mamba adopts the state at the hit, not past it"
CAP_ALIGNED = "hit within the cap and on the alignment"
EQUALS_REFERENCE = "hit length equals the reference's (reference/lookup.py)"
BLOCKS_EQUAL = "reused blocks equal the reference's"
CRASHED = "vLLM does not crash on a valid input"
GROUPS_EQUAL = "groups equal the reference's (reference/grouping.py)"
WARNINGS_EQUAL = "warnings equal the reference's"
REFUSAL_EQUAL = "refuses exactly what the reference refuses"
STATEFUL_SAFE = "stateful: every hit and read finds the claimed prefix in its blocks"
STATEFUL_DRAFTER = "stateful: every hit's drafter KV was computed with the request's next token"
STATEFUL_CAP = "stateful: hit within the cap and on the alignment"
STATEFUL_REFERENCE = "stateful: hit equals the reference's over the reference cache model"
STATEFUL_BLOCKS = "stateful: the pool (ref counts, free queue, cached keys) equals the reference cache model's"
STATEFUL_OTHER = "stateful: an assertion of kvspec/stateful/machine.py"
SEVERITY = [
    SAFE_HIT, NULL_BLOCK, MAMBA_STATE, STATEFUL_SAFE, CRASHED, DRAFTER_PROVEN, STATEFUL_DRAFTER, CAP_ALIGNED, STATEFUL_CAP,
    STATEFUL_BLOCKS, EQUALS_REFERENCE, STATEFUL_REFERENCE, STATEFUL_OTHER, BLOCKS_EQUAL, REFUSAL_EQUAL, GROUPS_EQUAL, WARNINGS_EQUAL,
] + [p.__name__.replace("_", " ") for p in PROPERTIES]


def most_severe(violations: list[tuple[str, str]]) -> tuple[str, str]:
    rank = {name: i for i, name in enumerate(SEVERITY)}
    return min(violations, key=lambda v: rank.get(v[0], len(rank)))


# ----------------------------------------------------------------------------- lookups
def reference_hit(path: str, setting: LookupSetting, state: CacheState, max_length: int) -> Hit:
    return (coordinator_lookup if path == "core" else mooncake_lookup)(setting, state, max_length)


def lookup_violations(path: str, vllm: Hit, setting: LookupSetting, state: CacheState, max_length: int) -> list[tuple[str, str]]:
    """Every condition of lookup_check.assert_lookup_conforms that ``vllm`` breaks, with why."""
    reference = reference_hit(path, setting, state, max_length)
    hit, found = vllm.length, []
    if reason := target_unsafe_reason(setting, state, hit, max_length):
        found.append((SAFE_HIT, f"vLLM's hit {hit} is unsafe: {reason}"))
    elif reason := drafter_unproven_reason(setting, state, hit):
        found.append((DRAFTER_PROVEN, f"vLLM's hit {hit} is drafter-unproven: {reason}"))
    if missing := null_blocks_read(setting, vllm):
        found.append((NULL_BLOCK, f"vLLM hands null blocks {missing}"))
    for gid, group in enumerate(setting.groups):
        if group.kind == Kind.MAMBA and len(vllm.real_blocks[gid]) != -(-hit // group.block_size):
            found.append((MAMBA_STATE, f"Mamba group {gid} gets {len(vllm.real_blocks[gid])} blocks for hit {hit}"))
    if not (hit <= max_length and hit % cache_hit_alignment(setting) == 0):
        found.append((CAP_ALIGNED, f"hit {hit}, cap {max_length}, alignment {cache_hit_alignment(setting)}"))
    if hit != reference.length:
        found.append((EQUALS_REFERENCE, f"vLLM {hit} != reference {reference.length}"))
    elif vllm.real_blocks != reference.real_blocks:
        found.append((BLOCKS_EQUAL, f"vLLM {vllm.real_blocks} != reference {reference.real_blocks}"))
    return found


# ----------------------------------------------------------------------------- grouping
def grouping_violations(problems: list[str]) -> list[tuple[str, str]]:
    """grouping_check.conformance_failures' lines, each under the invariant it breaks."""
    found = []
    names = {p.__name__: p.__name__.replace("_", " ") for p in PROPERTIES}
    for line in problems:
        head = line.split(":", 1)[0]
        if head in names:
            found.append((names[head], line.split(":", 1)[1].strip()))
        elif line.startswith(("vLLM raised", "vLLM grouped")):
            found.append((REFUSAL_EQUAL, line))
        elif line.startswith("warnings:"):
            found.append((WARNINGS_EQUAL, line))
        else:
            found.append((GROUPS_EQUAL, line))
    return found


def grouping_situation(model: Model) -> str:
    """The kinds of layers, whether EAGLE's block drop is in effect, the hybrid-manager flag."""
    kinds = "+".join(sorted({layer.kind.value for layer in model.layers.values()}))
    drafts = sum(layer.is_draft for layer in model.layers.values())
    flags = ["EAGLE" if block_drop_in_effect(model.spec_decode) else f"spec {model.spec_decode.method or 'off'}"]
    if drafts:
        flags.append("draft layers")
    if not model.hybrid_manager:
        flags.append("hybrid manager off")
    return f"grouping {kinds} {' '.join(flags)}"


# ----------------------------------------------------------------------------- stateful
def stateful_violation(message: str) -> tuple[str, str]:
    """The invariant a cache_machine assertion's message names."""
    rules = (
        (STATEFUL_DRAFTER, ("drafter-unproven",)),
        (STATEFUL_SAFE, ("unsafe hit", "computing [", "writes blocks shared")),
        (STATEFUL_CAP, ("exceeds M", "not a multiple", "the lookup's cap")),
        (STATEFUL_REFERENCE, ("differs from the reference's",)),
        (STATEFUL_BLOCKS, ("pool differs", "cache map differs", "free queue", "ref counts", "both free", "lost or invented")),
    )
    for invariant, signs in rules:
        if any(sign in message for sign in signs):
            return invariant, message
    return STATEFUL_OTHER, message


def stateful_situation(groups, eagle: str | None = None) -> str:
    """The group kinds and the EAGLE mode ("drop": the last-block drop; "lookahead" hashes)."""
    kinds = "+".join(sorted({g.kind.value for g in groups}))
    return f"stateful {'one group' if len(groups) == 1 else f'{len(groups)} groups'} {kinds}" + (f" EAGLE {eagle}" if eagle else "")
