"""The OffloadingConnector's half of the store sides (kvspec/gate/stores.py): what real vLLM's
connector scheduler stores for a request (impl/offloading_stores.py), judged by
spec/offloading_stores.py and against reference/offloading_stores.py, on the offloading
lookups' draws split into one to four steps (kvspec/draws/offloading_stores.py). A chunk stored
that the request has not computed fails; a chunk a later lookup reads that is never stored, or
one stored that no later lookup reads, is a divergence filed under its cause."""

from __future__ import annotations

from collections import Counter

from hypothesis import reject

from kvspec.divergences.known import Observed
from kvspec.divergences.stores import offload_store_where
from kvspec.emit.describe import ranges
from kvspec.gate.offloading import offloading_takes_its_eagle_mode
from kvspec.impl.offloading_stores import offloading_stored_chunks
from kvspec.oracles.invariants import require_none
from kvspec.oracles.offloading_stores import compare_offload_store, offload_store_violations
from kvspec.oracles.stores import StoreComparison
from kvspec.reference.offloading_stores import needed_chunks
from kvspec.spec.offloading_stores import OffloadStoreCase

OFFLOAD_STORE_EXAMPLES = 1000


def offloading_store_conforms(adapter, case: OffloadStoreCase) -> StoreComparison:
    """vLLM's store steps store only chunks the request has computed; what they store, against
    the reference."""
    if not offloading_takes_its_eagle_mode(adapter, case.setting):
        reject()
    stored = offloading_stored_chunks(adapter, case.setting, case.saves, case.num_prompt_tokens,
                                      ends_in_error=case.ends_in_error)
    require_none(offload_store_violations(case, stored), f"{describe_offload_store(case)}; stored per step {stored}")
    return compare_offload_store(case, stored, needed_chunks(case.setting, case.computed_tokens))


def observe_offload_store(observed: Observed, case: OffloadStoreCase, comparison: StoreComparison) -> None:
    size = (len(case.setting.groups), case.computed_tokens, len(case.saves))
    for kind, chunks in (("store-incomplete", comparison.gaps), ("store-unread", comparison.unread)):
        if not chunks:
            continue
        text = "; ".join(f"group {gid} chunks {ranges(c)}" for gid, c in sorted(chunks.items()))
        verb = "never stored" if kind == "store-incomplete" else "stored, read by no later lookup"
        observed.add(kind, offload_store_where(case.setting, chunks, kind, case.num_prompt_tokens), size,
                     f"{describe_offload_store(case)}; {verb}: {text}", replay=(case, chunks))


def describe_offload_store(case: OffloadStoreCase) -> str:
    s = case.setting
    groups = ", ".join(
        f"{gid}: {g.kind.value} {g.block_size}" + (f" (window {g.window})" if g.window else "")
        + (f" (chunk {g.chunk})" if g.chunk else "") + (" [EAGLE group]" if g.is_eagle_group else "")
        for gid, g in enumerate(s.groups)
    )
    steps = ", ".join(f"[{a}, {b})" for a, b in case.saves) or "none"
    return (f"OffloadingConnector; groups [{groups}]; hash unit {s.hash_block_size} tokens; "
            f"{s.blocks_per_chunk} block(s) per chunk; EAGLE "
            f"{('on, lookahead hashes' if s.lookahead_hashes else 'on') if s.use_eagle else 'off'}; "
            f"prompt {case.num_prompt_tokens} tokens; steps {steps}"
            + ("; then ends in error (FINISHED_ERROR)" if case.ends_in_error else ""))


def count_offload_store(reached: Counter, case: OffloadStoreCase, comparison: StoreComparison) -> None:
    reached["offload requests"] += 1
    reached["offload steps"] += len(case.saves)
    reached["offload split"] += len(case.saves) > 1
    reached["offload chunks"] += sum(len(c) for c in comparison.stored.values())
    reached["offload ends in error mid-prefill"] += case.ends_in_error
    reached["offload under lookahead hashes"] += case.setting.lookahead_hashes
