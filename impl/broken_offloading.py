"""A deliberately broken OffloadingConnector, to prove that the offloading check bites.

``flag_all_groups_when_unannotated`` puts back the behaviour vLLM #52735 removed: with EAGLE on
and no KV-cache group annotated as the drafter's, the connector treats every group as a drafter
group, so each pops its trailing chunk (and a group whose usable window is one chunk can zero
the whole hit). It patches, in memory, the one vLLM function that decides
(offloading/scheduler.py:SchedulerOffloadConfig.from_spec) and returns the undo. impl/broken.py
registers it as a BrokenVariant; the fields below describe it.
"""

from __future__ import annotations

from kvspec.gate.names import Check
from kvspec.impl.patching import Undo, install
from kvspec.impl.vllm_symbols import OFFLOAD_CONFIG_FROM_SPEC, raw

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

