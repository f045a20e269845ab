"""Real vLLM's KV-cache grouping against the reference (reference/grouping.py), judged by
kvspec/oracles/grouping.py on the real model shapes and the drawn ones (kvspec/draws/), and the
gate's check that runs them. The tests (tests/test_grouping_conformance.py) use the same pieces."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kvspec.draws.models import (
    DRAWN_KINDS,
    NEW_GROUPED_KINDS,
    kind_pair_models,
    models,
    worker_splits,
)
from kvspec.draws.real_models import REAL_MODELS
from kvspec.gate.hisparse_grouping import HISPARSE_MINIMUMS, NOT_IN_RELEASE, hisparse_phase
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.release_findings import ReleaseFinding, load, recorded_departure
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.oracles.grouping import grouping_violations
from kvspec.oracles.invariants import Violated, Violation
from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Grouping, Refusal
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import LayerSpec
from kvspec.spec.releases import HISPARSE_LAID_OUT_WHEN_GROUPED

# ----------------------------------------------------------------------------- comparison


def vllm_grouping(adapter, model: Model, workers: list[dict[str, LayerSpec]] | None = None) -> Grouping:
    """vLLM's grouping of ``model``, or of ``workers``' reports of its layers."""
    out = adapter.group_workers_layers(
        [model.layers] if workers is None else workers, model.spec_decode, hybrid_manager=model.hybrid_manager
    )
    return Grouping(out.groups, out.warnings)


def conformance_failures(adapter, model: Model, workers: list[dict[str, LayerSpec]] | None = None) -> list[Violation]:
    """How vLLM's grouping of ``model`` (as ``workers`` report its layers, if given) departs
    from the reference or breaks a property (kvspec/oracles/grouping.py)."""
    merged = model.layers if workers is None else merged_worker_layers(workers)
    if isinstance(merged, Refusal):
        expected = merged
    else:
        model = Model(merged, model.spec_decode, model.hybrid_manager, adapter.rules)  # judged by its release's rules
        expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager,
                                     rules=adapter.rules)
    try:
        actual = vllm_grouping(adapter, model, workers)
    except Exception as exc:  # noqa: BLE001 - any refusal is compared by class
        actual = exc
    return grouping_violations(model, actual, expected)


def assert_conforms(adapter, model: Model, context: str = "", recorded: RecordedFindings | None = None) -> None:
    problems = conformance_failures(adapter, model)
    if recorded is not None:
        problems = recorded.set_aside(model, problems)
    if problems:
        raise Violated(problems, context) from None


class RecordedFindings:
    """The grouping findings recorded for the adapter's release (release-findings.toml) that the
    check met: a shape whose only departure is one of them is counted and set aside, so that the
    check goes on to find any other departure on that release, and still fails by the finding."""

    def __init__(self, adapter):
        self.version, self.findings = adapter.version, load()
        self.met: Counter = Counter()
        self.smallest: dict[str, tuple[ReleaseFinding, object]] = {}  # the shortest shape met, for the report

    def set_aside(self, shape, problems: list[Violation]) -> list[Violation]:
        """``problems``, or [] when they are a recorded finding (then counted)."""
        finding = recorded_departure(self.version, Check.GROUPING, problems, self.findings)
        if finding is None:
            return problems
        self.met[finding.id] += 1
        if finding.id not in self.smallest or len(repr(shape)) < len(repr(self.smallest[finding.id][1])):
            self.smallest[finding.id] = (finding, shape)
        return []

    def lines(self) -> list[str]:
        return [f"{finding.id}, recorded for vLLM {self.version} and fixed in {finding.fixed_in} "
                f"({finding.report}): {self.met[name]} shapes departed by it alone, set aside; the smallest: {shape!r}"
                for name, (finding, shape) in self.smallest.items()]


# ----------------------------------------------------------------------------- model shapes


GROUPING_EXAMPLES = 2000

# ----------------------------------------------------------------------------- coverage


def kind_situations(model: Model, accepted: bool) -> list[str]:
    """The coverage situations a model reaches: each kind it has ("kind rswa"), and, when the
    reference accepts it, each pair of kinds it holds together ("pair full+rswa")."""
    kinds = sorted({layer.kind for layer in model.layers.values()}, key=DRAWN_KINDS.index)
    situations = [f"kind {k}" for k in kinds]
    if accepted:
        situations += [f"pair {a}+{b}" for i, a in enumerate(kinds) for b in kinds[i + 1:]]
    return situations


# Each drawn kind in at least this many shapes, and each pair with a new kind in at least this
# many accepted ones; the kind-pair shapes alone reach every pair four times (an accepted one), so
# the draws must reach it once more. Drawn alone (full budget), a pair fell to 2 at some seeds of
# 0-19 (mla+sink_full at seed 6): the minimum is met by the fixed shapes plus at least one draw.
KIND_MINIMUM = 100
PAIR_MINIMUM = 5
GROUPING_MINIMUMS = {
    **{f"kind {k}": KIND_MINIMUM for k in DRAWN_KINDS},
    **{f"pair {a}+{b}": PAIR_MINIMUM
       for i, a in enumerate(DRAWN_KINDS) for b in DRAWN_KINDS[i + 1:] if b in NEW_GROUPED_KINDS},
}

# ----------------------------------------------------------------------------- several workers


def merged_worker_layers(workers: list[dict[str, LayerSpec]]) -> dict[str, LayerSpec] | Refusal:
    """The model's layers from every worker's: pipeline stages report different layers, tensor-
    parallel ranks the same ones, which must then agree (vLLM compares its specs, in which
    ``is_draft`` takes no part); first report wins the order
    (vllm.v1.core.kv_cache_planning:get_global_kv_cache_groups)."""
    merged: dict[str, LayerSpec] = {}
    for worker in workers:
        for name, layer in worker.items():
            if name in merged and replace(merged[name], is_draft=False) != replace(layer, is_draft=False):
                return Refusal(AssertionError, f"workers disagree on {name}: {merged[name]} vs {layer}")
            merged.setdefault(name, layer)
    return merged


def workers_conform(adapter, case: tuple[Model, list[dict[str, LayerSpec]]],
                    recorded: RecordedFindings | None = None) -> None:
    """vLLM groups several workers' reports as the reference groups the merged layers, and
    refuses (AssertionError) workers that disagree on a layer."""
    model, workers = case
    problems = conformance_failures(adapter, model, workers)
    if recorded is not None:
        problems = recorded.set_aside(case, problems)
    if problems:
        raise Violated(problems, "two workers")


WORKER_EXAMPLES = 150


def check_grouping(adapter, options: GateOptions) -> CheckResult:
    """vLLM's grouping equals the reference's, and satisfies every spec property, on the real
    model shapes and on ``GROUPING_EXAMPLES`` drawn ones (plus the minimal failing shape)."""
    seed, scale = options.seed, options.scale
    reached: Counter = Counter()
    kinds_reached: Counter = Counter()  # per kind and accepted pair (GROUPING_MINIMUMS)
    recorded = RecordedFindings(adapter)

    def conforms(model: Model) -> None:
        reached["shapes"] += 1
        expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager,
                                     rules=adapter.rules)
        kinds_reached.update(kind_situations(model, accepted=not isinstance(expected, Refusal)))
        if isinstance(expected, Refusal):
            reached[f"refused ({expected.error.__name__})"] += 1
        else:
            reached["one group" if len(expected.groups) == 1 else "several groups"] += 1
            reached["warned"] += any("draft model's" in w for w in expected.warnings)
            reached["annotated"] += any(g.is_eagle_group for g in expected.groups)
        assert_conforms(adapter, model, recorded=recorded)

    # Drawn shapes first, so that a failure shrinks to a minimal shape; then every kind and pair; then the real ones.
    failure = run_property(conforms, models(), seed=seed, examples=scaled(GROUPING_EXAMPLES, scale))
    for model in kind_pair_models() if not failure else []:
        expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=True, rules=adapter.rules)
        kinds_reached.update(kind_situations(model, accepted=not isinstance(expected, Refusal)))
        if problems := recorded.set_aside(model, conformance_failures(adapter, model)):
            failure = ["a kind-pair shape departs from the reference:", repr(model.layers), *(v.detail for v in problems)]
            break
    for name, model in REAL_MODELS.items():
        if not failure and (problems := recorded.set_aside(model, conformance_failures(adapter, model))):
            failure = [f"the {name} shape departs from the reference:", *(v.detail for v in problems)]

    def workers(case) -> None:
        reached["two workers"] += 1
        workers_conform(adapter, case, recorded)

    if not failure:  # last, on its own draws: the phases above draw what they always drew
        failure = run_property(workers, worker_splits(), seed=seed, examples=scaled(WORKER_EXAMPLES, scale))
    hisparse = HISPARSE_LAID_OUT_WHEN_GROUPED in adapter.rules
    if not failure and hisparse:  # then HiSparse's grouping, on its own draws
        failure = hisparse_phase(adapter, seed, scale, kinds_reached)
        reached["HiSparse models"] = sum(kinds_reached[s] for s in ("hisparse laid out", "hisparse refused"))
    reached.update({f"set aside ({name})": n for name, n in recorded.met.items()})
    covered = ", ".join(f"{n} {what}" for what, n in reached.most_common())
    failure = failure + recorded.lines() if failure else recorded.lines()
    return CheckResult(
        Check.GROUPING,
        covered,
        holds=not failure,
        details=failure or [f"{len(REAL_MODELS)} real model shapes and {reached['shapes']} drawn ones as the reference predicts"],
        coverage=dict(sorted(kinds_reached.items())),
        minimums=GROUPING_MINIMUMS | (HISPARSE_MINIMUMS if hisparse else {}),
        not_in_release=[] if hisparse else [NOT_IN_RELEASE],
    )
