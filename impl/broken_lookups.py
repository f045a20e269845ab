"""Known prefix-cache lookup bugs, put back into real vLLM in memory (impl/patching.py).

Each function takes the adapter, patches one vLLM function and returns the undo. Most are
vLLM's own function recompiled with one or a few text edits, so the code around the bug stays
exactly the release's; the rest wrap vLLM's finder and change its answer the way the report
describes.
"""

from __future__ import annotations

from kvspec.impl import vllm_symbols as S
from kvspec.impl.patching import Undo, edit, install
from kvspec.impl.vllm_symbols import raw, resolve

# The gate that keeps the EAGLE peek margin away from Mamba, in both coordinators (#49502).
MAMBA_MARGIN_GATE = "if drop_eagle_block and not isinstance(spec, MambaSpec):"


# --------------------------------------------------------------------- coordinators' loops
def mamba_margin_in_mooncake(adapter) -> Undo:
    """MooncakeStoreCoordinator._find_hit_blocks without its Mamba gate: a Mamba group gets
    the EAGLE peek margin, and its finder (which never drops) matches past the candidate."""
    return edit(S.MOONCAKE_FIND_HIT_BLOCKS, [(MAMBA_MARGIN_GATE, "if drop_eagle_block:")])


def mamba_margin_in_core(adapter) -> Undo:
    """HybridKVCacheCoordinator.find_longest_cache_hit without its Mamba gate."""
    return edit(S.HYBRID_FIND, [(MAMBA_MARGIN_GATE, "if drop_eagle_block:")])


def later_group_raises_prefix(adapter) -> Undo:
    """Each group of a pass is looked up at the pass's starting candidate instead of the
    running one, so a later group's longer hit replaces an earlier group's shorter one."""
    return edit(
        S.HYBRID_FIND,
        [("_max_length = curr_hit_length\n", "_max_length = hit_length\n")],
    )


def loop_stops_after_one_pass(adapter) -> Undo:
    """Every hybrid is treated as the simple one (full attention + one other type), so the
    fixed-point loop stops after one pass even when a later group shrank the candidate below
    what an earlier non-full group verified."""
    return edit(
        S.HYBRID_FIND,
        [("is_simple_hybrid = len(", "is_simple_hybrid = True or len(")],
    )


def eagle_drop_every_pass(adapter) -> Undo:
    """The loop as it stood before #33270: every pass re-applies each EAGLE group's drop to
    the running candidate, with no peek margin to compensate and no one-pass exit, so the
    common hit loses a block per pass down to zero."""
    return edit(
        S.HYBRID_FIND,
        [
            ("drop_eagle_block = use_eagle and idx not in eagle_verified", "drop_eagle_block = use_eagle"),
            (MAMBA_MARGIN_GATE, "if False:"),
            ("is_simple_hybrid = len(", "is_simple_hybrid = False and len("),
        ],
    )


# --------------------------------------------------------------------------- finders
def mamba_peek_margin(adapter) -> Undo:
    """MambaManager's finder, when a coordinator asks it to drop (it never drops), looks one
    EAGLE proof margin further than the attention-verified candidate: what a missing
    ``not isinstance(spec, MambaSpec)`` gate does, in both coordinators at once."""
    eagle_proof_margin = resolve(S.EAGLE_PROOF_MARGIN)
    original = raw(S.MAMBA_FIND).__func__

    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, drop_eagle_block, alignment_tokens, *args, **kwargs):
        if drop_eagle_block:
            hash_bs = block_pool.hash_block_size
            fine = alignment_tokens < kv_cache_spec.block_size
            margin = eagle_proof_margin(kv_cache_spec.block_size, hash_bs, fine)
            max_length = min(max_length + margin, len(block_hashes) * hash_bs)
        return original(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                        kv_cache_spec, drop_eagle_block, alignment_tokens, *args, **kwargs)

    return install(S.MAMBA_FIND, classmethod(find_longest_cache_hit))


