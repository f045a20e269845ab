"""Ready-to-paste vLLM tests for what kvspec review and kvspec fuzz find: a lookup through
kvspec/emit/lookup_test.py, a grouping through the plain-vLLM test built here. Each imports only vLLM
and asserts what the spec expects, so a finding replays on vLLM without kvspec."""

from __future__ import annotations

import re

from kvspec.emit.describe import describe_model
from kvspec.emit.lookup_test import SPEC_CLASS_OF_KIND, regression_test, spec_source, test_name, told_partial_hits
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line
from kvspec.oracles.lookups import reference_hit
from kvspec.oracles.situations import lookup_situation
from kvspec.reference.grouping import expected_grouping
from kvspec.spec.grouping import Refusal
from kvspec.spec.grouping_properties import Model
from kvspec.spec.hits import max_safe_hit
from kvspec.spec.layers import VLLM_SPEC_CLASS, Kind, LayerSpec
from kvspec.spec.releases import DRAFT_LAYERS_FLAGGED_ON_SPEC, GROUPS_PLANNED_BEFORE_SIZING, NEWEST_RULES
from kvspec.spec.setting import Hit

_DTYPES = {1: "torch.float8_e4m3fn", 2: "torch.float16", 4: "torch.float32"}


def lookup_test(path: str, case, vllm_hit: Hit | None, rules=NEWEST_RULES) -> str:
    """The lookup as a vLLM test asserting the reference's hit where vLLM departs from it,
    else the longest safe hit (lookup_check.regression_for, from a recorded answer)."""
    setting, state, max_length = case
    reference = reference_hit(path, setting, state, max_length, rules).length
    got = "a crash" if vllm_hit is None else str(vllm_hit.length)
    if vllm_hit is None or vllm_hit.length != reference:
        expected, why = reference, "what vLLM's own algorithm, as the spec models it, returns"
    else:
        expected, why = max_safe_hit(setting, state, max_length), "the longest hit that is safe"
    return regression_test(
        setting, state, max_length, expected, f"{expected} is {why}; kvspec saw {got}",
        path=path, partial_hash_hits=told_partial_hits(rules, setting), name=lookup_situation(path, setting),
    )


def _layer_source(layer: LayerSpec, rules=NEWEST_RULES) -> str:
    """The vLLM spec of ``layer``, with the arguments impl/vllm_specs.py builds it with; its
    draft flag only where specs carry one."""
    flagged = layer.is_draft and DRAFT_LAYERS_FLAGGED_ON_SPEC in rules
    dtype, draft = _DTYPES[layer.dtype_bytes], (", is_draft=True" if flagged else "")
    if layer.kind == Kind.MAMBA:
        replicated = ", tp_replicated=True" if layer.tp_replicated else ""
        return (f"MambaSpec(block_size={layer.block_size}, shapes=(({layer.state_bytes // layer.dtype_bytes},),), "
                f'dtypes=({dtype},), mamba_cache_mode="align"{replicated}{draft})')
    own = {
        Kind.SLIDING_WINDOW: f", sliding_window={layer.window}",
        Kind.SLIDING_WINDOW_MLA: f", sliding_window={layer.window}",
        Kind.CHUNKED_LOCAL: f", attention_chunk_size={layer.chunk}",
        Kind.RSWA: f", rswa_window={layer.rswa_window}",
        Kind.SINK_FULL: f", sink_len={layer.sink_len}",
    }.get(layer.kind, "")
    compressed = f", tokens_per_state={layer.tokens_per_state}" if layer.tokens_per_state != 1 else ""
    return (f"{VLLM_SPEC_CLASS[layer.kind]}(block_size={layer.block_size}, num_kv_heads={layer.num_kv_heads}, "
            f"head_size={layer.head_size}, dtype={dtype}{own}{compressed}{draft})")


