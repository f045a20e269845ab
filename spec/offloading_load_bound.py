"""How far past the local hit the OffloadingConnector may load when it does not offload every
KV-cache group (offloading_connector.py:OffloadingConnector._max_loadable_tokens, the
``max_num_new_tokens`` it passes to OffloadingConnectorScheduler.get_num_new_matched_tokens).

A group the connector does not offload is never loaded: past the local hit, the only KV it has is
what its own prefix cache holds (HiSparse's host-resident source group keeps its longer hit,
single_type_kv_cache_manager.py:2228-2237, kv_cache_coordinator.py:925). So a load that reaches
``end`` tokens asks every such group to resume at ``end`` from its own cached KV, and the rules are:

* **safety**: every group the connector does not offload can resume, from its local cache, at the
  end of the load (spec/hits.py:group_unsafe_reason, the core's drafter policy), and the bound
  vLLM passes lets no load reach a length where one cannot;
* **the best bound** is the longest reach under which every such group can resume at every
  length, to a hit the core's lookup could give them: on its alignment and within
  ``num_tokens - 1`` (the core never reuses the KV of the prompt's last token, which is
  recomputed for its logits: Request.get_max_cache_hit_length), since a group keeps only the
  blocks of its own lookup's hit (kv_cache_coordinator.py:925, retains_longer_hit). A lower bound
  is safe and costs reuse: a divergence, not a violation.

Which groups those are (``groups_the_connector_does_not_offload``), read from vLLM: the
prefix-cacheable groups outside get_offloading_group_ids (offloading_connector.py:
_bounding_group_ids). That offloads HiSparse's indexer groups when HiSparse is on
(``hisparse_host_num_blocks`` set), and otherwise every group (0.30.0, offloading/config.py:38)
or every prefix-cacheable transferable one (0.31.0-0.34.0, KVCacheConfig.prefix_cacheable_group_ids).
The two releases' answers differ only for a prefix-cacheable group that is not transferable, and
the only non-transferable groups vLLM builds are HiSparse's resident and hot groups
(hisparse/layout.py:176-199), which are not prefix-cacheable and exist only under HiSparse. So
no group is left out without HiSparse on any release, and _bounding_group_ids and
_max_loadable_tokens are the same text on 0.30.0-0.34.0: no release rule.

Past the local hit the core keeps only a retaining group's blocks (kv_cache_manager.py:516-525,
``retained_hit_group_ids``): a group left out that does not retain its longer hit (a "regular"
group of a HiSparse layout, hisparse/layout.py:76-82) holds nothing there, whatever its own cache
holds, yet _max_loadable_tokens counts its per-group hit all the same, and a load up to it finds
that group on fresh blocks nothing writes (tests/test_offloading_load_bound.py, a latent case: no
model today gives HiSparse such a group, its regular groups being non-MLA layers). The gate's
groups left out all stand for the source.

Each property takes the setting of every group (``local``), the local cache, the groups the
connector does not offload, and returns the ways an answer breaks it, empty when it holds.
"""

from __future__ import annotations

from kvspec.spec.hits import group_drafter_unproven_reason, group_target_unsafe_reason
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS
from kvspec.spec.resolution import cache_hit_alignment
from kvspec.spec.setting import CacheState, LookupSetting


def groups_the_connector_does_not_offload(local: LookupSetting, offloaded: frozenset[int]) -> tuple[int, ...]:
    """The prefix-cacheable groups outside ``offloaded``: the ones whose cache bounds a load (a
    group outside prefix caching reuses nothing, so it bounds nothing)."""
    return tuple(gid for gid, group in enumerate(local.groups)
                 if group.kind not in NOT_PREFIX_CACHEABLE_KINDS and gid not in offloaded)


def load_end_unsafe_reason(local: LookupSetting, state: CacheState, bounding: tuple[int, ...], end: int,
                           drafter: bool = True) -> str | None:
    """Why a load ending at ``end`` asks a group the connector does not offload for KV its own
    cache lacks (None if every such group can resume there): its target KV, and with
    ``drafter`` the proof of the token at ``end`` a drafter group needs (spec/hits.py's two tiers,
    the core's drafter policy)."""
    for gid in bounding:
        reason = group_target_unsafe_reason(local, state, gid, end)
        if reason or (drafter and (reason := group_drafter_unproven_reason(local, state, gid, end))):
            return reason
    return None


def best_load_bound(local: LookupSetting, state: CacheState, bounding: tuple[int, ...],
                    num_computed: int, num_tokens: int) -> int | None:
    """The longest reach past ``num_computed`` under which every load the connector may pick is
    safe: to a hit the core could give those groups (on its alignment, spec/resolution.py:
    cache_hit_alignment, within ``num_tokens - 1``) such that each group the connector does not
    offload can resume at every end up to it. None (unbounded) when it offloads every group."""
    if not bounding:
        return None
    alignment = cache_hit_alignment(local)
    best = 0
    for end in range(num_computed + 1, num_tokens):
        if load_end_unsafe_reason(local, state, bounding, end):
            break
        if end % alignment == 0:
            best = end - num_computed
    return best


def a_load_bound_keeps_loads_within_the_unoffloaded_groups(local: LookupSetting, state: CacheState,
                                                            bounding: tuple[int, ...], num_computed: int,
                                                            num_tokens: int, bound: int | None,
                                                            drafter: bool = True) -> list[str]:
    if not bounding:
        return [] if bound is None else [f"bound {bound} although the connector offloads every group"]
    if bound is None:
        return [f"no bound although groups {bounding} are not offloaded"]
    for end in range(num_computed + 1, num_computed + bound + 1):
        reason = "past the prompt's last token, which is recomputed" if end >= num_tokens \
            else load_end_unsafe_reason(local, state, bounding, end, drafter)
        if reason:
            return [f"bound {bound} past {num_computed} lets a load end at {end}: {reason}"]
    return []


def a_load_never_reaches_past_the_unoffloaded_groups(local: LookupSetting, state: CacheState,
                                                     bounding: tuple[int, ...], num_computed: int,
                                                     loaded: int, drafter: bool = True) -> list[str]:
    if loaded <= 0:
        return []
    end = num_computed + loaded
    reason = load_end_unsafe_reason(local, state, bounding, end, drafter)
    return [f"a load of {loaded} tokens past {num_computed} ends at {end}: {reason}"] if reason else []


def load_bound_shortfall(local: LookupSetting, state: CacheState, bounding: tuple[int, ...],
                         num_computed: int, num_tokens: int, bound: int | None) -> int:
    """Tokens a safe bound leaves out below the best one (a divergence: reuse lost, never correctness)."""
    best = best_load_bound(local, state, bounding, num_computed, num_tokens)
    return 0 if best is None or bound is None else max(0, best - bound)
