"""Real vLLM's KV-cache grouping against the reference (reference/grouping.py): the
comparison, the model shapes Hypothesis draws, the shapes of real models, and the gate's check
that runs them. The tests (tests/test_grouping_conformance.py) use the same pieces."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import strategies as st

from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Grouping, Refusal
from kvspec.spec.grouping_properties import Model, property_violations
from kvspec.spec.layers import SPEC_METHODS, Kind, LayerSpec, SpecDecode, page_size_bytes

# ----------------------------------------------------------------------------- comparison


def vllm_grouping(adapter, model: Model, workers: list[dict[str, LayerSpec]] | None = None) -> Grouping:
    """vLLM's grouping of ``model``, or of ``workers``' reports of its layers."""
    out = adapter.group_workers_layers(
        [model.layers] if workers is None else workers, model.spec_decode, hybrid_manager=model.hybrid_manager
    )
    return Grouping(out.groups, out.warnings)


def conformance_failures(adapter, model: Model, workers: list[dict[str, LayerSpec]] | None = None) -> list[str]:
    """How vLLM's grouping of ``model`` (as ``workers`` report its layers, if given) departs
    from the reference or breaks a property."""
    merged = model.layers if workers is None else merged_worker_layers(workers)
    if isinstance(merged, Refusal):
        expected = merged
    else:
        model = Model(merged, model.spec_decode, model.hybrid_manager)
        expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager)
    try:
        actual = vllm_grouping(adapter, model, workers)
    except Exception as exc:  # noqa: BLE001 - any refusal is compared by class
        if isinstance(expected, Refusal) and type(exc) is expected.error:
            return []
        return [f"vLLM raised {type(exc).__name__}: {exc}; the reference expected {expected}"]
    if isinstance(expected, Refusal):
        return [f"vLLM grouped {actual}; the reference expected {expected.error.__name__}: {expected.reason}"]
    problems = []
    if len(actual.groups) != len(expected.groups):
        problems.append(f"{len(actual.groups)} groups, expected {len(expected.groups)}")
    for i, (got, want) in enumerate(zip(actual.groups, expected.groups)):
        if got != want:
            problems.append(f"group {i}: vLLM {got}\n          expected {want}")
    if actual.warnings != expected.warnings:
        problems.append(f"warnings: vLLM {actual.warnings}, expected {expected.warnings}")
    return problems + property_violations(model, actual)


def assert_conforms(adapter, model: Model) -> None:
    problems = conformance_failures(adapter, model)
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- model shapes

POWERS_OF_TWO = [2**k for k in range(11)]
BLOCK_SIZES = st.one_of(st.sampled_from(POWERS_OF_TWO), st.integers(1, 1024))
HEAD_SIZES = (32, 64, 80, 96, 100, 128, 192, 256, 512, 576, 656)


@st.composite
def layer_shapes(draw, base_block: int) -> LayerSpec:
    """One layer's format; most share the model's block size, so pages often divide."""
    kind = draw(st.sampled_from(list(Kind)))
    block_size = draw(st.one_of(st.just(base_block), st.just(base_block), BLOCK_SIZES))
    dtype_bytes = draw(st.sampled_from((1, 2, 4)))
    if kind == Kind.MAMBA:
        raw = draw(st.one_of(st.sampled_from([2**k for k in range(8, 22)]), st.integers(1, 1 << 21)))
        return LayerSpec(kind, block_size, dtype_bytes=dtype_bytes, state_bytes=max(dtype_bytes, raw - raw % dtype_bytes))
    return LayerSpec(
        kind,
        block_size,
        num_kv_heads=draw(st.sampled_from((1, 2, 4, 8, 16))),
        head_size=draw(st.sampled_from(HEAD_SIZES)),
        dtype_bytes=dtype_bytes,
        window=draw(st.sampled_from((128, 512, 1024, 4096))) if kind == Kind.SLIDING_WINDOW else None,
        chunk=draw(st.sampled_from((256, 8192))) if kind == Kind.CHUNKED_LOCAL else None,
    )


@st.composite
def _patterned_layers(draw) -> tuple[dict[str, LayerSpec], list[LayerSpec], int]:
    """Up to 64 layers repeating a pattern over up to three independently drawn formats."""
    base_block = draw(BLOCK_SIZES)
    formats = draw(st.lists(layer_shapes(base_block), min_size=1, max_size=3))
    pattern = draw(st.lists(st.integers(0, len(formats) - 1), min_size=1, max_size=8))
    num_layers = draw(st.integers(1, 62))
    layers = {f"model.layers.{i}": formats[pattern[i % len(pattern)]] for i in range(num_layers)}
    return layers, formats, base_block


@st.composite
def _bucketed_layers(draw) -> tuple[dict[str, LayerSpec], list[LayerSpec], int]:
    """Two or three formats with one page size (full, sliding window, Mamba sized to match),
    in counts around the group-size rule's 1.5x boundary, shuffled: every draw reaches the
    bucket split."""
    block = draw(st.sampled_from((1, 4, 16, 64)))
    full = LayerSpec(Kind.FULL, block, num_kv_heads=draw(st.sampled_from((1, 8))), head_size=64)
    window = LayerSpec(Kind.SLIDING_WINDOW, block, num_kv_heads=full.num_kv_heads, head_size=64, window=128)
    mamba = LayerSpec(Kind.MAMBA, block, state_bytes=page_size_bytes(full))
    formats = draw(st.sampled_from(([full, window], [full, mamba], [full, window, mamba])))
    smallest = draw(st.integers(1, 12))
    counts = [draw(st.integers(smallest, 2 * smallest)) for _ in formats]
    order = draw(st.permutations([f for f, n in zip(formats, counts) for _ in range(n)]))
    return {f"model.layers.{i}": layer for i, layer in enumerate(order)}, formats, block


@st.composite
def models(draw) -> Model:
    """A model of patterned or bucketed layers, with up to two draft layers (tagged or not)
    after the target's, under any speculative method."""
    layers, formats, base_block = draw(st.one_of(_patterned_layers(), _bucketed_layers()))
    num_drafts = draw(st.integers(0, 2))
    for j in range(num_drafts):
        draft = draw(st.one_of(st.sampled_from(formats), layer_shapes(base_block)))
        layers[f"draft.layers.{j}"] = replace(draft, is_draft=draw(st.sampled_from((True, True, False))))
    # Every method; the ones with EAGLE's block drop twice as often, as they annotate and warn.
    method = draw(st.sampled_from(SPEC_METHODS + ("eagle", "eagle3", "mtp")))
    spec_decode = SpecDecode(method, disable_eagle_block_drop=draw(st.sampled_from((False, False, True))))
    # With the hybrid manager off most mixed models are refused: draw it less often.
    return Model(layers, spec_decode, hybrid_manager=draw(st.sampled_from((True, True, True, False))))


