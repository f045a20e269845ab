"""A deliberately broken OffloadingConnector, to prove that the offloading check bites.

``flag_all_groups_when_unannotated`` puts back the behaviour vLLM #52735 removed: with EAGLE on
and no KV-cache group annotated as the drafter's, the connector treats every group as a drafter
group, so each pops its trailing chunk (and a group whose usable window is one chunk can zero
the whole hit). It patches, in memory, the one vLLM function that decides
(offloading/scheduler.py:SchedulerOffloadConfig.from_spec) and returns the undo.

``bound_by_the_first_group_left_out`` bounds a load by the first group the connector does not
offload, the others ignored (offloading_connector.py:OffloadingConnector._max_loadable_tokens,
edited). impl/broken.py registers both as BrokenVariants; the fields below describe them.
"""

from __future__ import annotations

from kvspec.gate.names import Check
from kvspec.impl.patching import Undo, edit, install
from kvspec.impl.vllm_symbols import OFFLOAD_CONFIG_FROM_SPEC, OFFLOADING_MAX_LOADABLE, raw

NAME = "offloading-flags-all-groups"
UPSTREAM = "vLLM #52735"
WRONG_BEHAVIOUR = "with EAGLE on and no group annotated, the offloading connector pops a chunk from every group"
INVARIANT = "with no group annotated, no group pops a chunk on the offloading path (spec/drafter.py:drafter_groups, the OFFLOADING policy)"
CAUGHT_BY = (Check.OFFLOADING,)


def flag_all_groups_when_unannotated(adapter) -> Undo:
    """SchedulerOffloadConfig.from_spec flags every group as a drafter group when EAGLE's drop
    is in effect and vLLM's grouping annotated none (the core coordinator's fallback)."""
    original = raw(OFFLOAD_CONFIG_FROM_SPEC)

    def from_spec(cls, spec, vllm_config, kv_cache_config):
        config = original.__func__(cls, spec, vllm_config, kv_cache_config)
        speculative = vllm_config.speculative_config
        eagle = speculative is not None and speculative.use_eagle_block_drop()
        if eagle and not any(group.is_eagle_group for group in config.kv_group_configs):
            flagged = tuple(group._replace(is_eagle_group=True) for group in config.kv_group_configs)
            config = config._replace(kv_group_configs=flagged)
        return config

    return install(OFFLOAD_CONFIG_FROM_SPEC, classmethod(from_spec))



BOUND_NAME = "offloading-bound-ignores-a-group-left-out"
BOUND_UPSTREAM = "none reported: a plausible bug, the load bound taken from the first group the connector leaves out"
BOUND_WRONG_BEHAVIOUR = "the OffloadingConnector bounds a load by the first group it does not offload, ignoring the others"
BOUND_INVARIANT = ("a load never reaches past what a group the connector does not offload can resume at "
                   "(spec/offloading_load_bound.py)")


def bound_by_the_first_group_left_out(adapter) -> Undo:
    """OffloadingConnector._max_loadable_tokens as vLLM wrote it, over the first of its
    _bounding_group_ids only."""
    return edit(OFFLOADING_MAX_LOADABLE, [(
        "for group_id in self._bounding_group_ids)",
        "for group_id in self._bounding_group_ids[:1])",
    )])
