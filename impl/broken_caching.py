"""Write-side bugs put back into real vLLM in memory (impl/patching.py): plausible wrong
behaviour in what a computed chunk leaves cached. Each loses hits rather than serving wrong KV,
so no read check sees it; the stateful check's write judge (kvspec/stateful/writes.py, rules of
spec/caching.py) must. Each function takes the adapter, recompiles one vLLM function with one
exact text edit, and returns the undo.
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.patching import Undo, edit

PUBLISHED = "what each step leaves cached equals spec/caching.py (kvspec/stateful/writes.py, reference/published.py)"


def window_keeps_one_block_too_few(adapter) -> Undo:
    """SlidingWindowManager.reachable_block_mask counts one block fewer per tail than a window
    hit needs, so under sparse retention (or a wide alignment) the first block of each tail is
    never cached and every later window hit at that boundary misses."""
    return edit(S.SLIDING_WINDOW_MASK, [("need = cls._contiguous_blocks_for_hit(",
                                         "need = -1 + cls._contiguous_blocks_for_hit(")])


def mamba_state_cached_one_block_late(adapter) -> Undo:
    """MambaManager.reachable_block_mask keeps the state one block past each reachable
    boundary instead of the one ending on it: the replay boundary's state is never cached."""
    return edit(S.MAMBA_MASK, [("boundary_block = aligned // block_size - 1",
                                "boundary_block = aligned // block_size")])


def last_full_block_never_cached(adapter) -> Undo:
    """BlockPool.cache_full_blocks skips the last block of every batch it is asked to cache,
    while the manager counts it as cached: the block that completes each chunk never is."""
    return edit(S.CACHE_FULL_BLOCKS, [("for i, blk in enumerate(new_full_blocks):",
                                       "for i, blk in enumerate(new_full_blocks[:-1]):")])


def freed_blocks_forget_their_keys(adapter) -> Undo:
    """BlockPool.free_blocks evicts a block's keys as soon as its last reference goes, so a
    finished or preempted request leaves nothing cached for the next one to hit."""
    return edit(S.FREE_BLOCKS, [("block.ref_cnt -= 1\n", "block.ref_cnt -= 1\n"
                                 "        if block.ref_cnt == 0 and not block.is_null:\n"
                                 "            self._maybe_evict_cached_block(block)\n")])
