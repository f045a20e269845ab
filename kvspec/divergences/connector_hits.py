"""Where the lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector) safely differs from the core's
(get_computed_blocks), filed by cause (see kvspec/divergences/known.py):

* ``paths-disagree``: an unflagged hit other than the core's reconciled one on the same cache
  (the scheduler adopts it as the local prefix);
* ``short-hit``: a flag on a hit every group could resume at: with no external tokens the
  scheduler falls back to the core's hit, shorter by the difference.
"""

from __future__ import annotations

from kvspec.divergences.known import Observed, one_token_window, paths_where, shape
from kvspec.spec.connector_hits import ConnectorAnswer, spurious_flag, takes_the_per_group_path
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP


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
        cause = "one-token window" if one_token_window(setting) else (
            f"{shape(setting)} {'EAGLE' if setting.use_eagle else 'no EAGLE'}")
        where = f"connector flags a safe hit {cause}"
        observed.add("short-hit", where, size, example, max(0, answer.hit - core), replay)
    elif not answer.hit_diverged and answer.hit != core:
        longer = "core" if core > answer.hit else "connector"
        observed.add("paths-disagree", paths_where("core vs connector", setting, longer), size, example,
                     abs(core - answer.hit), replay)
