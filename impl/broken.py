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
    caught_by: str  # the kvspec check expected to fail
    apply: Callable[[object], Callable[[], None]]  # patches vLLM, returns the undo


def _patch(owner, attribute: str, replacement) -> Callable[[], None]:
    original = owner.__dict__[attribute]
    setattr(owner, attribute, replacement)
    return lambda: setattr(owner, attribute, original)


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


VARIANTS = {
    v.name: v
    for v in (
        BrokenVariant(
            name="mamba-peek-margin",
            upstream="vLLM #43559 (fixed by #49502, regression test #48361)",
            wrong_behaviour="Mamba gets the EAGLE peek margin and resumes past the verified prefix",
            caught_by="seed: hybrid coordinator, seed: Mooncake store",
            apply=_grant_mamba_peek_margin,
        ),
        BrokenVariant(
            name="warning-without-mamba-gate",
            upstream="vLLM #52047 / #56791",
            wrong_behaviour="the unannotated-eagle warning fires on attention-only models",
            caught_by="warning gate",
            apply=_warn_without_mamba_gate,
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
