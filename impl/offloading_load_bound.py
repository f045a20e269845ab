"""The OffloadingConnector's load bound on real vLLM: which groups it does not offload and how far
past the local hit a load may reach (offloading_connector.py:OffloadingConnector._bounding_group_ids,
_max_loadable_tokens), over a real KVCacheManager whose pool holds the drawn local entries.

Only HiSparse leaves groups out of the connector (offloading/config.py:get_offloading_group_ids
offloads the HISPARSE_INDEXER groups when ``hisparse_host_num_blocks`` is set, every
prefix-cacheable one otherwise), so the config is marked as HiSparse's: its offloaded groups take
the indexer role and the others keep the default one. Roles are read by the connector only; the
manager is built before they are set, with the plain managers of the groups' kinds (HiSparse's
source is a FullAttentionManager that keeps its longer hit, single_type_kv_cache_manager.py:2228-2237,
and looks up as full attention does).

The connector is the real class, never constructed (its __init__ builds a worker-side store):
``_kv_cache_config`` and the bound manager are what KVConnectorBase_V1.__init__ and
bind_kv_cache_manager set (base.py:249, 508), and the rest of the connector is not read.
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.connector_hits import _manager_holding
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.setting import CacheState, LookupSetting


def bounding_connector(adapter, setting: LookupSetting, local: CacheState, num_tokens: int,
                       offloaded: frozenset[int], *, hisparse: bool = True, spare_blocks: int = 2):
    """(a real OffloadingConnector over these groups, the ``num_tokens`` request, its local hit):
    its manager's pool holds ``local``; with ``hisparse`` the groups ``offloaded`` are HiSparse's
    indexer groups, without it no group has a role and HiSparse is off. The pool has
    ``spare_blocks`` free blocks besides those holding ``local``."""
    manager, request = _manager_holding(adapter, setting, local, num_tokens, skip_reads=False,
                                        spare_blocks=spare_blocks)
    config = manager.kv_cache_config
    if hisparse:
        role = resolve(S.KV_CACHE_GROUP_ROLE)
        config.hisparse_host_num_blocks = 1  # HiSparse on: the connector offloads its indexer groups only
        for gid, group in enumerate(config.kv_cache_groups):
            group.role = role.HISPARSE_INDEXER if gid in offloaded else role.DEFAULT
    cls = resolve(S.OFFLOADING_CONNECTOR)
    connector = cls.__new__(cls)
    connector._kv_cache_config = config
    connector._kv_cache_manager = manager
    return connector, request, manager.get_computed_blocks(request)[1]


def load_bound(adapter, setting: LookupSetting, local: CacheState, num_tokens: int,
               offloaded: frozenset[int], *, hisparse: bool = True) -> tuple[tuple[int, ...], int | None, int]:
    """(the groups vLLM's connector does not offload and bounds the load by, the bound it passes
    as ``max_num_new_tokens``, the local hit the scheduler passes with it) for a ``num_tokens``
    request whose groups ``offloaded`` go through the connector, the pool holding ``local``.

    The local hit is the one the scheduler computes first (scheduler.py:_get_local_prefix_cache_hit:
    get_computed_blocks, as the OffloadingConnector does not support divergent local hits), less
    its tail past the scheduler's block size (scheduler.py:1173-1176, ``block_aligned_local``);
    the bound is asked at it, as get_num_new_matched_tokens asks it (offloading_connector.py:178)."""
    connector, request, num_local = bounding_connector(adapter, setting, local, num_tokens, offloaded,
                                                       hisparse=hisparse)
    scheduler_block_size, _ = adapter.block_sizes(list(setting.groups), setting.hash_block_size)
    num_computed = num_local - num_local % scheduler_block_size
    return tuple(connector._bounding_group_ids), connector._max_loadable_tokens(request, num_computed), num_computed