def mamba_drops_a_block(adapter) -> Undo:
    """MambaManager honours the EAGLE drop like attention: it resumes one state earlier than
    the state it found, a state that was never checkpointed there."""
    original = raw(S.MAMBA_FIND).__func__

    def find_longest_cache_hit(cls, *args, **kwargs):
        blocks, hit = original(cls, *args, **kwargs)
        drop = kwargs.get("drop_eagle_block", args[5] if len(args) > 5 else False)
        if drop and hit > 0:
            spec = kwargs.get("kv_cache_spec", args[4] if len(args) > 4 else None)
            hit = max(0, hit - spec.block_size)
            blocks = tuple(group[: -(-hit // spec.block_size)] for group in blocks)
        return blocks, hit

    return install(S.MAMBA_FIND, classmethod(find_longest_cache_hit))


def mamba_ignores_checkpoint_alignment(adapter) -> Undo:
    """MambaManager's block-grid search takes the rightmost cached state even where it does
    not end on the hit alignment (the align-mode checkpoint rule is skipped)."""
    return edit(
        S.MAMBA_FIND,
        [("and (i + 1) * block_size % alignment_tokens != 0", "and False")],
    )


def sliding_window_eagle_short_run(adapter) -> Undo:
    """SlidingWindowManager drops the EAGLE block without first matching one more contiguous
    block, so after the drop the window is one block short (the finder before #17398)."""
    return edit(
        S.SLIDING_WINDOW_FIND,
        [
            (
                "kv_cache_spec.sliding_window, kv_cache_spec.block_size, drop_eagle_block",
                "kv_cache_spec.sliding_window, kv_cache_spec.block_size, False",
            )
        ],
    )


def sliding_window_short_run(adapter) -> Undo:
    """A sliding-window hit is accepted one block before the run covers the window, with or
    without EAGLE (the run length itself off by one)."""
    original = raw(S.SLIDING_WINDOW_RUN).__func__

    def contiguous_blocks_for_hit(cls, window_size, block_size, use_eagle):
        return max(original(cls, window_size, block_size, use_eagle) - 1, 0)

    return install(S.SLIDING_WINDOW_RUN, classmethod(contiguous_blocks_for_hit))


def margin_always_a_block(adapter) -> Undo:
    """The EAGLE proof margin ignores fine-grained lookups: always one whole block."""
    return install(S.EAGLE_PROOF_MARGIN, lambda block_size, hash_block_size, fine_grained_lookup: block_size)


# ------------------------------------------------------------- issue 15's kinds (spec/hits.py)
def circular_buffer_answers_minus_one(adapter) -> Undo:
    """CircularBufferManager.find_longest_cache_hit answers -1 instead of 0: the mutant the
    gate let through before the unitary circular-buffer lookup was drawn."""
    return edit(S.CIRCULAR_BUFFER_FIND, [("for _ in kv_cache_group_ids), 0", "for _ in kv_cache_group_ids), -1")])


def hybrid_looks_up_every_group(adapter) -> Undo:
    """HybridKVCacheCoordinator.verify_and_split_kv_cache_groups no longer skips the groups
    outside prefix caching: a circular buffer's finder (always 0) takes part and every hit
    beside it collapses to 0."""
    return edit(S.HYBRID_VERIFY_AND_SPLIT, [("if not g.kv_cache_spec.prefix_cacheable:", "if False:")])


def hisparse_source_trimmed(adapter) -> Undo:
    """HybridKVCacheCoordinator.find_longest_cache_hit trims HiSparse's host source to the
    reconciled hit like any full-attention group: the longer prefix its host tier kept is lost."""
    return edit(S.HYBRID_FIND, [("if manager.retains_longer_hit:", "if False:")])


def hisparse_source_merged_with_its_indexer(adapter) -> Undo:
    """HybridKVCacheCoordinator.verify_and_split_kv_cache_groups no longer compares manager
    classes: HiSparse's host source joins an indexer of an equal spec, looked up with the
    indexer's manager, and is trimmed with it (the mutant issue 15 found the gate let through)."""
    return edit(S.HYBRID_VERIFY_AND_SPLIT, [("and group.manager_cls is manager_cls", "and True")])
