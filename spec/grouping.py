"""The rules by which vLLM splits a model's layers into KV-cache groups, in small words.

Read from vLLM 0.34.0 (vllm/v1/core/kv_cache_planning.py, vllm/v1/kv_cache_interface.py) and
checked against 0.33.0: for the layer kinds kvspec speaks of, the grouping rules are the same in
both (but for sizing, messages and spec/releases.py:FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA).
Out of scope: HiSparse's grouping (spec/hisparse_grouping.py), hidden-state layers, block-outermost
packing (the adapter resolves a layer-outer layout, as on GPU), model-declared groupings.

Each rule is a plain function; ``reference/grouping.py`` chains them into vLLM's decision
ladder and ``spec/grouping_properties.py`` states what every result must satisfy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from kvspec.spec.layers import VLLM_SPEC_CLASS, Kind, LayerSpec, page_size_bytes
from kvspec.spec.releases import FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA, NEWEST_RULES

# ----------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True)
class CacheFormat:
    """One layer's KV-cache spec as vLLM compares specs: equal formats are one spec. The draft
    tag is left out because vLLM leaves it out of equality (KVCacheSpec.is_draft, compare=False).

    A FULL format may carry ``window`` or ``chunk``: that is a sliding-window or chunked-local
    layer promoted to full attention when the hybrid manager is off.
    """

    kind: Kind
    block_size: int
    num_kv_heads: int = 0  # attention only; a Mamba spec has no heads
    head_size: int = 0
    dtype_bytes: int = 2
    window: int | None = None
    chunk: int | None = None
    state_bytes: int | None = None  # MAMBA only
    padded_page_bytes: int | None = None
    # The fields of the issue-15 kinds (spec/layers.py:LayerSpec), so their specs compare as vLLM's do.
    rswa_window: int | None = None
    sink_len: int | None = None
    page_bytes: int | None = None
    blocks_per_request: int | None = None
    tokens_per_state: int = 1
    tp_replicated: bool = False


SPEC_CLASS = VLLM_SPEC_CLASS
UNIFORM_TYPE_CLASS = "UniformTypeKVCacheSpecs"


@dataclass(frozen=True)
class Group:
    """One KV-cache group: what the reference predicts and what the adapter reports of vLLM's.

    ``kinds`` lists one kind per member layer for a uniform-type group, else the one kind of the
    group's merged spec; ``page_size_bytes`` of a uniform-type group is the sum of its members'."""

    layer_names: tuple[str, ...]
    spec_class: str
    kinds: tuple[Kind, ...]
    block_size: int
    page_size_bytes: int
    is_eagle_group: bool


@dataclass(frozen=True)
class Grouping:
    """vLLM's groups for one model, and the warnings its grouping module logged on the way."""

    groups: tuple[Group, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Refusal:
    """vLLM refuses the model: ``error`` is the exception class it raises."""

    error: type[Exception]
    reason: str
    message: str | None = None  # where the spec states it, how vLLM's own message begins


def format_of(layer: LayerSpec) -> CacheFormat:
    """The spec vLLM builds for a layer (impl/vllm_adapter.py:VllmAdapter.vllm_layer_spec)."""
    if layer.kind == Kind.MAMBA:
        return CacheFormat(Kind.MAMBA, layer.block_size, dtype_bytes=layer.dtype_bytes, state_bytes=layer.state_bytes,
                           tp_replicated=layer.tp_replicated)
    return CacheFormat(
        layer.kind, layer.block_size, layer.num_kv_heads, layer.head_size, layer.dtype_bytes, layer.window, layer.chunk,
        rswa_window=layer.rswa_window, sink_len=layer.sink_len, page_bytes=layer.page_bytes,
        blocks_per_request=layer.blocks_per_request, tokens_per_state=layer.tokens_per_state,
    )


def format_page_bytes(fmt: CacheFormat) -> int:
    """Bytes of one block of one layer, padding included: the padded size unify_page_sizes set,
    else spec/layers.py:page_size_bytes
    (vllm.v1.kv_cache_interface:AttentionSpec.page_size_bytes, MambaSpec.page_size_bytes)."""
    if fmt.padded_page_bytes is not None:
        return fmt.padded_page_bytes
    return page_size_bytes(fmt)


def _attention_fields(fmt: CacheFormat) -> tuple:
    """The fields of vllm.v1.kv_cache_interface:AttentionSpec that the attention merges compare."""
    return fmt.block_size, fmt.num_kv_heads, fmt.head_size, fmt.dtype_bytes, fmt.padded_page_bytes, fmt.tokens_per_state


# Kinds by the vLLM class they are instances of, which is what the merges and the uniform-type
# test ask (isinstance): FullAttentionSpec and its subclasses, MLAAttentionSpec and its subclass
# HiddenStateCacheSpec, SlidingWindowSpec and its subclass SlidingWindowMLASpec.
FULL_FAMILY = frozenset({Kind.FULL, Kind.MLA, Kind.RSWA, Kind.SINK_FULL, Kind.HIDDEN_STATE})
MLA_FAMILY = frozenset({Kind.MLA, Kind.HIDDEN_STATE})
SLIDING_FAMILY = frozenset({Kind.SLIDING_WINDOW, Kind.SLIDING_WINDOW_MLA})
LOCAL_KINDS = frozenset({Kind.SLIDING_WINDOW, Kind.SLIDING_WINDOW_MLA, Kind.CHUNKED_LOCAL})
# The kinds the grouping rules here speak of. Left out, each a precondition of the grouping
# check (never drawn): an encoder-only layer never reaches the scheduler's grouping (the
# worker gives it a group of its own, vllm/v1/worker/gpu/model_states/encoder_only.py);
# hidden-state layers take a route of their own (kv_cache_planning:get_kv_cache_groups,
# hidden_specs); HiSparse specs come only with attention_config.hisparse_config
# (kv_cache_planning:get_hisparse_kv_cache_groups).
GROUPED_KINDS = frozenset(Kind) - {Kind.ENCODER_ONLY, Kind.HIDDEN_STATE, Kind.HISPARSE_HOT, Kind.HISPARSE_RESIDENT}


# ----------------------------------------------------------------------------- merging


def merge_failure(formats: list[CacheFormat]) -> type[Exception] | None:
    """What vLLM raises when the first format's class merges all of them, or None when they
    merge; the first format decides, so order matters
    (vllm.v1.kv_cache_interface:KVCacheSpec.merge, FullAttentionSpec.merge, MLAAttentionSpec.merge,
    RSWASpec.merge, SinkFullAttentionSpec.merge, SlidingWindowMLASpec.merge).

    FullAttentionSpec.merge and SinkFullAttentionSpec.merge take any FullAttentionSpec but an
    MLA one and compare only AttentionSpec's fields, so an RSWA or sink layer merges into a full
    one (its rswa_window or sink_len is not compared); RSWASpec.merge takes only RSWA layers of
    one rswa_window; SinkFullAttentionSpec.merge builds its spec without tokens_per_state, so a
    compressed sink layer merges with nothing, itself included.
    """
    first = formats[0]
    if first.kind == Kind.RSWA:
        if any(f.kind != Kind.RSWA for f in formats) or len({f.rswa_window for f in formats}) > 1:
            return AssertionError
        return _full_merge_failure(formats, first)
    if first.kind in (Kind.FULL, Kind.SINK_FULL):
        if any(f.kind not in FULL_FAMILY or f.kind in MLA_FAMILY for f in formats):
            return AssertionError
        return _full_merge_failure(formats, first if first.kind == Kind.FULL else replace(first, tokens_per_state=1))
    if first.kind in MLA_FAMILY:
        if any(f.kind not in MLA_FAMILY or _attention_fields(f) != _attention_fields(first) for f in formats):
            return AssertionError
        return None
    if first.kind == Kind.SLIDING_WINDOW_MLA:
        if any(f.kind != Kind.SLIDING_WINDOW_MLA or f.window != first.window
               or f.tokens_per_state != first.tokens_per_state for f in formats):
            return AssertionError
        return None
    return None if all(f == first for f in formats) else AssertionError


def _full_merge_failure(formats: list[CacheFormat], merged: CacheFormat) -> type[Exception] | None:
    """FullAttentionSpec.merge's own checks, once the members' classes passed: one window, one
    chunk size, every member's AttentionSpec fields those of the merged spec, not both."""
    windows = {f.window for f in formats if f.window is not None}
    chunks = {f.chunk for f in formats if f.chunk is not None}
    if len(windows) > 1 or len(chunks) > 1:
        return ValueError  # FullAttentionSpec.merge_window_sizes
    if any(_attention_fields(f) != _attention_fields(merged) for f in formats):
        return AssertionError
    return AssertionError if windows and chunks else None


def merged_format(formats: list[CacheFormat]) -> CacheFormat:
    """The one spec a group of mergeable formats gets: the first's, with the one window or chunk
    any member carries (vllm.v1.kv_cache_interface:FullAttentionSpec.merge; a sink spec keeps the
    first's sink_len, SinkFullAttentionSpec.merge)."""
    first = formats[0]
    if first.kind not in (Kind.FULL, Kind.SINK_FULL, Kind.RSWA):
        return first
    window = next((f.window for f in formats if f.window is not None), None)
    chunk = next((f.chunk for f in formats if f.chunk is not None), None)
    return replace(first, window=window, chunk=chunk)


def one_spec(formats: list[CacheFormat]) -> bool | Refusal:
    """All layers share one spec iff their formats merge; a merge's ValueError escapes as a
    refusal (vllm.v1.core.kv_cache_planning:is_kv_cache_spec_uniform)."""
    if not formats:
        return True
    failure = merge_failure(formats)
    if failure is ValueError:
        return Refusal(ValueError, "layers of one group carry different windows or chunk sizes")
    return failure is None


def one_uniform_type(formats: list[CacheFormat]) -> bool:
    """All layers need the same token slots per block: one block size, and all full-attention
    (MLA, RSWA, sink and hidden-state included), or all sliding-window with one window (a
    sliding-window MLA layer counts after a plain first one, not before it), or all
    chunked-local with one chunk, or all Mamba with one page size and replication, or all of
    the first's class; the first format decides
    (vllm.v1.kv_cache_interface:UniformTypeKVCacheSpecs.is_uniform_type, is_uniform_with_collection)."""
    if len({f.block_size for f in formats}) > 1:
        return False
    first = formats[0]
    if first.kind in FULL_FAMILY:  # registered with uniform_type_base_spec=FullAttentionSpec
        return all(f.kind in FULL_FAMILY for f in formats)
    if first.kind in (Kind.SLIDING_WINDOW, Kind.SLIDING_WINDOW_MLA):  # SlidingWindowSpec.is_uniform_with_collection
        family = SLIDING_FAMILY if first.kind == Kind.SLIDING_WINDOW else {Kind.SLIDING_WINDOW_MLA}
        return all(f.kind in family and f.window == first.window for f in formats)
    if first.kind == Kind.CHUNKED_LOCAL:
        return all(f.kind == Kind.CHUNKED_LOCAL and f.chunk == first.chunk for f in formats)
    if first.kind == Kind.MAMBA:  # MambaSpec.is_uniform_with_collection
        page = format_page_bytes(first)
        return all(f.kind == Kind.MAMBA and format_page_bytes(f) == page and f.tp_replicated == first.tp_replicated
                   for f in formats)
    # CircularBufferSpec.is_uniform_with_collection; CrossAttentionSpec by its registry base
    return all(f.kind == first.kind for f in formats)


# ----------------------------------------------------------------------------- hybrid manager off


def promote_local_layers(formats: dict[str, CacheFormat]) -> dict[str, CacheFormat] | Refusal:
    """With full attention present, sliding-window and chunked-local layers become full
    attention (keeping their window or chunk) at the full layers' one block size, or their own if
    those differ; the result must be one spec or one uniform type, else ValueError
    (vllm.v1.core.kv_cache_planning:_promote_local_kv_cache_specs)."""
    # unify_hybrid_kv_cache_specs promotes replicated and DCP-sharded layers apart; every layer
    # kvspec describes is sharded attention or Mamba, which vLLM puts in the same partition.
    values = list(formats.values())
    already = one_spec(values)
    if isinstance(already, Refusal):
        return already
    if already or one_uniform_type(values):
        return dict(formats)
    full_block_sizes = {f.block_size for f in values if f.kind in FULL_FAMILY}
    full_block_size = next(iter(full_block_sizes)) if len(full_block_sizes) == 1 else None
    has_local = any(f.kind in LOCAL_KINDS for f in values)
    promoted = dict(formats)
    if full_block_sizes and has_local:
        for name, f in formats.items():
            if f.kind in LOCAL_KINDS:  # a sliding-window MLA layer becomes MLA, the others full attention
                promoted[name] = replace(f, kind=Kind.MLA if f.kind == Kind.SLIDING_WINDOW_MLA else Kind.FULL,
                                         block_size=full_block_size or f.block_size)
    uniform = one_spec(list(promoted.values()))
    if isinstance(uniform, Refusal):
        return uniform
    if not (uniform or one_uniform_type(list(promoted.values()))):
        return Refusal(ValueError, "Failed to promote local KV cache specs to one unified type.")
    return promoted


# vllm.v1.core.kv_cache_planning:unify_hybrid_kv_cache_specs
HYBRID_MANAGER_DISABLED_WARNING = (
    "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
    "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding "
    "window). The compute of layers like sliding window is still saved."
)


# ----------------------------------------------------------------------------- page sizes


def unify_page_sizes(formats: dict[str, CacheFormat]) -> dict[str, CacheFormat] | Refusal:
    """Bring every page up to the largest: a Mamba page is padded; a page that divides the
    largest grows its block size by the ratio; another non-MLA attention page is padded; an MLA
    page that does not divide is refused with NotImplementedError
    (vllm.v1.core.kv_cache_planning:unify_kv_cache_spec_page_size)."""
    largest = max(map(format_page_bytes, formats.values()), default=0)
    unified = {}
    for name, f in formats.items():
        page = format_page_bytes(f)
        if page == largest:
            unified[name] = f
        elif f.kind == Kind.MAMBA:
            unified[name] = replace(f, padded_page_bytes=largest)
        elif largest % page == 0:
            unified[name] = replace(f, block_size=f.block_size * (largest // page))
        elif f.kind not in MLA_FAMILY:
            unified[name] = replace(f, padded_page_bytes=largest)
        else:
            return Refusal(NotImplementedError, f"{name}: MLA page {page} cannot reach page {largest}")
    return unified


def full_allocation_fallback(formats: dict[str, CacheFormat], rules=NEWEST_RULES) -> dict[str, CacheFormat] | None:
    """When pages cannot be unified, a model of MLA and sliding-window layers (no chunked-local,
    nor sliding-window MLA without spec/releases.py:FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA) may
    still be one uniform-type group, its sliding-window layers allocated as full attention; None
    when that fails too (vllm.v1.core.kv_cache_planning:_try_get_full_allocation_fallback_groups)."""
    kinds = {f.kind for f in formats.values()}
    refused = {Kind.CHUNKED_LOCAL, Kind.SLIDING_WINDOW_MLA}
    if FULL_ALLOCATION_TAKES_SLIDING_WINDOW_MLA in rules:
        refused = {Kind.CHUNKED_LOCAL}
    if kinds & refused or not (kinds & MLA_FAMILY and kinds & SLIDING_FAMILY):
        return None
    promoted = promote_local_layers(formats)
    if isinstance(promoted, Refusal) or not one_uniform_type(list(promoted.values())):
        return None
    return promoted


FULL_ALLOCATION_FALLBACK_WARNING = (  # vllm.v1.core.kv_cache_planning:_try_get_full_allocation_fallback_groups
    "KV cache page sizes cannot be unified; treating sliding-window layers as full attention for "
    "cache allocation. Sliding-window attention compute is unchanged."
)


# ----------------------------------------------------------------------------- the ladder


class Route(StrEnum):
    """The rung of vLLM's ladder that groups a model."""

    NO_LAYERS = "no layers: no groups"
    ONE_SPEC = "one spec: one group"
    ONE_UNIFORM_TYPE = "one uniform type: one group"
    SPLIT_BUCKETS = "pages unified: buckets split into equal groups"
    FULL_ALLOCATION = "pages refused: one full-allocation group"


def grouping_route(formats: dict[str, CacheFormat], rules=NEWEST_RULES) -> Route | Refusal:
    """One group when all specs merge; else one uniform-type group when only page sizes differ;
    else page-size unification and split buckets; else the full-allocation fallback; else
    vLLM's refusal (vllm.v1.core.kv_cache_planning:get_kv_cache_groups), under ``rules``."""
    if not formats:
        return Route.NO_LAYERS
    values = list(formats.values())
    uniform = one_spec(values)
    if isinstance(uniform, Refusal):
        return uniform
    if uniform:
        return Route.ONE_SPEC
    if one_uniform_type(values):
        return Route.ONE_UNIFORM_TYPE
    unified = unify_page_sizes(formats)
    if not isinstance(unified, Refusal):
        return Route.SPLIT_BUCKETS
    return unified if full_allocation_fallback(formats, rules) is None else Route.FULL_ALLOCATION


def model_route(layers: dict[str, LayerSpec], hybrid_manager: bool, rules=NEWEST_RULES) -> Route | Refusal:
    """The rung that groups ``layers``, after promoting local layers when the hybrid manager is
    off (vllm.v1.core.kv_cache_planning:get_kv_cache_groups)."""
    formats = {name: format_of(layer) for name, layer in layers.items()}
    if not hybrid_manager:
        formats = promote_local_layers(formats)
        if isinstance(formats, Refusal):
            return formats
    return grouping_route(formats, rules)


# ----------------------------------------------------------------------------- buckets and groups


def spec_buckets(formats: dict[str, CacheFormat]) -> list[list[str]]:
    """Layers with equal specs share a bucket (first appearance orders buckets and layers); a
    bucket then joins the first earlier bucket it merges with
    (vllm.v1.core.kv_cache_planning:_get_kv_cache_groups_uniform_page_size, steps 1-2)."""
    by_spec: dict[CacheFormat, list[str]] = {}
    for name, f in formats.items():
        by_spec.setdefault(f, []).append(name)
    buckets: list[tuple[list[str], list[CacheFormat]]] = []
    for f, names in by_spec.items():
        for bucket_names, bucket_specs in buckets:
            if merge_failure([*bucket_specs, f]) is None:
                bucket_names.extend(names)
                bucket_specs.append(f)
                break
        else:
            buckets.append((list(names), [f]))
    return [names for names, _ in buckets]


def group_size(bucket_sizes: list[int]) -> int:
    """Layers per group: the smallest bucket's size, unless the largest bucket is under 1.5
    times it, then the largest's (vllm.v1.core.kv_cache_planning:_get_kv_cache_groups_uniform_page_size)."""
    smallest, largest = min(bucket_sizes), max(bucket_sizes)
    return largest if largest < 1.5 * smallest else smallest


def strided_split(names: list[str], size: int) -> list[tuple[str, ...]]:
    """A bucket becomes ceil(len/size) groups, the i-th taking every k-th layer from the i-th, so
    each pipeline stage sees every group (vllm.v1.core.kv_cache_planning:_get_kv_cache_groups_uniform_page_size)."""
    k = -(-len(names) // size)
    return [tuple(names[i::k]) for i in range(k)]


def padding_warning(bucket_len: int, size: int) -> str | None:
    """vLLM's warning when a bucket does not fill its groups evenly
    (vllm.v1.core.kv_cache_planning:_get_kv_cache_groups_uniform_page_size)."""
    padding = size - bucket_len % size
    if padding == size:
        return None
    return f"Add {padding} padding layers, may waste at most {padding / bucket_len * 100:.2f}% KV cache memory"
