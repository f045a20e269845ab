"""The Mooncake store's write side on real vLLM: which blocks each save of a request puts, as
vLLM's own ``MooncakeStoreCoordinator.store_mask`` marks them.

Driven the way the store's worker drives it (mooncake/store/worker.py:_handle_request): the
coordinator the connector builds (``from_kv_cache_config``: the groups, the engine's scheduler
block and hash unit, the EAGLE drop, the core's partial-hit decision, no retention interval, the
KV-cache config's default), then, per save, ``store_mask(checkpoint_len, save_start,
num_prompt_tokens=...)`` with ``checkpoint_len`` the computed tokens rounded down to the
scheduler block and ``save_start`` the previous save's end. The worker puts, per group, the
blocks of the range the mask marks; kvspec reads them off the mask (spec/stores.py:stored_blocks).
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.setting import LookupSetting
from kvspec.spec.stores import StoreSave

# A mask per group: a tuple of booleans, or None for "every block of the range" (vLLM's sentinel).
Masks = tuple[tuple[bool, ...] | None, ...]


def mooncake_store_masks(
    adapter: VllmAdapter, setting: LookupSetting, saves: tuple[StoreSave, ...], num_prompt_tokens: int
) -> list[Masks]:
    """vLLM's store masks for each save of a request with ``num_prompt_tokens`` prompt tokens,
    in order, from one coordinator (the worker keeps one for the connector's life)."""
    coordinator, _ = adapter._mooncake_coordinator(setting)  # the store's coordinator, as the lookups build it
    store_mask = resolve(S.MOONCAKE_STORE_MASK)
    return [
        tuple(
            None if mask is None else tuple(bool(b) for b in mask)
            for mask in store_mask(coordinator, save.end, save.start, num_prompt_tokens=num_prompt_tokens)
        )
        for save in saves
    ]
