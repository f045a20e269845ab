"""Plain-vLLM tests of the SimpleCPUOffload connector's lookup
(SimpleCPUOffloadScheduler.get_num_new_matched_tokens): a real scheduler built as
impl/simple_offload.py builds it, its own CPU pool holding exactly the case's entries, and a
request past its local prefix, as the hand-written replays in divergences/test_simple_offload_*.py
do. For a short match kvspec/gate/simple_offload.py meets that known-divergences.toml does not
record, the test asserts the longest safe match; for a match that breaks a rule, it asserts the
matches the spec allows (an unsafe one) or the reference's (a safe one off the reference). Each
fails on vLLM while the finding stands, at its last assertion."""

from __future__ import annotations

import math

from kvspec.emit.lookup_test import groups_lines, test_name
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line
from kvspec.spec.simple_offload import SimpleOffloadCase, matched_tokens_unsafe_reason

BLOCK_BYTES = 4096  # any size: the CPU pool gets as many blocks as the GPU one (impl/simple_offload.py)


@emits_paste_ready
def simple_offload_test(case: SimpleOffloadCase, expected: int, got: int, name: str) -> str:
    """The test asserting that ``case``'s lookup matches ``expected`` tokens past its local
    prefix (vLLM matched ``got``)."""
    return _test(case, name, [
        f"# {expected} tokens past the local prefix of {case.num_computed} are the longest safe match "
        f"(every group holds the KV, state and drafter's token there); vLLM matches {got}",
        f"assert matched == {expected}",
    ])


def safe_matches(case: SimpleOffloadCase) -> list[int]:
    """Every match past the local prefix that spec/simple_offload.py allows, within the request
    less its last token (0, no external hit, always)."""
    top = case.num_tokens - 1 - case.num_computed
    return [m for m in range(max(top, 0) + 1) if matched_tokens_unsafe_reason(case, m) is None]


def _one_of(answers: list[int]) -> str:
    """``answers`` as a Python expression to test membership in: a range where they step evenly."""
    step = answers[1] - answers[0] if len(answers) > 1 else 1
    if len(answers) > 2 and answers == list(range(answers[0], answers[-1] + 1, step)):
        return f"range({answers[0]}, {answers[-1] + 1}, {step})" if step > 1 else f"range({answers[0]}, {answers[-1] + 1})"
    return f"({answers[0]},)" if len(answers) == 1 else f"({', '.join(map(str, answers))})"


@emits_paste_ready
def failing_match_test(case: SimpleOffloadCase, reference: int, got: int, name: str) -> str:
    """The test of a match that breaks a rule of the check (kvspec/gate/simple_offload.py): an
    unsafe ``got`` asserts one of the safe matches; a safe one asserts the ``reference``'s."""
    if (safe := safe_matches(case)) and got not in safe:
        return _test(case, name, [
            f"# The matches every group can resume at from the local prefix and the CPU pool, "
            f"{case.num_computed} + matched tokens in all (the longest is {max(safe)}); vLLM matches {got}, "
            "which reads KV or state the CPU pool does not hold",
            f"assert matched in {_one_of(safe)}",
        ])
    return _test(case, name, [
        f"# {reference} is what vLLM's own algorithm, as kvspec's reference models it, matches; vLLM matches {got}",
        f"assert matched == {reference}",
    ])


def _test(case: SimpleOffloadCase, name: str, assertion: list[str]) -> str:
    cached = sorted(case.cpu.cached)
    lines = scheduler_lines(case.setting, case.cpu.num_hashes, len(cached) + 2, case.lazy) + [
        f"cached = {cached}  # (group id, hash index) entries in the CPU pool",
        "pool = scheduler.cpu_block_pool",
        "for (group_id, index), block in zip(cached, pool.get_new_blocks(len(cached)), strict=True):",
        "    pool.cached_block_hash_to_block.insert(make_block_hash_with_group_id(hashes[index], group_id), block)",
        "# Both names of the skip flag: 0.34 reads skip_reading_external_kv, 0.33 skip_reading_prefix_cache.",
        f'request = types.SimpleNamespace(request_id="r", block_hashes=hashes, num_tokens={case.num_tokens},',
        "                                skip_reading_external_kv=False, skip_reading_prefix_cache=False)",
        f"matched, _load_async = scheduler.get_num_new_matched_tokens(request, {case.num_computed})",
        *assertion,
    ]
    return "\n".join(header_lines(case.setting, name) + [f"    {line}" if line else "" for line in lines]) + "\n"


def scheduler_lines(setting, num_hashes: int, num_blocks: int, lazy: bool) -> list[str]:
    """The emitted test's ``groups``, ``config``, a real ``scheduler`` over a CPU pool of about
    ``num_blocks`` blocks, as impl/simple_offload.py builds it, and ``num_hashes`` ``hashes``."""
    lines = groups_lines(setting) + [
        'config = VllmConfig(device_config=DeviceConfig(device="cpu"))',
        "# No model is loaded: the CPU coordinator reads only the model length.",
        'object.__setattr__(config, "model_config", types.SimpleNamespace(max_model_len=4096))',
    ]
    if setting.use_eagle:
        lines += [
            "# Only the fields the KV-cache code reads; the validator would load a draft model.",
            "speculative = SpeculativeConfig.__new__(SpeculativeConfig)",
            'for name, value in dict(method="eagle", disable_eagle_block_drop=False,',
            "                         disable_lookahead_block_hashes=False, num_speculative_tokens=1).items():",
            "    object.__setattr__(speculative, name, value)",
            'object.__setattr__(config, "speculative_config", speculative)',
        ]
    lines += [
        f"tensor = KVCacheTensor(size={num_blocks} * {BLOCK_BYTES}, layers=[\"layers.0\"], "
        f"layer_stride={BLOCK_BYTES}, block_stride={BLOCK_BYTES})",
        "scheduler = SimpleCPUOffloadScheduler(",
        "    config,",
        f"    KVCacheConfig(num_blocks={num_blocks}, kv_cache_tensors=[tensor], kv_cache_groups=groups),",
        f"    cpu_capacity_bytes={num_blocks} * {BLOCK_BYTES},",
        f"    scheduler_block_size={math.lcm(*(g.block_size for g in setting.groups))},",
        f"    hash_block_size={setting.hash_block_size},",
        f"    lazy_offload={lazy},",
        ")",
        f"# Hash unit i stands for the chained hash of the first (i + 1) * {setting.hash_block_size} tokens.",
        f'hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range({num_hashes})]',
    ]
    return lines


def header_lines(setting, name: str, *more_imports: str) -> list[str]:
    """The emitted test's imports (``more_imports`` after the scheduler's) and its ``def`` line."""
    interface = sorted({SPEC_SYMBOLS[g.kind] for g in setting.groups}
                       | {S.KV_CACHE_CONFIG, S.KV_CACHE_GROUP_SPEC, S.KV_CACHE_TENSOR}, key=lambda symbol: symbol.name)
    return [
        "import hashlib", "import types", "", "import torch", "",
        import_line(S.DEVICE_CONFIG, *([S.SPECULATIVE_CONFIG] if setting.use_eagle else []), S.VLLM_CONFIG),
        import_line(S.BLOCK_HASH, S.MAKE_BLOCK_HASH_WITH_GROUP_ID),
        import_line(*interface),
        import_line(S.SIMPLE_CPU_OFFLOAD_SCHEDULER), *more_imports, "", "",
        f"def {test_name(name)}():",
    ]
