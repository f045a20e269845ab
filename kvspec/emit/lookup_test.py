"""Turn a lookup case into a ready-to-paste pytest for vLLM's own tests/v1/core/ (or
tests/v1/kv_connector/unit/ for the Mooncake store): it imports only vLLM, builds the groups
and the cache explicitly, and asserts the one number the spec expects, with the reason.

A finding is a claim against vLLM; this is how it is replayed without kvspec in the way.
"""

from __future__ import annotations

import math
import re

from kvspec.emit.vllm_style import emits_paste_ready
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_SYMBOLS
from kvspec.impl.vllm_symbols import import_line
from kvspec.spec.layers import VLLM_SPEC_CLASS, CacheGroup, Kind
from kvspec.spec.releases import MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE
from kvspec.spec.resolution import partial_hash_hits_enabled
from kvspec.spec.setting import CacheState, LookupSetting

# Every kind's vLLM class (spec/layers.py); a lookup draws the classic five and issue 15's
# R-SWA, sink, hidden-state, circular-buffer and HiSparse groups (kvspec/draws/lookups.py).
SPEC_CLASS_OF_KIND = dict(VLLM_SPEC_CLASS)


def spec_source(group: CacheGroup) -> str:
    if group.kind == Kind.MAMBA:
        return (
            f"MambaSpec(block_size={group.block_size}, shapes=((32,),), dtypes=(torch.float16,), "
            'mamba_cache_mode="align")'
        )
    if group.kind == Kind.HISPARSE_HOT:
        return f"HiSparseHotSpec(block_size={group.block_size}, page_size=4096, blocks_per_request=1)"
    if group.kind == Kind.HISPARSE_RESIDENT:
        return f"HiSparseResidentSpec(block_size={group.block_size}, page_size=4096)"
    extra = {
        Kind.SLIDING_WINDOW: f", sliding_window={group.window}",
        Kind.CHUNKED_LOCAL: f", attention_chunk_size={group.chunk}",
        Kind.RSWA: f", rswa_window={group.rswa_window}",
        Kind.SINK_FULL: f", sink_len={group.sink_len}",
    }
    return (
        f"{SPEC_CLASS_OF_KIND[group.kind]}(block_size={group.block_size}, num_kv_heads=1, head_size=64, "
        f"dtype=torch.float16{extra.get(group.kind, '')})"
    )


def groups_lines(setting: LookupSetting) -> list[str]:
    """The emitted test's ``groups``: one KVCacheGroupSpec per group, its layer named by its id."""
    lines = ["groups = ["]
    for gid, g in enumerate(setting.groups):
        eagle = ", is_eagle_group=True" if g.is_eagle_group else ""
        # HiSparse's host source: its role gives it HiSparseSourceManager.
        role = ", role=KVCacheGroupRole.HISPARSE_SOURCE, host_resident=True" if g.hisparse_source else ""
        lines.append(f'    KVCacheGroupSpec(["layers.{gid}"], {spec_source(g)}{eagle}{role}),')
    return lines + ["]"]


def test_name(words: str) -> str:
    slug = re.findall(r"[a-z0-9]+", words.lower())[:8]
    return "test_kvspec_" + "_".join(slug or ["finding"])


def told_partial_hits(rules, setting) -> bool | None:
    """What the Mooncake store is told about partial hits on a release with ``rules``: the core's
    decision, or None where it decides itself (spec/releases.py:MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE)."""
    return partial_hash_hits_enabled(setting) if MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE in rules else None


@emits_paste_ready
def regression_test(
    setting: LookupSetting,
    state: CacheState,
    max_length: int,
    expected_hit: int,
    reason: str,
    *,
    path: str = "core",
    partial_hash_hits: bool | None = False,  # None: a store that decides them itself
    name: str | None = None,
) -> str:
    """A self-contained vLLM test asserting that the lookup returns ``expected_hit``; its name
    comes from ``name`` (or the reason), the one-line comment above the assertion is ``reason``."""
    scheduler_bs = math.lcm(*(g.block_size for g in setting.groups))
    cached = sorted(state.cached)
    lines = groups_lines(setting) + [
        f"# Hash unit i stands for the chained hash of the first (i + 1) * {setting.hash_block_size} tokens.",
        f'hashes = [BlockHash(hashlib.sha256(b"block-%d" % i).digest()) for i in range({state.num_hashes})]',
        f"cached = {cached}  # (group id, hash index) entries present",
    ]
    if path == "core":
        lines += [
            "coordinator = get_kv_cache_coordinator(",
            f"    KVCacheConfig(num_blocks={len(cached) + 2}, kv_cache_tensors=[], kv_cache_groups=groups),",
            f"    max_model_len={max(max_length, state.num_hashes * setting.hash_block_size) + 1},",
            f"    max_in_flight_tokens={max(max_length, 1) + 1},",
            f"    use_eagle={setting.use_eagle},",
            "    enable_caching=True,",
            "    enable_kv_cache_events=False,",
            "    dcp_world_size=1,",
            "    pcp_world_size=1,",
            f"    scheduler_block_size={scheduler_bs},",
            f"    hash_block_size={setting.hash_block_size},",
            f"    allow_partial_hash_hits={setting.allow_partial_hash_hits},",
            ")",
            "pool = coordinator.block_pool",
            "for (group_id, index), block in zip(cached, pool.get_new_blocks(len(cached)), strict=True):",
            "    key = make_block_hash_with_group_id(hashes[index], group_id)",
            "    pool.cached_block_hash_to_block.insert(key, block)",
            f"_blocks, hit, _uncached_prefix = coordinator.find_longest_cache_hit(hashes, {max_length})",
        ]
        imports = [
            import_line(S.GET_KV_CACHE_COORDINATOR),
            import_line(S.BLOCK_HASH, S.MAKE_BLOCK_HASH_WITH_GROUP_ID),
        ]
    else:
        lines += [
            "coordinator = MooncakeStoreCoordinator(",
            "    groups,",
            f"    scheduler_block_size={scheduler_bs},",
            f"    hash_block_size={setting.hash_block_size},",
            f"    use_eagle={setting.use_eagle},",
            *([] if partial_hash_hits is None else [f"    enable_partial_hash_hits={partial_hash_hits},"]),
            ")",
            f"pool = ExternalCachedBlockPool({setting.hash_block_size}, {{(g, bytes(hashes[i])) for g, i in cached}})",
            f"_masks, hit = coordinator.find_longest_cache_hit(hashes, {max_length}, pool)",
        ]
        imports = [
            import_line(S.EXTERNAL_CACHED_BLOCK_POOL, S.MOONCAKE_COORDINATOR, wrapped=True),
            import_line(S.BLOCK_HASH),
        ]
    lines += [f"# {reason}", f"assert hit == {expected_hit}"]
    interface = [SPEC_SYMBOLS[kind] for kind in {g.kind for g in setting.groups}]
    interface += [S.KV_CACHE_GROUP_SPEC] + ([S.KV_CACHE_CONFIG] if path == "core" else [])
    interface += [S.KV_CACHE_GROUP_ROLE] if any(g.hisparse_source for g in setting.groups) else []
    source = "\n".join(
        ["import hashlib", "", "import torch", "", *imports]
        + [import_line(*sorted(interface, key=lambda symbol: symbol.name)), "", ""]
        + [f"def {test_name(name or reason)}():"]
        + [f"    {line}" for line in lines]
    )
    return source + "\n"
