"""A plain-vLLM test of the lookup for a request scheduled with a KV connector
(KVCacheManager.get_computed_blocks_for_connector), for a divergence kvspec/gate/connector_hits.py
meets that known-divergences.toml does not record: a real manager built as impl/connector_hits.py
builds it, its pool holding exactly the case's entries under a real request's hashes, as the
hand-written replays in divergences/test_connector_flags_a_safe_hit_*.py do.

It asserts what the spec allows (spec/connector_hits.py): no flag on a hit every group can
resume at, or, for an unflagged hit, the hit the core's own lookup returns on the same cache. It
fails on vLLM while the divergence stands, at its last assertion.
"""

from __future__ import annotations

import math

from kvspec.emit.lookup_test import groups_lines, test_name
from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line


@emits_paste_ready
def connector_test(kind: str, case, cap: int | None, answer, name: str) -> str:
    """The test of a ``kind`` divergence (``short-hit``: a flag on a safe hit; ``paths-disagree``:
    an unflagged hit other than get_computed_blocks') met on ``case`` (setting, state,
    num_tokens, _cap, _skip_reads), the lookup passed ``cap`` (None where the release takes
    none), where vLLM answered ``answer`` (spec/connector_hits.py:ConnectorAnswer)."""
    setting, state, num_tokens, _cap, _skip_reads = case
    cached = sorted(state.cached)
    capped = "" if cap is None else f", {cap}"
    lines = groups_lines(setting) + [
        "init_none_hash(sha256)",
        "manager = KVCacheManager(",
        f"    KVCacheConfig(num_blocks={len(cached) + 2}, kv_cache_tensors=[], kv_cache_groups=groups),",
        f"    max_model_len={num_tokens + 64},",
        f"    scheduler_block_size={math.lcm(*(g.block_size for g in setting.groups))},",
        f"    hash_block_size={setting.hash_block_size},",
        "    enable_caching=True,",
        f"    use_eagle={setting.use_eagle},",
        ")",
        "request = Request(",
        '    request_id="r",',
        f"    prompt_token_ids=list(range(1, {num_tokens} + 1)),",
        "    sampling_params=SamplingParams(max_tokens=1),",
        "    pooling_params=None,",
        f"    block_hasher=get_request_block_hasher({setting.hash_block_size}, sha256),",
        ")",
        f"cached = {cached}  # (group id, hash unit) entries present, as an earlier request left them",
        "pool = manager.block_pool",
        "for (group_id, index), block in zip(cached, pool.get_new_blocks(len(cached)), strict=True):",
        "    key = make_block_hash_with_group_id(request.block_hashes[index], group_id)",
        "    pool.cached_block_hash_to_block.insert(key, block)",
    ]
    per_group = "" if answer.per_group is None else f"per-group hits {tuple(answer.per_group)}: "
    if kind == "short-hit":
        lines += [
            f"_blocks, hit, _boundary, hit_diverged = manager.get_computed_blocks_for_connector(request{capped})",
            f"assert hit == {answer.hit}",
            f"# {per_group}every group can resume at {answer.hit} (its KV, state and the drafter's token are "
            "cached), so the hit needs no flag; a flag makes the scheduler fall back to get_computed_blocks",
            "assert not hit_diverged",
        ]
    else:
        lines += [
            f"_blocks, core_hit, _boundary = manager.get_computed_blocks(request{capped})",
            f"_blocks, hit, _boundary, hit_diverged = manager.get_computed_blocks_for_connector(request{capped})",
            "assert not hit_diverged",
            f"# {per_group}the scheduler adopts this unflagged hit as the local prefix; the core's lookup "
            "answers another on the same cache and prompt",
            "assert hit == core_hit",
        ]
    interface = sorted({SPEC_SYMBOLS[g.kind] for g in setting.groups} | {S.KV_CACHE_CONFIG, S.KV_CACHE_GROUP_SPEC},
                       key=lambda symbol: symbol.name)
    header = [
        "import torch", "",
        import_line(S.SAMPLING_PARAMS),
        import_line(S.SHA256),
        import_line(S.KV_CACHE_MANAGER),
        import_line(S.GET_REQUEST_BLOCK_HASHER, S.INIT_NONE_HASH, S.MAKE_BLOCK_HASH_WITH_GROUP_ID),
        import_line(*interface),
        import_line(S.REQUEST), "", "",
        f"def {test_name(name)}():",
    ]
    return "\n".join(header + [f"    {line}" if line else "" for line in lines]) + "\n"
