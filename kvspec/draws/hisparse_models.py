"""The draws of HiSparse models for the grouping check (kvspec/gate/hisparse_grouping.py): sparse
MLA layers in index units with their indexers, now and then a layout vLLM refuses, regular layers
beside them, and a HiSparse setting; and DeepSeek-V3.2-like fixed shapes run first."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from kvspec.spec.hisparse_grouping import HiSparseSetting
from kvspec.spec.layers import Kind, LayerSpec

# DeepSeek-V3.2's caches at the default dtype: the sparse MLA latent (kv_lora_rank 512 + rope 64,
# bf16) and the indexer's key (index_head_dim 128 + its fp8 scales, 132 bytes a token).
SPARSE = LayerSpec(Kind.MLA, 64, head_size=576, dtype_bytes=2)
INDEXER = LayerSpec(Kind.MLA, 64, head_size=132, dtype_bytes=1, indexer=True)
REGULAR = LayerSpec(Kind.FULL, 16, num_kv_heads=8, head_size=128)
V32 = HiSparseSetting(index_topk=2048)


def deepseek_v32(num_layers: int, index_topk_freq: int = 1, sparse: LayerSpec = SPARSE) -> dict[str, LayerSpec]:
    """A DeepSeek-V3.2 model's caches in registration order: a layer computes its own top-k (an
    indexer and the index-group leader flag) unless IndexCache skips it, by the model's rule
    (deepseek_v2.py:DeepseekV2MLAAttention, index_skip_topk_offset 2)."""
    layers = {}
    for i in range(num_layers):
        has_indexer = max(i - 2 + 1, 0) % index_topk_freq == 0
        if has_indexer:
            layers[f"model.layers.{i}.self_attn.indexer.k_cache"] = INDEXER
        layers[f"model.layers.{i}.self_attn.attn"] = replace(sparse, index_leader=has_indexer)
    return layers


def one_byte_boundary(heads: tuple[int, ...]) -> dict[str, LayerSpec]:
    """One indexer (a 132-byte page: the packing budget) and a top-k unit per sparse layer of the
    given page, one token a block and a byte a value. Real pages are multiples of 4 bytes, but the
    packing is arithmetic over any pages, and only sums that meet the budget or pass it by one byte
    show an off-by-one in the packing (kvspec mutate's survivors _lay_out_hisparse_groups:
    NumberReplacer:6-9 and ReplaceComparisonOperator_Gt_GtE:0)."""
    layers = {"model.layers.0.self_attn.indexer.k_cache": LayerSpec(Kind.MLA, 1, head_size=132, dtype_bytes=1,
                                                                    indexer=True)}
    for i, head in enumerate(heads):
        layers[f"model.layers.{i}.self_attn.attn"] = LayerSpec(Kind.MLA, 1, head_size=head, dtype_bytes=1,
                                                               index_leader=True)
    return layers


# Run first in the phase: real shapes (every layer its own top-k; 20 layers, two units a hot
# group; IndexCache every 4 layers), a regular group beside them, a configured buffer, and one of
# each refusal of the layout (spec/hisparse_grouping.py); then the packing's boundaries.
FIXED_HISPARSE_MODELS = (
    (deepseek_v32(4), V32),
    (deepseek_v32(20), V32),
    (deepseek_v32(12, 4), V32),
    ({**deepseek_v32(4), "model.layers.4.full": REGULAR, "model.layers.5.full": REGULAR}, V32),
    (deepseek_v32(4), HiSparseSetting(device_buffer_size=3000, index_topk=2048)),
    (deepseek_v32(2), HiSparseSetting(device_buffer_size=1000, index_topk=2048)),
    ({**deepseek_v32(2), "model.layers.1.self_attn.attn": replace(SPARSE, model_version="deepseek_v4")}, V32),
    ({f"model.layers.{i}.self_attn.attn": replace(SPARSE, index_leader=True) for i in range(2)}, V32),
    ({"model.layers.0.self_attn.indexer.k_cache": INDEXER}, V32),
    ({**deepseek_v32(2), "model.layers.0.self_attn.indexer.k_cache": replace(INDEXER, block_size=16)}, V32),
    ({**deepseek_v32(2, 4), "model.layers.1.self_attn.attn": replace(SPARSE, head_size=512)}, V32),
    # The packing's boundaries: two units that fill the budget exactly (one hot group), or pass it
    # by a byte (two); the same after a first, full group.
    (one_byte_boundary((66, 66)), V32),
    (one_byte_boundary((66, 67)), V32),
    (one_byte_boundary((132, 66, 66)), V32),
    (one_byte_boundary((132, 66, 67)), V32),
)


@st.composite
def hisparse_models(draw, widest_top_k: bool):
    """A sparse-MLA model: units of a leader and its followers, indexers among them, now and then
    a second block size, page size, DeepSeek-V4 layer or regular layers; and a HiSparse setting.
    ``widest_top_k``: the release reads a layer's top-k width (spec/releases.py:
    HISPARSE_TOP_K_FROM_THE_WIDEST_BUFFER), so some layers carry one."""
    block = draw(st.sampled_from((16, 64)))
    head, dtype = draw(st.sampled_from(((64, 1), (128, 2), (576, 2))))
    layers: dict[str, LayerSpec] = {}
    # Now and then the first sparse layer leads no index group: vLLM starts the first unit there
    # all the same (_lay_out_hisparse_groups: ``or not hot_units``).
    first_leads = draw(st.integers(0, 3)) > 0
    for u in range(draw(st.integers(1, 5))):
        for f in range(draw(st.integers(1, 3))):
            name = f"model.layers.{u}.{f}"
            if f == 0 and draw(st.integers(0, 7)):
                layers[f"{name}.indexer.k_cache"] = LayerSpec(Kind.MLA, block, head_size=132, dtype_bytes=1,
                                                              indexer=True)
            width = draw(st.sampled_from((None,) * 3 + (1024,))) if widest_top_k else None
            layers[f"{name}.attn"] = LayerSpec(Kind.MLA, block, head_size=head, dtype_bytes=dtype,
                                               index_leader=f == 0 and (u > 0 or first_leads), topk_width=width)
    if draw(st.integers(0, 5)) == 0:  # a hot group of two page sizes only if packed together
        name = draw(st.sampled_from(sorted(n for n in layers if not layers[n].indexer)))
        layers[name] = replace(layers[name], head_size=512)
    if draw(st.integers(0, 15)) == 0:
        name = draw(st.sampled_from(sorted(layers)))
        layers[name] = replace(layers[name], block_size=2 * block)
    if draw(st.integers(0, 15)) == 0:
        name = draw(st.sampled_from(sorted(n for n in layers if not layers[n].indexer)))
        layers[name] = replace(layers[name], model_version="deepseek_v4")
    for r in range(draw(st.sampled_from((0, 0, 1, 2)))):
        layers[f"model.regular.{r}"] = draw(st.sampled_from((REGULAR, LayerSpec(Kind.SLIDING_WINDOW, 16, window=128))))
    buffer = draw(st.sampled_from((None,) * 5 + (100, 5000)))
    return layers, HiSparseSetting(device_buffer_size=buffer, index_topk=draw(st.sampled_from((64, 256, 2048))))
