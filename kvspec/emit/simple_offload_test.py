"""A plain-vLLM test of the SimpleCPUOffload connector's lookup
(SimpleCPUOffloadScheduler.get_num_new_matched_tokens), for a short match
kvspec/gate/simple_offload.py meets that known-divergences.toml does not record: a real
scheduler built as impl/simple_offload.py builds it, its own CPU pool holding exactly the case's
entries, and a request past its local prefix, as the hand-written replays in
divergences/test_simple_offload_*.py do. It asserts the longest safe match, so it fails on vLLM
while the divergence stands, at its last assertion."""

from __future__ import annotations

import math

from kvspec.emit.lookup_test import groups_lines, test_name
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line
from kvspec.spec.simple_offload import SimpleOffloadCase

BLOCK_BYTES = 4096  # any size: the CPU pool gets as many blocks as the GPU one (impl/simple_offload.py)


@emits_paste_ready
def simple_offload_test(case: SimpleOffloadCase, expected: int, got: int, name: str) -> str:
    """The test asserting that ``case``'s lookup matches ``expected`` tokens past its local
    prefix (vLLM matched ``got``)."""
    setting = case.setting
    cached = sorted(case.cpu.cached)
    num_blocks = len(cached) + 2
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
        f"    lazy_offload={case.lazy},",
        ")",
        f"# Hash unit i stands for the chained hash of the first (i + 1) * {setting.hash_block_size} tokens.",
        f'hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range({case.cpu.num_hashes})]',
        f"cached = {cached}  # (group id, hash index) entries in the CPU pool",
        "pool = scheduler.cpu_block_pool",
        "for (group_id, index), block in zip(cached, pool.get_new_blocks(len(cached)), strict=True):",
        "    pool.cached_block_hash_to_block.insert(make_block_hash_with_group_id(hashes[index], group_id), block)",
        "# Both names of the skip flag: 0.34 reads skip_reading_external_kv, 0.33 skip_reading_prefix_cache.",
        f'request = types.SimpleNamespace(request_id="r", block_hashes=hashes, num_tokens={case.num_tokens},',
        "                                skip_reading_external_kv=False, skip_reading_prefix_cache=False)",
        f"matched, _load_async = scheduler.get_num_new_matched_tokens(request, {case.num_computed})",
        f"# {expected} tokens past the local prefix of {case.num_computed} are the longest safe match "
        f"(every group holds the KV, state and drafter's token there); vLLM matches {got}",
        f"assert matched == {expected}",
    ]
    interface = sorted({SPEC_SYMBOLS[g.kind] for g in setting.groups}
                       | {S.KV_CACHE_CONFIG, S.KV_CACHE_GROUP_SPEC, S.KV_CACHE_TENSOR}, key=lambda symbol: symbol.name)
    header = [
        "import hashlib", "import types", "", "import torch", "",
        import_line(S.DEVICE_CONFIG, *([S.SPECULATIVE_CONFIG] if setting.use_eagle else []), S.VLLM_CONFIG),
        import_line(S.BLOCK_HASH, S.MAKE_BLOCK_HASH_WITH_GROUP_ID),
        import_line(*interface),
        import_line(S.SIMPLE_CPU_OFFLOAD_SCHEDULER), "", "",
        f"def {test_name(name)}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"