def interleave(num_layers: int, is_attention, attention: LayerSpec, other: LayerSpec) -> dict[str, LayerSpec]:
    return {f"model.layers.{i}": attention if is_attention(i) else other for i in range(num_layers)}


# Qwen3-Next: 3 gated-delta-net (Mamba) layers to 1 full attention, and one MTP layer whose
# attention is tagged as the draft's; the attention block is sized so its page equals the state.
QWEN3_NEXT = Model(
    {
        **interleave(
            48,
            lambda i: i % 4 == 3,
            LayerSpec(Kind.FULL, 528, num_kv_heads=2, head_size=256),
            LayerSpec(Kind.MAMBA, 528, state_bytes=1_081_344),
        ),
        "mtp.layers.0.self_attn": LayerSpec(Kind.FULL, 528, num_kv_heads=2, head_size=256, is_draft=True),
    },
    SpecDecode("mtp"),
)
# Gemma 3: five sliding-window layers to one full, 62 layers.
GEMMA3 = Model(
    interleave(
        62,
        lambda i: i % 6 == 5,
        LayerSpec(Kind.FULL, 16, num_kv_heads=16, head_size=128),
        LayerSpec(Kind.SLIDING_WINDOW, 16, num_kv_heads=16, head_size=128, window=1024),
    )
)
# DeepSeek-V3: 61 MLA layers and an MTP layer of the same format.
DEEPSEEK_V3 = Model(
    {
        **{f"model.layers.{i}.self_attn": LayerSpec(Kind.MLA, 64, head_size=576) for i in range(61)},
        "model.layers.61.self_attn": LayerSpec(Kind.MLA, 64, head_size=576, is_draft=True),
    },
    SpecDecode("mtp"),
)
# Jamba: one attention layer in eight; EAGLE whose draft layers were not tagged (the warning).
JAMBA = Model(
    interleave(
        32,
        lambda i: i % 8 == 4,
        LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=128),
        LayerSpec(Kind.MAMBA, 16, state_bytes=557_056),
    ),
    SpecDecode("eagle"),
)
# gpt-oss-20b with EAGLE: 12 sliding-window and 13 full layers, so the larger bucket sets the size.
GPT_OSS_EAGLE = Model(
    {
        **interleave(
            24,
            lambda i: i % 2 == 1,
            LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=64),
            LayerSpec(Kind.SLIDING_WINDOW, 16, num_kv_heads=8, head_size=64, window=128),
        ),
        "draft.layers.0": LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=64, is_draft=True),
    },
    SpecDecode("eagle"),
)
# Llama 4: three chunked-local layers to one full.
LLAMA4 = Model(
    interleave(
        48,
        lambda i: i % 4 == 3,
        LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=128),
        LayerSpec(Kind.CHUNKED_LOCAL, 16, num_kv_heads=8, head_size=128, chunk=8192),
    ),
    SpecDecode("eagle3"),
)
# DeepSeek-V3 with a sliding-window EAGLE draft: the MLA page cannot reach the draft's, so vLLM
# allocates the draft as full attention in one uniform-type group.
MLA_WITH_SLIDING_DRAFT = Model(
    {
        **{f"model.layers.{i}.self_attn": LayerSpec(Kind.MLA, 64, head_size=576) for i in range(61)},
        "draft.layers.0": LayerSpec(Kind.SLIDING_WINDOW, 64, num_kv_heads=8, head_size=128, window=128, is_draft=True),
    },
    SpecDecode("eagle"),
)
REAL_MODELS = {
    "qwen3-next": QWEN3_NEXT,
    "gemma3": GEMMA3,
    "deepseek-v3": DEEPSEEK_V3,
    "jamba": JAMBA,
    "gpt-oss": GPT_OSS_EAGLE,
    "llama4": LLAMA4,
    "mla-sliding-draft": MLA_WITH_SLIDING_DRAFT,
}




