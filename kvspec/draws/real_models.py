"""The shapes of real models the grouping check always runs, before its drawn ones."""

from __future__ import annotations

from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import Kind, LayerSpec, SpecDecode


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
