"""The workers' KV-cache groups on a release that plans them only on its way to sizing memory
(no spec/releases.py:GROUPS_PLANNED_BEFORE_SIZING).

There, ``kv_cache_utils:get_kv_cache_configs`` merges the workers' specs, checks the spec
registry, tags the sliding-window specs and calls ``get_kv_cache_groups``, which groups,
annotates the drafter's group and warns; then it sizes memory for a real model. kvspec lets vLLM
do every step up to that call and takes the groups there, so that nothing of vLLM's is
rewritten: the call is wrapped for the duration, and whatever ``get_kv_cache_groups`` is then
(a zoo bug, a mutant) is what groups.
"""

from __future__ import annotations

from kvspec.impl import patching
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_symbols import SymbolMissing, resolve


class _Planned(Exception):  # noqa: N818 - not an error: how the wrapped call hands back its groups
    def __init__(self, groups):
        super().__init__("the groups are planned")
        self.groups = groups


def groups_before_sizing(config, worker_specs: list[dict]) -> list:
    """vLLM's global groups for ``worker_specs``, as ``get_kv_cache_configs`` plans them before
    it sizes memory. vLLM's own exceptions (a refusal) propagate unchanged."""
    grouping = resolve(S.GET_KV_CACHE_GROUPS)
    inside: list[bool] = []

    def planned(vllm_config, kv_cache_spec):
        # HiSparse groups its non-MLA layers by calling get_kv_cache_groups again (through the
        # module, so through this wrapper): only the outermost call hands back the groups.
        if inside:
            return grouping(vllm_config, kv_cache_spec)
        inside.append(True)
        raise _Planned(grouping(vllm_config, kv_cache_spec))

    undo = patching.replace(S.GET_KV_CACHE_GROUPS, planned)
    try:
        resolve(S.GET_KV_CACHE_CONFIGS)(config, worker_specs, [0] * len(worker_specs))
    except _Planned as done:
        return done.groups
    finally:
        undo()
    raise SymbolMissing(S.GET_KV_CACHE_CONFIGS, f"it returned without calling {S.GET_KV_CACHE_GROUPS.qualname}, "
                        "where kvspec takes the groups it plans")
