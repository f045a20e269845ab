"""The judge of one OffloadingConnector lookup: every rule of spec/offloading.py and
reference/offloading.py its answer breaks, as data."""

from __future__ import annotations

from kvspec.oracles.invariants import BLOCKS_EQUAL, EQUALS_REFERENCE, NULL_BLOCK, OFFLOAD_STORED, SAFE_HIT, Violation
from kvspec.oracles.lookups import null_blocks_read
from kvspec.reference.offloading import Store
from kvspec.spec.offloading import OffloadSetting, chunk_setting, offload_unsafe_reason
from kvspec.spec.setting import CacheState, Hit


def offloading_violations(
    answer: Hit, reference: Hit, setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None
) -> list[Violation]:
    """vLLM's hit (in chunk units: ``real_blocks`` are the chunks it loads) breaks:

    * safety: every group can resume at the hit (spec/offloading.py, both tiers);
    * the store: it loads only chunks the store holds, and every chunk each group reads;
    * the reference: the same hit and the same chunks as reference/offloading.py.
    """
    hit, found = answer.length, []
    if reason := offload_unsafe_reason(setting, state, hit, num_tokens, cap):
        found.append(Violation(SAFE_HIT, f"vLLM's hit {hit} is unsafe: {reason}"))
    store = Store(setting, state)
    missing = [(g, c) for g, chunks in enumerate(answer.real_blocks) for c, real in enumerate(chunks)
               if real and not store.has(g, c)]
    if missing:
        found.append(Violation(OFFLOAD_STORED, f"vLLM loads chunks the store lacks {missing}"))
    if unread := null_blocks_read(chunk_setting(setting), answer):
        found.append(Violation(NULL_BLOCK, f"vLLM leaves out chunks a group reads {unread}"))
    if hit != reference.length:
        found.append(Violation(EQUALS_REFERENCE, f"hit: vLLM {hit} != reference {reference.length}"))
    elif answer.real_blocks != reference.real_blocks:
        found.append(Violation(BLOCKS_EQUAL, f"loaded chunks differ: vLLM {answer.real_blocks}, reference {reference.real_blocks}"))
    return found
