"""Which hits the SimpleCPUOffload connector may report: the external tokens it offers past a
local prefix (vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler.get_num_new_matched_tokens),
read in spec/hits.py's vocabulary.

The connector looks up the request's hashes past the local prefix in its CPU pool, with a
coordinator of its own over the same groups (partial hash hits off in lazy mode). Its answer
extends the local prefix, so it is safe when the whole ``num_computed + matched`` is: every
group resumes there from the local prefix (taken as held by every group, as the scheduler
adopted it) and the CPU pool's entries past it (spec/hits.py:unsafe_reason), within the
request less its last token.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.hits import unsafe_reason
from kvspec.spec.setting import CacheState, LookupSetting


@dataclass(frozen=True)
class SimpleOffloadCase:
    """One lookup: the groups (``allow_partial_hash_hits`` is the connector's: not lazy), the CPU
    pool's entries, the request's tokens and the local prefix it already holds."""

    setting: LookupSetting
    cpu: CacheState
    num_tokens: int
    num_computed: int
    lazy: bool = False


def with_local_prefix(case: SimpleOffloadCase) -> CacheState:
    """The CPU pool's entries plus the local prefix's units in every group."""
    units = case.num_computed // case.setting.hash_block_size
    local = {(gid, j) for gid in range(len(case.setting.groups)) for j in range(units)}
    return CacheState(case.cpu.num_hashes, case.cpu.cached | local)


def matched_tokens_unsafe_reason(case: SimpleOffloadCase, matched: int) -> str | None:
    """Why ``matched`` external tokens past the local prefix are not a safe answer (None if they are)."""
    if matched < 0:
        return f"negative match {matched}"
    if matched == 0:
        return None
    total = case.num_computed + matched
    return unsafe_reason(case.setting, with_local_prefix(case), total, case.num_tokens - 1)