GROUPING_EXAMPLES = 2000

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


@st.composite
def worker_splits(draw) -> tuple[Model, list[dict[str, LayerSpec]]]:
    """A drawn model reported by two workers: split between two pipeline stages, or whole on
    two tensor-parallel ranks, the second of which may disagree on one layer's block size."""
    model = draw(models())
    names = list(model.layers)
    how = draw(st.sampled_from(("pipeline", "tensor", "disagree", "disagree")))
    if how == "pipeline":
        cut = draw(st.integers(0, len(names)))
        return model, [{n: model.layers[n] for n in names[:cut]}, {n: model.layers[n] for n in names[cut:]}]
    second = dict(model.layers)
    if how == "disagree":
        name = draw(st.sampled_from(names))
        second[name] = replace(second[name], block_size=2 * second[name].block_size)
    return model, [dict(model.layers), second]


def workers_conform(adapter, case: tuple[Model, list[dict[str, LayerSpec]]]) -> None:
    """vLLM groups several workers' reports as the reference groups the merged layers, and
    refuses (AssertionError) workers that disagree on a layer."""
    model, workers = case
    problems = conformance_failures(adapter, model, workers)
    assert not problems, "two workers: " + "\n".join(problems)


WORKER_EXAMPLES = 150


def check_grouping(adapter, seed: int = 0, scale: float = 1.0) -> CheckResult:
    """vLLM's grouping equals the reference's, and satisfies every spec property, on the real
    model shapes and on ``GROUPING_EXAMPLES`` drawn ones (plus the minimal failing shape)."""
    reached: Counter = Counter()

    def conforms(model: Model) -> None:
        reached["shapes"] += 1
        expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager)
        if isinstance(expected, Refusal):
            reached[f"refused ({expected.error.__name__})"] += 1
        else:
            reached["one group" if len(expected.groups) == 1 else "several groups"] += 1
            reached["warned"] += any("draft model's" in w for w in expected.warnings)
            reached["annotated"] += any(g.is_eagle_group for g in expected.groups)
        assert_conforms(adapter, model)

    # Drawn shapes first, so that a failure shrinks to a minimal shape; then the real ones.
    failure = run_property(conforms, models(), seed=seed, examples=scaled(GROUPING_EXAMPLES, scale))
    for name, model in REAL_MODELS.items():
        if not failure and (problems := conformance_failures(adapter, model)):
            failure = [f"the {name} shape departs from the reference:", *problems]

    def workers(case) -> None:
        reached["two workers"] += 1
        workers_conform(adapter, case)

    if not failure:  # last, on its own draws: the phases above draw what they always drew
        failure = run_property(workers, worker_splits(), seed=seed, examples=scaled(WORKER_EXAMPLES, scale))
    covered = ", ".join(f"{n} {what}" for what, n in reached.most_common())
    return CheckResult(
        "grouping",
        covered,
        holds=not failure,
        details=failure or [f"{len(REAL_MODELS)} real model shapes and {reached['shapes']} drawn ones as the reference predicts"],
    )
