"""HiSparse on the stateful path (spec/kind_writes.py:admitted_without_a_connector): a real
KVCacheManager over HiSparse's layout cannot admit a request without the coordinator its
connector binds, so the stateful check, which schedules a KVCacheManager with no KV connector,
never draws it."""

from __future__ import annotations

import traceback

import pytest

from kvspec.draws.lookups import HISPARSE_LAYOUT
from kvspec.impl.live import LiveManager
from kvspec.spec.kind_writes import admitted_without_a_connector
from kvspec.spec.layers import CacheGroup
from kvspec.stateful.config import STATEFUL_KINDS


def test_no_kind_the_stateful_check_draws_needs_a_connector():
    assert all(admitted_without_a_connector((CacheGroup(kind, 16),)) for kind in STATEFUL_KINDS)
    assert not admitted_without_a_connector(HISPARSE_LAYOUT.groups)
    assert not admitted_without_a_connector((HISPARSE_LAYOUT.groups[0],))  # the host source alone


def test_a_manager_over_hisparse_s_layout_refuses_its_first_admission(vllm_adapter):
    live = LiveManager.for_groups(vllm_adapter, list(HISPARSE_LAYOUT.groups), num_blocks=64, hash_block_size=16)
    managers = [type(m).__name__ for m in live.manager.coordinator.single_type_managers]
    assert managers == ["HiSparseSourceManager", "FullAttentionManager", "HiSparseResidentManager",
                        "HiSparseHotManager"]
    live.add_request("r", list(range(40)))
    with pytest.raises(AssertionError) as refused:
        live.schedule("r", 64)
    last = traceback.extract_tb(refused.value.__traceback__)[-1]
    assert last.filename.endswith("v1/core/single_type_kv_cache_manager.py")
    assert last.line == "assert self.coordinator is not None"
