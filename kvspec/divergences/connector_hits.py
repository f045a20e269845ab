"""Where the lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector) safely differs from the core's
(get_computed_blocks), filed by cause (see kvspec/divergences/known.py):

* ``paths-disagree``: an unflagged hit other than the core's reconciled one on the same cache
  (the scheduler adopts it as the local prefix);
* ``short-hit``: a flag on a hit every group could resume at: with no external tokens the
  scheduler falls back to the core's hit, shorter by the difference. Filed by what made a group
  lag: a one-token window, the EAGLE drop, or (without EAGLE) a full-attention group's unit by
  unit probe of the block its cap falls in stopping at a missing hash unit, though a later
  entry of the group proves the hit (``fine_probe_stopped_short``).
"""

from __future__ import annotations

from kvspec.divergences.known import Observed, core_loop_cause, one_token_window, paths_where, shape
from kvspec.spec.connector_hits import ConnectorAnswer, spurious_flag, takes_the_per_group_path
from kvspec.spec.layers import Kind
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP
from kvspec.spec.setting import CacheState, LookupSetting

FINE_PROBE_STOPPED = "a lagging group's unit probe stops at a missing unit"


def fine_probe_stopped_short(setting: LookupSetting, state: CacheState, answer: ConnectorAnswer) -> bool:
    """Every group whose own hit lags the flagged hit is full attention of blocks larger than
    the hash unit (so, with partial hash hits, FullAttentionManager.find_longest_cache_hit
    probes its first uncached block unit by unit from the cap down and stops at the units it
    finds) and lacks a hash unit between its own hit and the flagged one: the hole its probe
    stopped at. The flag being spurious, a later entry of the group proves the hit."""
    if setting.use_eagle or not setting.allow_partial_hash_hits or answer.per_group is None:
        return False
    unit = setting.hash_block_size
    lagging = [gid for gid, own in enumerate(answer.per_group) if own < answer.hit]
    return bool(lagging) and all(
        setting.groups[gid].kind == Kind.FULL
        and setting.groups[gid].block_size > unit
        and setting.groups[gid].block_size % unit == 0
        and any((gid, u) not in state.cached for u in range(answer.per_group[gid] // unit, answer.hit // unit))
        for gid in lagging
    )


def observe_connector_divergence(observed: Observed, adapter, case, limit: int, answer: ConnectorAnswer) -> None:
    """File the answer's divergence from the core's lookup on vLLM itself, if it has one."""
    setting, state, num_tokens, _cap, skip_reads = case
    if skip_reads or not takes_the_per_group_path(setting):
        return
    core = adapter.coordinator_hit(setting, state, limit).length
    size = (len(setting.groups), state.num_hashes, len(state.cached), num_tokens)
    example = f"{setting} {state} num_tokens={num_tokens} limit={limit}; connector {answer}, core {core}"
    # What kvspec/emit/connector_test.py replays it from: the cap is passed where the release takes one.
    replay = (case, _cap if adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP) else None, answer)
    if spurious_flag(setting, state, limit, answer):
        if one_token_window(setting):
            cause = "one-token window"
        elif fine_probe_stopped_short(setting, state, answer):
            cause = f"{shape(setting)} no EAGLE: {FINE_PROBE_STOPPED}"
        else:
            cause = f"{shape(setting)} {'EAGLE' if setting.use_eagle else 'no EAGLE'}"
        where = f"connector flags a safe hit {cause}"
        observed.add("short-hit", where, size, example, max(0, answer.hit - core), replay)
    elif not answer.hit_diverged and answer.hit != core:
        longer = "core" if core > answer.hit else "connector"
        cause = core_loop_cause(setting, longer == "connector")
        observed.add("paths-disagree", paths_where("core vs connector", setting, longer, cause), size, example,
                     abs(core - answer.hit), replay)
