"""Deliberately broken variants of real vLLM, to prove that kvspec's checks bite.

Each variant re-introduces a known wrong behaviour at run time by patching one vLLM function
in memory (never an edited copy of vLLM's files) and undoes it on exit. The patched function
is the one a real regression would touch; everything around it stays vLLM's own code.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True)
class BrokenVariant:
    name: str
    upstream: str  # the vLLM report the variant recreates
    wrong_behaviour: str
    caught_by: tuple[str, ...]  # the kvspec checks expected to fail
    apply: Callable[[object], Callable[[], None]]  # patches vLLM, returns the undo


def _patch(owner, attribute: str, replacement) -> Callable[[], None]:
    original = owner.__dict__[attribute]
    setattr(owner, attribute, replacement)
    return lambda: setattr(owner, attribute, original)


def _patch_everywhere(original, replacement) -> Callable[[], None]:
    """Replace a function in every loaded vLLM module that imported it by name."""
    import sys  # noqa: PLC0415

    owners = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("vllm") and getattr(module, original.__name__, None) is original
    ]
    undo = [_patch(module, original.__name__, replacement) for module in owners]
    return lambda: [restore() for restore in reversed(undo)]


def _margin_always_a_block(adapter) -> Callable[[], None]:
    """The EAGLE proof margin ignores fine-grained lookups: always one whole block."""
    from vllm.v1.core import kv_cache_utils  # noqa: PLC0415

    return _patch_everywhere(
        kv_cache_utils.eagle_proof_margin,
        lambda block_size, hash_block_size, fine_grained_lookup: block_size,
    )


def _grant_mamba_peek_margin(adapter) -> Callable[[], None]:
    """MambaManager's finder, when a coordinator asks it to drop (it never drops), looks one
    EAGLE proof margin further than the attention-verified candidate: exactly what a missing
    ``not isinstance(spec, MambaSpec)`` gate in the coordinators does."""
    from vllm.v1.core.kv_cache_utils import eagle_proof_margin  # noqa: PLC0415
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager  # noqa: PLC0415

    original = MambaManager.__dict__["find_longest_cache_hit"].__func__

    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                               kv_cache_spec, drop_eagle_block, alignment_tokens, *args, **kwargs):
        if drop_eagle_block:
            hash_bs = block_pool.hash_block_size
            fine = alignment_tokens < kv_cache_spec.block_size
            margin = eagle_proof_margin(kv_cache_spec.block_size, hash_bs, fine)
            max_length = min(max_length + margin, len(block_hashes) * hash_bs)
        return original(cls, block_hashes, max_length, kv_cache_group_ids, block_pool,
                        kv_cache_spec, drop_eagle_block, alignment_tokens, *args, **kwargs)

    return _patch(MambaManager, "find_longest_cache_hit", classmethod(find_longest_cache_hit))


def _warn_without_mamba_gate(adapter) -> Callable[[], None]:
    """The unannotated-eagle warning fires whenever no group is annotated, Mamba or not."""
    planning = adapter._planning
    message = (
        "Speculative decoding (method=%s) is enabled but no KV cache group "
        "could be identified as the draft model's."
    )

    def warn(spec_config, kv_cache_groups):
        if not any(group.is_eagle_group for group in kv_cache_groups):
            planning.logger.warning(message, spec_config.method)

    return _patch(planning, "_warn_if_unannotated_eagle_mamba", warn)


def _mamba_drops_a_block(adapter) -> Callable[[], None]:
    """MambaManager honours the EAGLE drop like attention: it resumes one state earlier than
    the state it found, a state that was never checkpointed there."""
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager  # noqa: PLC0415

    original = MambaManager.__dict__["find_longest_cache_hit"].__func__

    def find_longest_cache_hit(cls, *args, **kwargs):
        blocks, hit = original(cls, *args, **kwargs)
        drop = kwargs.get("drop_eagle_block", args[5] if len(args) > 5 else False)
        if drop and hit > 0:
            spec = kwargs.get("kv_cache_spec", args[4] if len(args) > 4 else None)
            hit = max(0, hit - spec.block_size)
            blocks = tuple(group[: -(-hit // spec.block_size)] for group in blocks)
        return blocks, hit

    return _patch(MambaManager, "find_longest_cache_hit", classmethod(find_longest_cache_hit))


def _never_warn(adapter) -> Callable[[], None]:
    """The unannotated-eagle warning never fires, Mamba or not."""
    return _patch(adapter._planning, "_warn_if_unannotated_eagle_mamba", lambda spec_config, groups: None)


def _always_smallest_bucket(adapter) -> Callable[[], None]:
    """The group-size rule loses its 1.5x exception: every bucket is split to the smallest
    bucket's size (vLLM's strided split and padding warning otherwise kept)."""
    planning = adapter._planning

    def get_groups_uniform_page_size(kv_cache_spec):
        buckets: dict = {}
        for name, spec in kv_cache_spec.items():
            buckets.setdefault(spec, []).append(name)
        size = min(map(len, buckets.values()))
        grouped = []
        for names in buckets.values():
            if len(names) % size:
                padding = size - len(names) % size
                planning.logger.warning(
                    "Add %d padding layers, may waste at most %.2f%% KV cache memory",
                    padding,
                    padding / len(names) * 100,
                )
            k = -(-len(names) // size)
            grouped += [names[i::k] for i in range(k)]
        return planning.create_kv_cache_group_specs(kv_cache_spec, grouped)

    return _patch(planning, "_get_kv_cache_groups_uniform_page_size", get_groups_uniform_page_size)


def _short_sliding_window_run(adapter) -> Callable[[], None]:
    """A sliding-window hit is accepted one block before the run covers the window."""
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: PLC0415

    original = SlidingWindowManager.__dict__["_contiguous_blocks_for_hit"].__func__

    def contiguous_blocks_for_hit(cls, window_size, block_size, use_eagle):
        return max(original(cls, window_size, block_size, use_eagle) - 1, 0)

    return _patch(SlidingWindowManager, "_contiguous_blocks_for_hit", classmethod(contiguous_blocks_for_hit))


VARIANTS = {
    v.name: v
    for v in (
        BrokenVariant(
            name="mamba-peek-margin",
            upstream="vLLM #43559 (fixed by #49502, regression test #48361)",
            wrong_behaviour="Mamba gets the EAGLE peek margin and resumes past the verified prefix",
            caught_by=("seed: hybrid coordinator", "seed: Mooncake store", "prefix-cache lookups"),
            apply=_grant_mamba_peek_margin,
        ),
        BrokenVariant(
            name="mamba-honours-eagle-drop",
            upstream="vLLM #53912",
            wrong_behaviour="Mamba drops a block under EAGLE and resumes from a state never saved there",
            caught_by=("seed: hybrid coordinator", "prefix-cache lookups"),
            apply=_mamba_drops_a_block,
        ),
        BrokenVariant(
            name="warning-without-mamba-gate",
            upstream="vLLM #52047 / #56791",
            wrong_behaviour="the unannotated-eagle warning fires on attention-only models",
            caught_by=("warning gate", "grouping"),
            apply=_warn_without_mamba_gate,
        ),
        BrokenVariant(
            name="warning-silent-with-mamba",
            upstream="vLLM #56791",
            wrong_behaviour="the unannotated-eagle warning stays silent on a Mamba hybrid",
            caught_by=("warning gate", "grouping"),
            apply=_never_warn,
        ),
        BrokenVariant(
            name="group-size-always-smallest",
            upstream="vLLM #51742",
            wrong_behaviour="the group size is always the smallest bucket's, never the largest's",
            caught_by=("grouping",),
            apply=_always_smallest_bucket,
        ),
        BrokenVariant(
            name="eagle-margin-whole-block",
            upstream="vLLM #43559 (the margin's fine-grained unit)",
            wrong_behaviour="an EAGLE group with fine-grained lookups peeks a whole block, not one hash unit",
            caught_by=("block sizes",),
            apply=_margin_always_a_block,
        ),
        BrokenVariant(
            name="sliding-window-short-run",
            upstream="vLLM #17398",
            wrong_behaviour="a sliding-window hit is taken with one block of the window missing",
            # The stateful check catches it too (tests/test_cache_machine.py), more slowly.
            caught_by=("prefix-cache lookups",),
            apply=_short_sliding_window_run,
        ),
    )
}


@contextmanager
def applied(adapter, names: list[str]) -> Iterator[None]:
    undo = [VARIANTS[name].apply(adapter) for name in names]
    try:
        yield
    finally:
        for restore in reversed(undo):
            restore()
