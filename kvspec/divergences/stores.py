"""Where a store-side divergence happens (kvspec/gate/stores.py), named by its cause in vLLM's
rules: a one-token window (store_mask keeps the run of cdiv(W - 1, block) = 0 blocks its lookup
asks for, yet the lookup wants one cached block at the end of the run), chunked local attention
(store_mask keeps every block, but a hit at a block boundary never reads the block that ends a
local chunk), EAGLE (a group whose boundary hit the store's own lookup cannot return, after its
drop and re-alignment, keeps the blocks of that tail), else the groups' kinds."""

from __future__ import annotations

from kvspec.spec.layers import FULL_ATTENTION_KINDS, Kind
from kvspec.spec.setting import LookupSetting


def store_where(setting: LookupSetting, blocks: dict[int, frozenset[int]]) -> str:
    """The situation of a store that differs from the reference in the groups of ``blocks``."""
    groups = [setting.groups[gid] for gid in sorted(blocks)]
    if any(g.kind == Kind.SLIDING_WINDOW and g.window == 1 for g in groups):
        cause = "one-token window"
    elif any(g.kind == Kind.CHUNKED_LOCAL for g in groups):
        cause = "chunked local"
    elif setting.use_eagle:
        cause = "EAGLE"
    else:
        cause = ", ".join(sorted({g.kind.value for g in groups}))
    return f"mooncake store: {cause}"


def offload_store_where(
    setting, blocks: dict[int, frozenset[int]], kind: str, num_prompt_tokens: int | None = None
) -> str:
    """The situation of an OffloadingConnector store that differs from the reference in the
    groups of ``blocks``: a window stored whole because the connector's alignment is None or not
    a multiple of its block (SchedulerOffloadConfig.from_spec: one full-attention chunk size, else
    the largest chunk when there is no full attention; SlidingWindowManager.reachable_block_mask
    then marks every block), a window's tail kept for a hit that another group's chunk, which
    does not divide that alignment, rules out, an EAGLE window's first chunk kept as the proof of
    a hit of 0 (the prompt's replay boundary, ``num_prompt_tokens - 1``, aligns down to 0 and the
    mask's EAGLE shift keeps the block after it), a one-token window, chunked local attention, a
    sliding window's chunks never stored away from the prompt's replay boundary (vLLM's default
    retention interval 0 keeps only that tail), else EAGLE or the kinds."""
    groups = [setting.groups[gid] for gid in sorted(blocks)]
    per = setting.blocks_per_chunk
    full = {g.block_size * per for g in setting.groups if g.kind in FULL_ATTENTION_KINDS}
    alignment = next(iter(full)) if len(full) == 1 else None if full else max(g.block_size * per for g in setting.groups)
    whole = [g for g in groups if g.kind == Kind.SLIDING_WINDOW and (alignment is None or alignment % g.block_size)]
    coarser = alignment is not None and any(alignment % (g.block_size * per) for g in setting.groups)
    if kind == "store-unread" and whole:
        cause = "window stored whole, no alignment of its block"
    elif kind == "store-unread" and coarser and any(g.kind == Kind.SLIDING_WINDOW for g in groups):
        cause = "window tail for a hit a coarser group rules out"
    elif kind == "store-unread" and _proof_of_a_zero_hit(setting, blocks, alignment, num_prompt_tokens):
        cause = "EAGLE window tail at a replay boundary aligned to 0"
    elif any(g.kind == Kind.SLIDING_WINDOW and g.window == 1 for g in groups):
        cause = "one-token window"
    elif any(g.kind == Kind.CHUNKED_LOCAL for g in groups):
        cause = "chunked local"
    elif kind == "store-incomplete" and any(g.kind == Kind.SLIDING_WINDOW for g in groups):
        cause = "window tail kept only at the replay boundary"
    elif setting.use_eagle:
        cause = "EAGLE"
    else:
        cause = ", ".join(sorted({g.kind.value for g in groups}))
    return f"offloading store: {cause}"


def _proof_of_a_zero_hit(setting, blocks: dict[int, frozenset[int]], alignment, num_prompt_tokens) -> bool:
    """Whether every unread chunk is chunk 0 of an EAGLE window whose one reachable boundary, the
    prompt's replay boundary, aligns down to 0: SlidingWindowManager.reachable_block_mask keeps
    the ``need`` blocks ending one block past the aligned boundary (``shift`` 1 with EAGLE), that
    is block 0, the proof of a hit no lookup returns."""
    if num_prompt_tokens is None or alignment is None or num_prompt_tokens - 1 >= alignment:
        return False
    return all(
        chunks == {0} and setting.groups[gid].kind == Kind.SLIDING_WINDOW and setting.groups[gid].is_eagle_group
        for gid, chunks in blocks.items()
    )
