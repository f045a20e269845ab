"""Ready-to-paste vLLM tests for what kvspec review and kvspec fuzz find: a lookup through
kvspec/regression.py, a grouping through the plain-vLLM test built here. Each imports only vLLM
and asserts what the spec expects, so a finding replays on vLLM without kvspec."""

from __future__ import annotations

import re

from kvspec.describe import describe_model
from kvspec.invariants import lookup_situation, reference_hit
from kvspec.reference.grouping import expected_grouping
from kvspec.regression import regression_test, test_name
from kvspec.spec.grouping import SPEC_CLASS, Refusal
from kvspec.spec.grouping_properties import Model
from kvspec.spec.hits import Hit, max_safe_hit, partial_hash_hits_enabled
from kvspec.spec.layers import Kind, LayerSpec

_DTYPES = {1: "torch.float8_e4m3fn", 2: "torch.float16", 4: "torch.float32"}


def lookup_test(path: str, case, vllm_hit: Hit | None) -> str:
    """The lookup as a vLLM test asserting the reference's hit where vLLM departs from it,
    else the longest safe hit (lookup_check.regression_for, from a recorded answer)."""
    setting, state, max_length = case
    reference = reference_hit(path, setting, state, max_length).length
    got = "a crash" if vllm_hit is None else str(vllm_hit.length)
    if vllm_hit is None or vllm_hit.length != reference:
        expected, why = reference, "what vLLM's own algorithm, as the spec models it, returns"
    else:
        expected, why = max_safe_hit(setting, state, max_length), "the longest hit that is safe"
    return regression_test(
        setting, state, max_length, expected, f"{expected} is {why}; kvspec saw {got}",
        path=path, partial_hash_hits=partial_hash_hits_enabled(setting), name=lookup_situation(path, setting),
    )


def _layer_source(layer: LayerSpec) -> str:
    dtype, draft = _DTYPES[layer.dtype_bytes], (", is_draft=True" if layer.is_draft else "")
    if layer.kind == Kind.MAMBA:
        return (f"MambaSpec(block_size={layer.block_size}, shapes=(({layer.state_bytes // layer.dtype_bytes},),), "
                f'dtypes=({dtype},), mamba_cache_mode="align"{draft})')
    extra = {Kind.SLIDING_WINDOW: f", sliding_window={layer.window}", Kind.CHUNKED_LOCAL: f", attention_chunk_size={layer.chunk}"}
    return (f"{SPEC_CLASS[layer.kind]}(block_size={layer.block_size}, num_kv_heads={layer.num_kv_heads}, "
            f"head_size={layer.head_size}, dtype={dtype}{extra.get(layer.kind, '')}{draft})")


def grouping_test(model: Model) -> str:
    """A vLLM test that groups ``model``'s layers with get_global_kv_cache_groups and asserts the
    reference's groups and warnings (or its refusal)."""
    formats: dict[LayerSpec, str] = {}
    for layer in model.layers.values():
        formats.setdefault(layer, f"F{len(formats)}")
    expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager)
    spec = model.spec_decode
    lines = [
        f"# {describe_model(model)}",
        'config = VllmConfig(device_config=DeviceConfig(device="cpu"))',
        f"config.scheduler_config.disable_hybrid_kv_cache_manager = {not model.hybrid_manager}",
        'config.cache_config.kv_cache_layout = "LBNHC"',
        "# No model is loaded: grouping only asks whether the model groups its own layers.",
        'object.__setattr__(config, "model_config", types.SimpleNamespace(supports_kv_cache_grouping=False))',
    ]
    if spec.method is None:
        lines.append('object.__setattr__(config, "speculative_config", None)')
    else:
        lines += [
            "# Only the fields the KV-cache code reads; the validator would load a draft model.",
            "speculative = SpeculativeConfig.__new__(SpeculativeConfig)",
            f'for name, value in dict(method="{spec.method}", disable_eagle_block_drop={spec.disable_eagle_block_drop},',
            "                         disable_lookahead_block_hashes=False, num_speculative_tokens=1).items():",
            "    object.__setattr__(speculative, name, value)",
            'object.__setattr__(config, "speculative_config", speculative)',
        ]
    lines += [f"{name} = {_layer_source(layer)}" for layer, name in formats.items()]
    names = list(model.layers)
    lines.append(f"names = {names!r}" if len(names) <= 8 else _compact_names(names))
    lines.append(f"specs = dict(zip(names, [{', '.join(formats[layer] for layer in model.layers.values())}]))")
    lines += [
        "records = []",
        "capture = logging.Handler()",
        "capture.emit = records.append",
        "kv_cache_planning.logger.addHandler(capture)",
        "kv_cache_planning.logger.setLevel(logging.WARNING)  # whatever the logging config says",
    ]
    call = "groups = kv_cache_planning.get_global_kv_cache_groups(config, [specs])"
    if isinstance(expected, Refusal):
        lines += [f"# The spec: {expected.reason}", f"with pytest.raises({expected.error.__name__}):", f"    {call}"]
    else:
        want = [(list(g.layer_names), g.spec_class, g.block_size, g.page_size_bytes, g.is_eagle_group) for g in expected.groups]
        lines += [
            call,
            "got = [(g.layer_names, type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size,",
            "        g.kv_cache_spec.page_size_bytes, g.is_eagle_group) for g in groups]",
            "# (layers, spec class, block size, page bytes, EAGLE group) as the spec's reference groups them",
            f"assert got == {want!r}",
            "warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]",
            f"assert warnings == {list(expected.warnings)!r}",
        ]
    classes = sorted({SPEC_CLASS[layer.kind] for layer in formats})
    header = [
        "import logging", "import types", "", *(["import pytest"] if isinstance(expected, Refusal) else []), "import torch", "",
        "from vllm.config import DeviceConfig, SpeculativeConfig, VllmConfig",
        "from vllm.v1.core import kv_cache_planning",
        f"from vllm.v1.kv_cache_interface import {', '.join(classes)}", "", "",
        f"def {test_name('grouping ' + re.sub(r'[^a-z0-9 ]', ' ', describe_model(model).lower()))}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"


def _compact_names(names: list[str]) -> str:
    """Layer names as a comprehension when they follow model.layers.{i}, else the list."""
    target = [n for n in names if n.startswith("model.layers.")]
    if target == [f"model.layers.{i}" for i in range(len(target))] and names[: len(target)] == target:
        rest = names[len(target):]
        return f'names = [f"model.layers.{{i}}" for i in range({len(target)})] + {rest!r}'
    return f"names = {names!r}"
