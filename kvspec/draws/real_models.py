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


# Shapes of the issue-15 kinds, as vLLM 0.34.0's model files configure them (sizes are
# representative, not one checkpoint's).
# Whisper-like encoder-decoder: each decoder layer has full self-attention and cross attention
# over the encoder's output (model_executor/models/whisper.py: WhisperAttention builds
# CrossAttention for encoder_attn, whose spec is CrossAttentionSpec).
WHISPER_LIKE = Model(
    {
        name: layer
        for i in range(32)
        for name, layer in (
            (f"model.decoder.layers.{i}.self_attn.attn", LayerSpec(Kind.FULL, 16, num_kv_heads=20, head_size=64)),
            (f"model.decoder.layers.{i}.encoder_attn.attn",
             LayerSpec(Kind.CROSS_ATTENTION, 16, num_kv_heads=20, head_size=64)),
        )
    }
)


# openPangu-like attention sinks: every layer a StaticSinkAttention (model_executor/models/
# openpangu.py, sink_len=param_sink_number), spec SinkFullAttentionSpec; sinks a whole number of blocks.
PANGU_SINKS_LIKE = Model(
    {f"model.layers.{i}.self_attn.attn": LayerSpec(Kind.SINK_FULL, 16, num_kv_heads=8, head_size=128, sink_len=128)
     for i in range(32)}
)


# Unlimited-OCR-like R-SWA: DeepseekV2Attention builds RSWAAttention when the config has an
# rswa_window (model_executor/models/deepseek_v2.py; models/config.py defaults it to 128).
OCR_RSWA_LIKE = Model(
    {f"model.layers.{i}.self_attn.attn": LayerSpec(Kind.RSWA, 16, num_kv_heads=10, head_size=128, rswa_window=128)
     for i in range(12)}
)


# GLM-5-Next-like MLA with a compressor's circular tail ring per layer
# (models/glm5next/common/attention.py: CircularBufferSpec, block_size = the ring, 2 heads).
# vLLM's ring has no V head (head_size_v=0), which kvspec's vocabulary does not carry: its head
# size here is halved so the page is the same.
GLM5_RING_LIKE = Model(
    {
        name: layer
        for i in range(24)
        for name, layer in (
            (f"model.layers.{i}.self_attn.attn", LayerSpec(Kind.MLA, 64, head_size=576)),
            (f"model.layers.{i}.self_attn.tail_ring", LayerSpec(Kind.CIRCULAR_BUFFER, 4, num_kv_heads=2, head_size=64)),
        )
    }
)


REAL_MODELS = {
    "qwen3-next": QWEN3_NEXT,
    "gemma3": GEMMA3,
    "deepseek-v3": DEEPSEEK_V3,
    "jamba": JAMBA,
    "gpt-oss": GPT_OSS_EAGLE,
    "llama4": LLAMA4,
    "mla-sliding-draft": MLA_WITH_SLIDING_DRAFT,
    "whisper-like": WHISPER_LIKE,
    "pangu-sinks-like": PANGU_SINKS_LIKE,
    "ocr-rswa-like": OCR_RSWA_LIKE,
    "glm5-ring-like": GLM5_RING_LIKE,
}
