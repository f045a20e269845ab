"""HiSparse's grouping, a phase of the grouping check: with attention_config.hisparse_config set,
vLLM's grouping (kv_cache_planning:get_kv_cache_groups, its HiSparse branch) equals
reference/hisparse_grouping.py's, groups, roles, host residence, hot blocks per request, which
groups a KV connector transfers and refusals (with vLLM's message where the spec states it), on
fixed DeepSeek-V3.2-like shapes, the packing's boundaries and drawn HiSparse models
(kvspec/draws/hisparse_models.py). On a release without
spec/releases.py:HISPARSE_LAID_OUT_WHEN_GROUPED the phase is not run and the result says so.
tests/test_hisparse_grouping.py uses the same pieces."""

from __future__ import annotations

from collections import Counter

from kvspec.draws.hisparse_models import FIXED_HISPARSE_MODELS, hisparse_models
from kvspec.gate.names import Outcome
from kvspec.gate.result import run_property, scaled
from kvspec.impl.failures import classify
from kvspec.oracles.grouping import hisparse_grouping_violations
from kvspec.oracles.invariants import Violated, Violation
from kvspec.reference.hisparse_grouping import expected_hisparse_grouping
from kvspec.spec.grouping import Refusal
from kvspec.spec.hisparse_grouping import GroupRole, HiSparseSetting
from kvspec.spec.layers import LayerSpec
from kvspec.spec.releases import HISPARSE_LAID_OUT_WHEN_GROUPED, HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER

HISPARSE_EXAMPLES = 200
# Per situation, the least number of HiSparse models that must reach it (kvspec/gate/coverage.py);
# the fixed models alone reach each at least once, so a quick run meets them too.
HISPARSE_MINIMUMS = {
    "hisparse laid out": 50,
    "hisparse several hot groups": 20,
    "hisparse beside regular groups": 10,
    "hisparse refused": 20,
}
HISPARSE_OWN_CLASSES = frozenset({"HiSparseHotSpec", "HiSparseResidentSpec"})
NOT_IN_RELEASE = f"HiSparse grouping ({HISPARSE_LAID_OUT_WHEN_GROUPED.name})"


def vllm_hisparse_answer(adapter, layers: dict[str, LayerSpec], setting: HiSparseSetting) -> tuple | BaseException:
    """vLLM's groups with their roles, or the exception vLLM raised (a refusal, compared by
    class). An exception raised outside vLLM, a symbol or field kvspec cannot find, propagates:
    kvspec cannot drive this vLLM, which is never vLLM's refusal (impl/failures.py)."""
    try:
        return adapter.group_hisparse_layers(layers, setting)
    except Exception as exc:  # noqa: BLE001 - judged by hisparse_grouping_violations
        if classify(exc) is not Outcome.VLLM_CRASHED:
            raise
        return exc


def hisparse_violations(adapter, layers: dict[str, LayerSpec], setting: HiSparseSetting) -> list[Violation]:
    """How vLLM's HiSparse grouping of ``layers`` departs from the reference's."""
    expected = expected_hisparse_grouping(layers, setting, adapter.rules)
    return hisparse_grouping_violations(vllm_hisparse_answer(adapter, layers, setting), expected)


def situations(expected) -> list[str]:
    """The coverage situations one expected HiSparse grouping reaches (HISPARSE_MINIMUMS)."""
    if isinstance(expected, Refusal):
        return ["hisparse refused"]
    reached = ["hisparse laid out"]
    if sum(g.blocks_per_request is not None for g in expected) > 1:
        reached.append("hisparse several hot groups")
    if any(g.role == GroupRole.DEFAULT and g.group.spec_class not in HISPARSE_OWN_CLASSES for g in expected):
        reached.append("hisparse beside regular groups")
    return reached


def hisparse_phase(adapter, seed: int, scale: float, coverage: Counter) -> list[str]:
    """The phase's failure lines, or [] when every HiSparse model groups as the reference says;
    counts its situations into ``coverage``."""
    widest = HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER in adapter.rules

    def conforms(case) -> None:
        layers, setting = case
        coverage.update(situations(expected_hisparse_grouping(layers, setting, adapter.rules)))
        if problems := hisparse_violations(adapter, layers, setting):
            raise Violated(problems, f"HiSparse {setting}: {layers!r}")

    return run_property(conforms, hisparse_models(widest), seed=seed, examples=scaled(HISPARSE_EXAMPLES, scale),
                        fixed=FIXED_HISPARSE_MODELS)