@emits_paste_ready
def grouping_test(model: Model, *, rules=NEWEST_RULES) -> str:
    """A vLLM test, for a release with ``rules`` (spec/releases.py), that groups ``model``'s
    layers the release's way and asserts the reference's groups and warnings for that release
    (or its refusal): get_global_kv_cache_groups where the groups are planned on their own
    (GROUPS_PLANNED_BEFORE_SIZING), else the get_kv_cache_groups that get_kv_cache_configs
    calls, on one worker's specs."""
    sources = {name: _layer_source(layer, rules) for name, layer in model.layers.items()}
    formats: dict[str, str] = {}  # one variable per distinct spec, as this release builds it
    for source in sources.values():
        formats.setdefault(source, f"F{len(formats)}")
    expected = expected_grouping(model.layers, model.spec_decode, hybrid_manager=model.hybrid_manager, rules=rules)
    if GROUPS_PLANNED_BEFORE_SIZING in rules:
        grouper, call = S.PLANNING, f"{S.PLANNING.name}.{S.GET_GLOBAL_KV_CACHE_GROUPS.qualname}(config, [specs])"
    else:
        # Where get_kv_cache_configs groups on its way to sizing memory: its grouping of one worker.
        grouper, call = S.UTILS, f"{S.UTILS.name}.{S.GET_KV_CACHE_GROUPS.qualname}(config, specs)"
    spec = model.spec_decode
    lines = [
        f"# {describe_model(model)}",
        'config = VllmConfig(device_config=DeviceConfig(device="cpu"))',
        f"config.scheduler_config.disable_hybrid_kv_cache_manager = {not model.hybrid_manager}",
        'config.cache_config.kv_cache_layout = "LBNHC"',
        "# No model is loaded: grouping only asks whether the model groups its own layers and (before",
        "# 0.33, to place an MTP drafter) its model type.",
        'hf_config = types.SimpleNamespace(model_type="kvspec-stand-in")',
        'model_config = types.SimpleNamespace(supports_kv_cache_grouping=False, hf_config=hf_config)',
        'object.__setattr__(config, "model_config", model_config)',
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
    lines += [f"{name} = {source}" for source, name in formats.items()]
    names = list(model.layers)
    lines.append(f"names = {names!r}" if len(names) <= 8 else _compact_names(names))
    lines.append(f"specs = dict(zip(names, [{', '.join(formats[s] for s in sources.values())}], strict=True))")
    lines += [
        "records = []",
        "capture = logging.Handler()",
        "capture.emit = records.append",
        f"{grouper.name}.logger.addHandler(capture)",
        f"{grouper.name}.logger.setLevel(logging.WARNING)  # whatever the logging config says",
    ]
    if isinstance(expected, Refusal):
        lines += [f"# The spec: {expected.reason}", f"with pytest.raises({expected.error.__name__}):", f"    {call}"]
    else:
        call = f"groups = {call}"
        want = [(list(g.layer_names), g.spec_class, g.block_size, g.page_size_bytes, g.is_eagle_group) for g in expected.groups]
        lines += [
            call,
            "got = [(g.layer_names, type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size,",
            "        g.kv_cache_spec.page_size_bytes, g.is_eagle_group) for g in groups]",
            "# (layers, spec class, block size, page bytes, EAGLE group) as the spec's reference groups them",
            f"assert got == {want!r}",
            "warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]",
            *_list_assertion("warnings", list(expected.warnings)),
        ]
    classes = sorted({SPEC_SYMBOLS[layer.kind] for layer in model.layers.values()}, key=lambda symbol: symbol.name)
    header = [
        "import logging", "import types", "", *(["import pytest"] if isinstance(expected, Refusal) else []), "import torch", "",
        import_line(S.DEVICE_CONFIG, *([] if spec.method is None else [S.SPECULATIVE_CONFIG]), S.VLLM_CONFIG),
        import_line(grouper),
        import_line(*classes), "", "",
        f"def {test_name('grouping ' + re.sub(r'[^a-z0-9 ]', ' ', describe_model(model).lower()))}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"


def _list_assertion(name: str, messages: list[str], piece: int = 64) -> list[str]:
    """``assert name == [...]`` with each long message as adjacent literals of at most ``piece``
    characters, cut after a space: ruff never splits a string, and vLLM's lines hold 88."""
    if all(len(repr(m)) <= piece for m in messages):
        return [f"assert {name} == {messages!r}"]
    lines = [f"assert {name} == ["]
    for message in messages:
        pieces = re.findall(rf".{{1,{piece}}}(?:\s+|$)|\S+", message)
        if "".join(pieces) != message:  # a newline: kept whole rather than changed
            pieces = [message]
        lines += [f"    {part!r}" for part in pieces[:-1]] + [f"    {pieces[-1]!r},"]
    return lines + ["]"]


def _compact_names(names: list[str]) -> str:
    """Layer names as a comprehension when they follow model.layers.{i}, else the list."""
    target = [n for n in names if n.startswith("model.layers.")]
    if target == [f"model.layers.{i}" for i in range(len(target))] and names[: len(target)] == target:
        rest = names[len(target):]
        return f'names = [f"model.layers.{{i}}" for i in range({len(target)})] + {rest!r}'
    return f"names = {names!r}"


# ------------------------------------------------------------------ the OffloadingConnector
@emits_paste_ready
def offloading_test(setting, state, num_tokens: int, cap: int | None, expected_hit: int, reason: str, name: str) -> str:
    """A plain-vLLM test of the OffloadingConnector's lookup: a real connector scheduler built as
    impl/offloading.py builds it (as vLLM's tests/v1/kv_connector/unit/offloading_connector do),
    a real CPU store holding the chunks of ``state``, a ``num_tokens`` prompt, and the hit
    ``get_num_new_matched_tokens`` returns asserted to be ``expected_hit``."""

    stored = sorted(state.cached)
    lines = ["groups = ["]
    for gid, g in enumerate(setting.groups):
        annotated = ", is_eagle_group=True" if g.is_eagle_group else ""
        lines.append(f'    KVCacheGroupSpec(["layers.{gid}"], {spec_source(g)}{annotated}),')
    lines += [
        "]",
        f"blocks_per_chunk = {setting.blocks_per_chunk}",
        'config = VllmConfig(device_config=DeviceConfig(device="cpu"))',
        *offloading_eagle_lines(setting),
    ]
    lines += [
        f"store = CPUOffloadingManager(num_chunks={len(stored) + 1})",
        *offloading_spec_lines(setting.hash_block_size),
        "kv_cache_config = KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=groups)",
        "scheduler = OffloadingConnectorScheduler(spec, config, kv_cache_config)",
        f"# Hash unit i stands for the chained hash of the first (i + 1) * {setting.hash_block_size} tokens.",
        f'hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range({state.num_hashes})]',
        f"stored = {stored}  # (group id, hash index ending the chunk) of each offloaded chunk",
        'writer = ReqContext(req_id="writer")',
        "store.on_new_request(writer)",
        "store.complete_store(store.prepare_store([make_offload_key(hashes[i], g) for g, i in stored], writer).keys_to_store, writer)",
        'request = types.SimpleNamespace(request_id="r", kv_transfer_params=None, kv_hints=None, block_hashes=hashes,',
        f"                                num_tokens={num_tokens}, num_prompt_tokens={num_tokens}, resumable=False,",
        "                                skip_reading_external_kv=False, skip_reading_prefix_cache=False)  # 0.34, 0.33",
        "scheduler.on_new_request(request)",
        f"hit, _load_async = scheduler.get_num_new_matched_tokens(request, 0, {cap})",
        f"# {reason}",
        f"assert hit == {expected_hit}",
    ]
    interface = sorted({SPEC_CLASS_OF_KIND[g.kind] for g in setting.groups} | {"KVCacheConfig", "KVCacheGroupSpec"})
    header = [
        "import hashlib", "import types", "", "import torch", "",
        import_line(S.DEVICE_CONFIG, *offloading_eagle_imports(setting), S.VLLM_CONFIG),
        import_line(S.OFFLOADING_SCHEDULER),
        import_line(S.BLOCK_HASH),
        import_line(*(S.INTERFACE_CLASSES[name] for name in interface)),
        import_line(S.OFFLOADING_EVENTS_CONFIG, S.OFFLOAD_REQ_CONTEXT, S.MAKE_OFFLOAD_KEY),
        import_line(S.CPU_OFFLOADING_MANAGER), "",
        *moved_import(S.WINDOW_IN_CHUNKS), "", "",
        f"def {test_name(name if name.startswith('offloading') else 'offloading ' + name)}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"


def moved_import(symbol) -> list[str]:
    """The import of a symbol that moved between releases: where newer ones keep it, else where
    older ones did (impl/vllm_symbols.py:Symbol.older_module), so the test runs on both."""
    return ["try:  # where newer releases keep it", f"    {import_line(symbol)}",
            "except ImportError:  # older releases", f"    from {symbol.older_module} import {symbol.name}"]


def offloading_eagle_lines(setting) -> list[str]:
    """The emitted test's EAGLE drafter, set after the config resolved its hashes (its validator
    would load a draft model): legacy hashes, so that the connector pops an EAGLE group's last
    chunk, or lookahead hashes as vLLM resolves them for this connector."""
    if not setting.use_eagle:
        return []
    lines = [
        "speculative = SpeculativeConfig.__new__(SpeculativeConfig)",
        'for name, value in dict(method="eagle", disable_eagle_block_drop=False,',
        f"                         disable_lookahead_block_hashes={not setting.lookahead_hashes}, "
        "num_speculative_tokens=1).items():",
        "    object.__setattr__(speculative, name, value)",
        'object.__setattr__(config, "speculative_config", speculative)',
    ]
    if not setting.lookahead_hashes:
        return ["# EAGLE with legacy block hashes (the drop in effect).", *lines]
    return [
        "# EAGLE with lookahead hashes: the config names this connector, which takes them.", *lines,
        'transfer = KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both")',
        'object.__setattr__(config, "kv_transfer_config", transfer)',
        "config.num_hash_lookahead_tokens = config._resolve_num_hash_lookahead_tokens()",
        "assert config.num_hash_lookahead_tokens == 1",
    ]


def offloading_eagle_imports(setting) -> list:
    """What offloading_eagle_lines imports from vllm.config."""
    if not setting.use_eagle:
        return []
    return [S.KV_TRANSFER_CONFIG, S.SPECULATIVE_CONFIG] if setting.lookahead_hashes else [S.SPECULATIVE_CONFIG]


def offloading_spec_lines(hash_unit) -> list[str]:
    """The emitted test's ``spec``: the OffloadingSpec fields the connector's scheduler reads,
    over ``groups``, ``blocks_per_chunk`` and ``store`` (``hash_unit``: a number or a name)."""
    return [
        "spec = types.SimpleNamespace(  # the OffloadingSpec fields the scheduler reads",
        "    config=types.SimpleNamespace(groups=tuple(",
        "        types.SimpleNamespace(",
        "            group_id=i,",
        "            tokens_per_block=g.kv_cache_spec.block_size,",
        "            sliding_window_size_in_chunks=get_sliding_window_size_in_chunks(",
        "                g.kv_cache_spec, g.kv_cache_spec.block_size * blocks_per_chunk),",
        "        )",
        "        for i, g in enumerate(groups)",
        "    )),",
        "    tokens_per_block=tuple(g.kv_cache_spec.block_size for g in groups),",
        f"    tokens_per_hash={hash_unit},",
        "    blocks_per_chunk=blocks_per_chunk,",
        "    offload_prompt_only=True,",
        "    extra_config={},",
        "    kv_events_config=OffloadingKVEventsConfig(enable_kv_cache_events=False, self_describing_kv_events=False),",
        "    get_manager=lambda: store,",
        ")",
    ]
