"""An operational model of the SimpleCPUOffload connector's lookup
(vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler.get_num_new_matched_tokens);
spec/simple_offload.py says which answers are safe. Rules, read from vLLM:

* no match when the local prefix is not on a scheduler block (transfers copy whole blocks), or
  not on a chunked-local group's chunk (where the release has
  spec/releases.py:SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK), or when no hash unit or token
  is left to look up;
* otherwise the core's lookup (reference/lookup.py) over the hashes past the local prefix, as
  if they began the request (the CPU coordinator indexes them from 0), capped at
  ``num_tokens - 1 - num_computed``, with partial hash hits off in lazy mode.
"""

from __future__ import annotations

from dataclasses import replace

from kvspec.reference.lookup import coordinator_lookup
from kvspec.spec.layers import Kind
from kvspec.spec.releases import NEWEST_RULES, SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.setting import CacheState
from kvspec.spec.simple_offload import SimpleOffloadCase


def simple_offload_matched(case: SimpleOffloadCase, rules=NEWEST_RULES) -> int:
    setting = replace(case.setting, allow_partial_hash_hits=not case.lazy)
    done = case.num_computed
    if done % scheduler_block_size(setting):
        return 0
    refuses_split = SIMPLE_OFFLOAD_REFUSES_A_SPLIT_LOCAL_CHUNK in rules
    if refuses_split and any(g.kind == Kind.CHUNKED_LOCAL and done % g.chunk for g in setting.groups):
        return 0
    skipped = done // setting.hash_block_size
    remaining = case.cpu.num_hashes - skipped
    limit = case.num_tokens - 1 - done
    if remaining <= 0 or limit <= 0:
        return 0
    suffix = CacheState(remaining, frozenset((g, j - skipped) for g, j in case.cpu.cached if j >= skipped))
    return coordinator_lookup(setting, suffix, limit, rules).length
