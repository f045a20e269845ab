"""The OffloadingConnector's cache-hit lookup on real vLLM against the reference model
(reference/offloading.py) and the safety rules (spec/offloading.py), on random groups, chunk
sizes, stored chunks and requests. Stateless: each example builds a fresh connector scheduler
over a real CPU store holding exactly the drawn chunks (impl/offloading.py).

Draws reuse kvspec/lookup_check.py's groups, hash units and cache shapes; stored entries are
kept at chunk ends (what the connector stores). Filtered out:
* Mamba groups of different chunk sizes (vLLM asserts it, resolve_mamba_align_size);
* ours, from vLLM's block-size resolution: a group whose block size is not a multiple of
  Mamba's. In align mode Mamba's block is the base block size and page unification only grows
  attention blocks (Platform._align_hybrid_block_size, unify_kv_cache_spec_page_size), so no
  model reaches it today. Where it is reached the lookup is unsafe: see SPLIT_MAMBA_FINDING and
  tests/test_offloading.py.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import assume
from hypothesis import strategies as st

from kvspec.checks_base import CheckResult, run_property, scaled
from kvspec.impl.offloading import offloading_hit, trims_window_before_cap
from kvspec.lookup_check import cache_states, lookup_settings, null_blocks_read
from kvspec.reference.offloading import Store, offloading_lookup
from kvspec.spec.hits import CacheState, Hit
from kvspec.spec.layers import Kind
from kvspec.spec.offloading import (
    OffloadSetting,
    chunk_setting,
    max_safe_offload_hit,
    offload_unsafe_reason,
    tokens_per_chunk,
)

SPLIT_MAMBA_FINDING = (
    "latent: with a group of finer chunks than Mamba's, vLLM can resume Mamba inside one of its chunks "
    "from the state at the chunk's end (tests/test_offloading.py, not drawn here)"
)


@st.composite
def offload_cases(draw):
    """(setting, state, num_tokens, cap): the request hashes each of the state's units once and
    may carry a few tokens past the last; the cap (max_num_new_tokens) is mostly absent."""
    lookup = draw(lookup_settings())
    setting = OffloadSetting(lookup.groups, lookup.hash_block_size, draw(st.sampled_from([1, 1, 2])), lookup.use_eagle)
    mamba_chunks = {tokens_per_chunk(setting, gid) for gid, g in enumerate(setting.groups) if g.kind == Kind.MAMBA}
    assume(len(mamba_chunks) <= 1)  # vLLM asserts one Mamba alignment
    assume(all(g.block_size % m.block_size == 0 for m in setting.groups if m.kind == Kind.MAMBA for g in setting.groups))
    drawn = draw(cache_states(chunk_setting(setting)))
    units = {gid: tokens_per_chunk(setting, gid) // setting.hash_block_size for gid in range(len(setting.groups))}
    ends = frozenset((gid, j) for gid, j in drawn.cached if (j + 1) % units[gid] == 0)
    state = CacheState(drawn.num_hashes, ends)
    num_tokens = state.num_hashes * setting.hash_block_size + draw(st.integers(0, setting.hash_block_size - 1))
    cap = draw(st.none() | st.none() | st.integers(0, num_tokens))
    return setting, state, num_tokens, cap


def vllm_offloading(adapter, setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None) -> Hit:
    return offloading_hit(
        adapter,
        list(setting.groups),
        state,
        num_tokens,
        use_eagle=setting.use_eagle,
        hash_block_size=setting.hash_block_size,
        blocks_per_chunk=setting.blocks_per_chunk,
        max_num_new_tokens=cap,
    )


def reference_offloading(adapter, setting, state, num_tokens, cap) -> Hit:
    return offloading_lookup(setting, state, num_tokens, cap, trim_before_cap=trims_window_before_cap(adapter))


def offloading_conforms(adapter, case) -> Hit:
    """vLLM equals the reference, its hit is safe, and it loads only stored chunks and every
    chunk each group reads."""
    setting, state, num_tokens, cap = case
    context = f"offloading: {setting} {state} num_tokens={num_tokens} cap={cap}"
    vllm = vllm_offloading(adapter, setting, state, num_tokens, cap)
    reference = reference_offloading(adapter, setting, state, num_tokens, cap)
    hit = vllm.length
    assert hit == reference.length, f"hit: vLLM {hit} != reference {reference.length}; {context}"
    assert vllm.real_blocks == reference.real_blocks, f"loaded chunks differ; {context}"
    reason = offload_unsafe_reason(setting, state, hit, num_tokens, cap)
    assert reason is None, f"vLLM's hit {hit} is unsafe: {reason}; {context}"
    store = Store(setting, state)
    missing = [(g, c) for g, chunks in enumerate(vllm.real_blocks) for c, real in enumerate(chunks) if real and not store.has(g, c)]
    assert not missing, f"vLLM loads chunks the store lacks {missing}; {context}"
    unread = null_blocks_read(chunk_setting(setting), vllm)
    assert not unread, f"vLLM leaves out chunks a group reads {unread}; {context}"
    return vllm


OFFLOADING_EXAMPLES = 2500


def check_offloading(adapter, seed: int = 0, scale: float = 1.0) -> CheckResult:
    """The OffloadingConnector's lookups equal the reference's and are safe, on
    ``OFFLOADING_EXAMPLES`` drawn (groups, chunk size, stored chunks, request, cap)."""
    reached: Counter = Counter()

    def prop(case):
        _count(reached, case, offloading_conforms(adapter, case))

    failure = run_property(prop, offload_cases(), seed=seed, examples=scaled(OFFLOADING_EXAMPLES, scale))
    covered = (
        f"{reached['lookups']} lookups: {reached['hybrid']} hybrid, {reached['chunks of 2 blocks']} with "
        f"2-block chunks, {reached['annotated']} EAGLE annotated, {reached['unannotated']} EAGLE unannotated, "
        f"{reached['mamba']} with Mamba, {reached['capped']} capped, {reached['hit']} hits > 0"
    )
    short = sorted(((n, what) for what, n in reached.items() if what.startswith("short: ")), reverse=True)
    details = failure or ["every hit equals the reference's, is safe and loads what each group reads"]
    if not failure:
        details.append(
            f"{reached['short']} hits shorter than the longest safe one, by {reached['tokens short']} tokens "
            "in all (recorded, not judged): " + "; ".join(f"{w.removeprefix('short: ')} x{n}" for n, w in short[:6])
        )
        details.append(SPLIT_MAMBA_FINDING)
    return CheckResult("offloading connector lookups", covered, holds=not failure, details=details)


def situation(setting: OffloadSetting) -> str:
    kinds = "+".join(sorted({g.kind.value for g in setting.groups}))
    shape = "one group" if len(setting.groups) == 1 else f"{len(setting.groups)} groups"
    annotated = any(g.is_eagle_group for g in setting.groups)
    eagle = " EAGLE annotated" if annotated else " EAGLE unannotated" if setting.use_eagle else ""
    return f"offloading {shape} {kinds}{eagle}"


def _count(reached: Counter, case, vllm: Hit) -> None:
    setting, state, num_tokens, cap = case
    reached["lookups"] += 1
    gap = max_safe_offload_hit(setting, state, num_tokens, cap) - vllm.length
    if gap > 0:
        reached["short"] += 1
        reached["tokens short"] += gap
        reached[f"short: {situation(setting)}"] += 1
    annotated = any(g.is_eagle_group for g in setting.groups)
    reached["hybrid"] += len(setting.groups) > 1
    reached["chunks of 2 blocks"] += setting.blocks_per_chunk == 2
    reached["annotated"] += annotated
    reached["unannotated"] += setting.use_eagle and not annotated
    reached["mamba"] += any(g.kind == Kind.MAMBA for g in setting.groups)
    reached["capped"] += cap is not None
    reached["hit"] += vllm.length > 0

