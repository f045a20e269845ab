"""Deliberately broken variants of real vLLM: the bug zoo that proves kvspec's checks bite.

Each variant re-introduces a wrong behaviour reported against vLLM by patching one vLLM
function in memory at run time (never an edited copy of vLLM's files) and undoes it on exit.
The patched function is the one the real regression touched; everything around it stays
vLLM's own code. The patches live in impl/broken_lookups.py, impl/broken_grouping.py,
impl/broken_offloading.py, impl/broken_connector_hits.py and impl/broken_caching.py (the write side); ``kvspec zoo`` (kvspec/tools/zoo.py) runs the gate against each.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from kvspec.gate.names import Check
from kvspec.impl import broken_caching as caching
from kvspec.impl import broken_connector_hits as connector_hits
from kvspec.impl import broken_grouping as grouping
from kvspec.impl import broken_lookups as lookups
from kvspec.impl import broken_offloading as offloading
from kvspec.impl import broken_stores as stores


@dataclass(frozen=True)
class BrokenVariant:
    name: str
    upstream: str  # the vLLM report the variant recreates, or "none reported: ..." for a plausible bug
    wrong_behaviour: str  # one line
    invariant: str  # the rule expected to catch it, and where kvspec states it
    caught_by: tuple[Check, ...]  # the kvspec checks expected to fail
    apply: Callable[[object], Callable[[], None]]  # patches vLLM, returns the undo


MAMBA_AT_THE_HIT = "a Mamba group resumes from the state at exactly the hit, never past it (spec/hits.py:group_unsafe_reason)"
REFERENCE_LOOKUP = "the hit equals the reference fixed point (reference/lookup.py)"
WARNING_RULE = "warns iff the EAGLE drop is on, no group is annotated and a group holds Mamba (spec/grouping_properties.py)"

_ALL = (
    # ------------------------------------------------ the Mamba peek margin (#43559)
    BrokenVariant(
        name="mamba-peek-margin-mooncake",
        upstream="vLLM #43559 (fixed by #49502, regression test #48361)",
        wrong_behaviour="the Mooncake store lookup grants Mamba the EAGLE peek margin and resumes past the verified prefix",
        invariant=MAMBA_AT_THE_HIT,
        caught_by=(Check.SEED_MOONCAKE, Check.LOOKUPS),
        apply=lookups.mamba_margin_in_mooncake,
    ),
    BrokenVariant(
        name="mamba-peek-margin-core",
        upstream="vLLM #43559 (fixed by #49502), in the core HybridKVCacheCoordinator",
        wrong_behaviour="the core hybrid coordinator grants Mamba the EAGLE peek margin and resumes past the verified prefix",
        invariant=MAMBA_AT_THE_HIT,
        caught_by=(Check.SEED_HYBRID, Check.LOOKUPS),
        apply=lookups.mamba_margin_in_core,
    ),
    BrokenVariant(
        name="mamba-peek-margin",
        upstream="vLLM #43559 (fixed by #49502, regression test #48361), via the Mamba finder",
        wrong_behaviour="Mamba gets the EAGLE peek margin in both coordinators and resumes past the verified prefix",
        invariant=MAMBA_AT_THE_HIT,
        caught_by=(Check.SEED_HYBRID, Check.SEED_MOONCAKE, Check.LOOKUPS),
        apply=lookups.mamba_peek_margin,
    ),
    BrokenVariant(
        name="eagle-margin-whole-block",
        upstream="vLLM #43559 (the margin's fine-grained unit, #49502)",
        wrong_behaviour="an EAGLE group with fine-grained lookups peeks a whole block, not one hash unit",
        invariant="the EAGLE margin is one hash unit when the group probes inside blocks (spec/resolution.py:eagle_proof_margin)",
        caught_by=(Check.BLOCK_SIZES,),
        apply=lookups.margin_always_a_block,
    ),
    # ------------------------------------------------ Mamba and the EAGLE drop (#53912)
    BrokenVariant(
        name="mamba-honours-eagle-drop",
        upstream="vLLM #53912",
        wrong_behaviour="Mamba drops a block under EAGLE and resumes from a state never saved there",
        invariant=f"{MAMBA_AT_THE_HIT}; {REFERENCE_LOOKUP}",
        caught_by=(Check.SEED_HYBRID, Check.LOOKUPS),
        apply=lookups.mamba_drops_a_block,
    ),
    BrokenVariant(
        name="mamba-ignores-checkpoint-alignment",
        upstream="vLLM #53912 (the align-mode checkpoint rule)",
        wrong_behaviour="Mamba resumes from a cached state that does not end on the hit alignment",
        invariant="every hit is a multiple of the hit alignment (spec/resolution.py:cache_hit_alignment)",
        caught_by=(Check.LOOKUPS,),
        apply=lookups.mamba_ignores_checkpoint_alignment,
    ),
    # ------------------------------------------------ the hybrid fixed-point loop
    BrokenVariant(
        name="hybrid-later-group-raises-prefix",
        upstream="vLLM #45614",
        wrong_behaviour="a later group's longer hit raises the common prefix an earlier group had lowered",
        invariant="the hit is safe for every group at the same length (spec/hits.py:unsafe_reason)",
        caught_by=(Check.SEED_HYBRID, Check.LOOKUPS),
        apply=lookups.later_group_raises_prefix,
    ),
    BrokenVariant(
        name="hybrid-loop-one-pass",
        upstream="vLLM #31707 (the fixed point for more than two attention types), undone",
        wrong_behaviour="the hybrid loop stops after one pass, before earlier groups re-verify the lowered candidate",
        invariant=f"the hit is safe for every group at the same length (spec/hits.py:unsafe_reason); {REFERENCE_LOOKUP}",
        caught_by=(Check.LOOKUPS,),
        apply=lookups.loop_stops_after_one_pass,
    ),
    BrokenVariant(
        name="hybrid-eagle-collapse",
        upstream="vLLM #33270",
        wrong_behaviour="with EAGLE the fixed point re-drops a block every pass and collapses the hit to zero",
        invariant=f"{REFERENCE_LOOKUP}: each EAGLE group drops once per candidate, after its peek margin",
        caught_by=(Check.LOOKUPS,),
        apply=lookups.eagle_drop_every_pass,
    ),
    # ------------------------------------------------ sliding window and EAGLE (#17398)
    BrokenVariant(
        name="sliding-window-eagle-short-run",
        upstream="vLLM #17398",
        wrong_behaviour="with EAGLE a sliding-window hit drops its last block without matching one more, one block short",
        invariant="a sliding-window group holds KV for its whole window before the hit (spec/hits.py:group_unsafe_reason)",
        caught_by=(Check.LOOKUPS,),
        apply=lookups.sliding_window_eagle_short_run,
    ),
    BrokenVariant(
        name="sliding-window-short-run",
        upstream="vLLM #17398 (the run length, with or without EAGLE)",
        wrong_behaviour="a sliding-window hit is taken with one block of the window missing",
        invariant="a sliding-window group holds KV for its whole window before the hit (spec/hits.py:group_unsafe_reason)",
        # The stateful check catches it too (tests/test_cache_machine.py), more slowly.
        caught_by=(Check.LOOKUPS,),
        apply=lookups.sliding_window_short_run,
    ),
    # ------------------------------------------------ the unannotated-EAGLE warning
    BrokenVariant(
        name="warning-without-mamba-gate",
        upstream="vLLM #56791 / #52047",
        wrong_behaviour="the unannotated-eagle warning fires on attention-only models (its Mamba gate removed)",
        invariant=WARNING_RULE,
        caught_by=(Check.WARNING_GATE, Check.GROUPING),
        apply=grouping.warn_without_mamba_gate,
    ),
    BrokenVariant(
        name="warning-gate-inverted",
        upstream="vLLM #56791 / #52047",
        wrong_behaviour="the warning's Mamba gate is inverted: silent on a Mamba hybrid, warning on attention only",
        invariant=WARNING_RULE,
        caught_by=(Check.WARNING_GATE, Check.GROUPING),
        apply=grouping.warning_gate_inverted,
    ),
    BrokenVariant(
        name="warning-silent-with-mamba",
        upstream="vLLM #56791",
        wrong_behaviour="the unannotated-eagle warning stays silent on a Mamba hybrid",
        invariant=WARNING_RULE,
        caught_by=(Check.WARNING_GATE, Check.GROUPING),
        apply=grouping.never_warn,
    ),
    # ------------------------------------------------ the group-size rule (#51742)
    BrokenVariant(
        name="group-size-one-per-layer",
        upstream="vLLM #51742",
        wrong_behaviour="the group-size rule splits every layer of a hybrid model into its own group",
        invariant="each bucket is cut into ceil(layers / group size) groups (spec/grouping_properties.py); reference/grouping.py",
        caught_by=(Check.GROUPING,),
        apply=grouping.one_layer_per_group,
    ),
    BrokenVariant(
        name="group-size-always-smallest",
        upstream="vLLM #51742 (the 1.5x exception lost)",
        wrong_behaviour="the group size is always the smallest bucket's, never the largest's",
        invariant="each bucket is cut into ceil(layers / group size) groups (spec/grouping_properties.py); reference/grouping.py",
        caught_by=(Check.GROUPING,),
        apply=grouping.always_smallest_bucket,
    ),
    # ------------------------------------------------ the issue-15 kinds' merges (none reported)
    BrokenVariant(
        name="rswa-merges-any-window",
        upstream="none reported: RSWASpec.merge without its window check",
        wrong_behaviour="R-SWA layers of different windows merge into one spec",
        invariant="RSWASpec.merge takes R-SWA layers of one window only (spec/grouping.py:merge_failure); reference/grouping.py",
        caught_by=(Check.GROUPING,),
        apply=grouping.rswa_merges_any_window,
    ),
    BrokenVariant(
        name="full-merge-refuses-subclasses",
        upstream="none reported: FullAttentionSpec.merge by exact class",
        wrong_behaviour="a full-attention layer no longer merges with an R-SWA or sink layer",
        invariant="FullAttentionSpec.merge takes every non-MLA FullAttentionSpec (spec/grouping.py:merge_failure); reference/grouping.py",
        caught_by=(Check.GROUPING,),
        apply=grouping.full_merge_refuses_subclasses,
    ),
    BrokenVariant(
        name="circular-buffer-uniform-with-any-attention",
        upstream="none reported: CircularBufferSpec.is_uniform_with_collection too wide",
        wrong_behaviour="a ring layer shares a uniform-type group with any attention layer",
        invariant="a circular-buffer layer is one type only with other circular-buffer layers (spec/grouping.py:one_uniform_type)",
        caught_by=(Check.GROUPING,),
        apply=grouping.circular_buffer_uniform_with_any_attention,
    ),
    BrokenVariant(
        name="cross-attention-probes-inside-blocks",
        upstream="none reported: the fine-grained test passes CrossAttentionManager",
        wrong_behaviour="cross attention counts as probing inside its blocks, so hits align to the hash unit",
        invariant="hits align to the hash unit only if every prefix-cacheable group probes inside blocks or has blocks of one unit (spec/resolution.py:partial_hash_hits_enabled)",
        caught_by=(Check.BLOCK_SIZES,),
        apply=grouping.cross_attention_probes_inside_blocks,
    ),
    # ------------------------------------------------ the offloading connector (#52735)
    BrokenVariant(
        name=offloading.NAME,
        upstream=f"{offloading.UPSTREAM} (fixed by #52771)",
        wrong_behaviour=offloading.WRONG_BEHAVIOUR,
        invariant=offloading.INVARIANT,
        caught_by=offloading.CAUGHT_BY,
        apply=offloading.flag_all_groups_when_unannotated,
    ),
    BrokenVariant(
        name=offloading.BOUND_NAME,
        upstream=offloading.BOUND_UPSTREAM,
        wrong_behaviour=offloading.BOUND_WRONG_BEHAVIOUR,
        invariant=offloading.BOUND_INVARIANT,
        caught_by=offloading.CAUGHT_BY,
        apply=offloading.bound_by_the_first_group_left_out,
    ),
    # ------------------------------------------------ the write side: what a chunk leaves cached
    BrokenVariant(
        name="window-keeps-one-block-too-few",
        upstream="none reported: a plausible write-side bug, the sliding-window retention mask one block short",
        wrong_behaviour="a sliding-window group caches one block fewer per reachable tail than a hit needs",
        invariant=caching.PUBLISHED,
        caught_by=(Check.STATEFUL,),
        apply=caching.window_keeps_one_block_too_few,
    ),
    BrokenVariant(
        name="mamba-state-cached-one-block-late",
        upstream="none reported: a plausible write-side bug, the Mamba retention mask off by one block",
        wrong_behaviour="under a retention interval Mamba caches the state one block past each reachable boundary",
        invariant=caching.PUBLISHED,
        caught_by=(Check.STATEFUL,),
        apply=caching.mamba_state_cached_one_block_late,
    ),
    BrokenVariant(
        name="last-full-block-never-cached",
        upstream="none reported: a plausible write-side bug, cache_full_blocks off by one",
        wrong_behaviour="the block that completes each chunk is counted as cached but never cached",
        invariant=caching.PUBLISHED,
        caught_by=(Check.STATEFUL,),
        apply=caching.last_full_block_never_cached,
    ),
    BrokenVariant(
        name="freed-blocks-forget-their-keys",
        upstream="none reported: a plausible write-side bug, freeing evicts a block's cached keys",
        wrong_behaviour="a block freed by a finished or preempted request loses its keys before it is reused",
        invariant=caching.PUBLISHED,
        caught_by=(Check.STATEFUL,),
        apply=caching.freed_blocks_forget_their_keys,
    ),
    # ------------------------------------------------ the store sides: what a request writes to a store
    BrokenVariant(
        name=stores.NAME,
        upstream=stores.UPSTREAM,
        wrong_behaviour=stores.WRONG_BEHAVIOUR,
        invariant=stores.INVARIANT,
        caught_by=stores.CAUGHT_BY,
        apply=stores.mamba_states_put_positionally,
    ),
    BrokenVariant(
        name=stores.OFFLOAD_NAME,
        upstream=stores.OFFLOAD_UPSTREAM,
        wrong_behaviour=stores.OFFLOAD_WRONG_BEHAVIOUR,
        invariant=stores.OFFLOAD_INVARIANT,
        caught_by=stores.CAUGHT_BY,
        apply=stores.offloading_stores_unheld_chunk,
    ),
    # ------------------------------------------------ the lookup for a request scheduled with a connector
    BrokenVariant(
        name=connector_hits.FLAG_NAME,
        upstream=connector_hits.FLAG_UPSTREAM,
        wrong_behaviour=connector_hits.FLAG_WRONG_BEHAVIOUR,
        invariant=connector_hits.FLAG_INVARIANT,
        caught_by=connector_hits.CAUGHT_BY,
        apply=connector_hits.flag_never_set,
    ),
    BrokenVariant(
        name=connector_hits.CLAMP_NAME,
        upstream=connector_hits.CLAMP_UPSTREAM,
        wrong_behaviour=connector_hits.CLAMP_WRONG_BEHAVIOUR,
        invariant=connector_hits.CLAMP_INVARIANT,
        caught_by=connector_hits.CAUGHT_BY,
        apply=connector_hits.hits_clamped_to_full_attention,
    ),
    BrokenVariant(
        name=connector_hits.SIMPLE_NAME,
        upstream=connector_hits.SIMPLE_UPSTREAM,
        wrong_behaviour=connector_hits.SIMPLE_WRONG_BEHAVIOUR,
        invariant=connector_hits.SIMPLE_INVARIANT,
        caught_by=connector_hits.SIMPLE_CAUGHT_BY,
        apply=connector_hits.matched_counts_the_local_prefix,
    ),
    # ------------------------------------------------ issue 15's kinds in the lookups
    BrokenVariant(
        name="circular-buffer-hit-minus-one",
        upstream="none reported: the surviving mutant of issue 15 (CircularBufferManager.find_longest_cache_hit)",
        wrong_behaviour="a circular buffer looked up alone answers a hit of -1 instead of 0",
        invariant="a hit lies in [0, M] (spec/hits.py:target_unsafe_reason)",
        caught_by=(Check.LOOKUPS,),
        apply=lookups.circular_buffer_answers_minus_one,
    ),
    BrokenVariant(
        name="hybrid-looks-up-scratch-groups",
        upstream="none reported: the prefix_cacheable skip of HybridKVCacheCoordinator.verify_and_split_kv_cache_groups removed",
        wrong_behaviour="a circular-buffer group takes part in the hybrid lookup and every hit beside it is 0",
        invariant=REFERENCE_LOOKUP,
        caught_by=(Check.LOOKUPS, Check.STATEFUL),
        apply=lookups.hybrid_looks_up_every_group,
    ),
    BrokenVariant(
        name="hisparse-source-trimmed",
        upstream="none reported: the retains_longer_hit skip of HybridKVCacheCoordinator.find_longest_cache_hit removed",
        wrong_behaviour="HiSparse's host source keeps only the reconciled hit's blocks, not its own longer hit",
        invariant=REFERENCE_LOOKUP,
        caught_by=(Check.LOOKUPS,),
        apply=lookups.hisparse_source_trimmed,
    ),
    BrokenVariant(
        name="hisparse-source-merged-with-its-indexer",
        upstream="none reported: the surviving mutant of issue 15 (verify_and_split_kv_cache_groups without the manager-class test)",
        wrong_behaviour="HiSparse's host source shares a spec group with an equal-spec indexer and loses its own manager",
        invariant=REFERENCE_LOOKUP,
        caught_by=(Check.LOOKUPS,),
        apply=lookups.hisparse_source_merged_with_its_indexer,
    ),
)

VARIANTS: dict[str, BrokenVariant] = {v.name: v for v in _ALL}


@contextmanager
def applied(adapter, names: list[str]) -> Iterator[None]:
    """vLLM with the named variants in place, each undone on exit (last applied, first undone)."""
    undo: list[Callable[[], None]] = []
    try:
        for name in names:
            undo.append(VARIANTS[name].apply(adapter))
        yield
    finally:
        for restore in reversed(undo):
            restore()
