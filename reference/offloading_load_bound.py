"""An operational model of the OffloadingConnector's load bound
(offloading_connector.py:OffloadingConnector._bounding_group_ids and _max_loadable_tokens);
spec/offloading_load_bound.py says which bounds are safe and which is best.

The groups the connector does not offload bound the load: each is looked up on its own at
``num_tokens - 1`` (HybridKVCacheCoordinator.find_longest_cache_hit_per_group, modelled by
reference/connector_hits.py:per_group_hits), and the load may reach the least of their hits, less
the local hit, never below 0. With every group offloaded the load is unbounded (None).
"""

from __future__ import annotations

from kvspec.reference.connector_hits import per_group_hits
from kvspec.spec.offloading_load_bound import groups_the_connector_does_not_offload
from kvspec.spec.releases import NEWEST_RULES
from kvspec.spec.setting import CacheState, LookupSetting


def load_bound(local: LookupSetting, state: CacheState, offloaded: frozenset[int], num_computed: int,
               num_tokens: int, rules=NEWEST_RULES) -> tuple[tuple[int, ...], int | None]:
    """(the groups that bound the load, the bound past ``num_computed``)."""
    bounding = groups_the_connector_does_not_offload(local, offloaded)
    if not bounding:
        return bounding, None
    hits, _ = per_group_hits(local, state, num_tokens - 1, rules)
    return bounding, max(0, min(hits[gid] for gid in bounding) - num_computed)
