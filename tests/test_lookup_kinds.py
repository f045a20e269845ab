"""Issue 15's kinds in the prefix-cache lookups (spec/hits.py, reference/lookup.py): each kind's
hit rule on real vLLM and on the reference, by hand (HiSparse's layout included); the kinds vLLM never lets reach a lookup
(cross attention, sink attention on 0.30-0.34) shown on vLLM itself; the lookups check reaching
each kind above its minimum; and each new broken variant caught."""

from __future__ import annotations

import pytest

from kvspec.draws.lookups import HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER
from kvspec.gate.lookups import LOOKUP_MINIMUMS, check_lookups, store_has_a_cacheable_group
from kvspec.gate.options import GateOptions
from kvspec.impl import vllm_symbols as S
from kvspec.impl.broken import applied
from kvspec.impl.vllm_symbols import resolve
from kvspec.reference.lookup import coordinator_lookup, mooncake_lookup
from kvspec.spec.hits import (
    blocks_read,
    lookup_preconditions_hold,
    max_safe_hit,
    target_unsafe_reason,
)
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.releases import RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS, SINK_MANAGER_REFUSES_THE_ZEROING_FLAG
from kvspec.spec.setting import CacheState, LookupSetting

FULL = CacheGroup(Kind.FULL, 16)
RSWA = CacheGroup(Kind.RSWA, 16, rswa_window=8)
HIDDEN = CacheGroup(Kind.HIDDEN_STATE, 16)
RING = CacheGroup(Kind.CIRCULAR_BUFFER, 16)
MAMBA = CacheGroup(Kind.MAMBA, 16)
SINK = CacheGroup(Kind.SINK_FULL, 16, sink_len=16)
CROSS = CacheGroup(Kind.CROSS_ATTENTION, 16)


def state_with(*prefixes: int) -> CacheState:
    """Group ``g`` holds hash units ``[0, prefixes[g])`` over a prompt of 4 units."""
    return CacheState(4, frozenset((g, j) for g, n in enumerate(prefixes) for j in range(n)))


def both_paths(adapter, setting, state, max_length) -> dict[str, int]:
    return {
        "core vllm": adapter.coordinator_hit(setting, state, max_length).length,
        "core reference": coordinator_lookup(setting, state, max_length, adapter.rules).length,
        "mooncake vllm": adapter.mooncake_hit(setting, state, max_length).length,
        "mooncake reference": mooncake_lookup(setting, state, max_length, adapter.rules).length,
    }


@pytest.mark.parametrize("kind_group", [RSWA, HIDDEN], ids=["rswa", "hidden_state"])
def test_full_attention_subclasses_hit_as_full_attention(vllm_adapter, kind_group):
    """R-SWA and the hidden-state cache keep FullAttentionManager's finder: beside Mamba (3
    states cached) with 2 of their blocks cached, every path stops at 32, the last block both
    hold; with all 4 cached, at Mamba's 48."""
    setting = LookupSetting((kind_group, MAMBA), 16)
    assert set(both_paths(vllm_adapter, setting, state_with(2, 3), 64).values()) == {32}
    assert set(both_paths(vllm_adapter, setting, state_with(4, 3), 64).values()) == {48}
    assert target_unsafe_reason(setting, state_with(2, 3), 48, 64) == f"group 0 ({kind_group.kind}) lacks KV for tokens [0, 48)"


def test_rswa_is_not_merged_with_full_attention(vllm_adapter):
    """An R-SWA spec is another class than full attention's: two spec groups, each looked up,
    so the shorter one decides (16), not the first member's (64)."""
    setting = LookupSetting((FULL, RSWA), 16)
    assert set(both_paths(vllm_adapter, setting, state_with(4, 1), 64).values()) == {16}


def test_a_circular_buffer_is_skipped_beside_full_attention(vllm_adapter):
    """The ring holds nothing cached, yet full attention's 64 stands on every path; its block
    list stays empty and a hit reads nothing from it."""
    setting = LookupSetting((RING, FULL), 16)
    state = state_with(0, 4)
    assert set(both_paths(vllm_adapter, setting, state, 64).values()) == {64}
    assert vllm_adapter.coordinator_hit(setting, state, 64).real_blocks[0] == ()
    assert blocks_read(setting, 0, 64) == range(0)
    assert target_unsafe_reason(setting, state, 64, 64) is None


def test_a_circular_buffer_alone_never_hits(vllm_adapter):
    """Alone, the unitary coordinator asks CircularBufferManager, which answers 0 even with
    entries under its hashes; the spec allows no other hit (nothing cacheable vouches for one),
    and the store is not asked about such a model (store_has_a_cacheable_group)."""
    setting = LookupSetting((RING,), 16)
    state = state_with(4)
    assert vllm_adapter.coordinator_hit(setting, state, 64).length == 0
    assert coordinator_lookup(setting, state, 64, vllm_adapter.rules).length == 0
    assert max_safe_hit(setting, state, 64) == 0
    assert lookup_preconditions_hold(setting.groups) and not store_has_a_cacheable_group(setting)


def test_cross_attention_never_reaches_a_lookup(vllm_adapter):
    """Encoder-decoder models run without prefix caching (ModelConfig.is_prefix_caching_supported),
    and CrossAttentionManager refuses to be asked: the precondition is vLLM's."""
    assert not lookup_preconditions_hold((FULL, CROSS))
    with pytest.raises(NotImplementedError):
        vllm_adapter.coordinator_hit(LookupSetting((FULL, CROSS), 16), state_with(4, 0), 64)


def test_a_hybrid_needs_a_prefix_cacheable_group(vllm_adapter):
    """Two rings and nothing else: HybridKVCacheCoordinator asserts a cacheable group."""
    assert not lookup_preconditions_hold((RING, RING))
    with pytest.raises(AssertionError, match="at least one cacheable group"):
        vllm_adapter.coordinator_hit(LookupSetting((RING, RING), 16), state_with(0, 0), 64)


def test_no_coordinator_can_build_a_sink_manager(vllm_adapter):
    """SINK_MANAGER_REFUSES_THE_ZEROING_FLAG, read on vLLM: KVCacheCoordinator passes
    needs_kv_cache_zeroing, which SinkFullAttentionManager.__init__ does not take. When this
    test fails, vLLM builds sink groups: draw them in kvspec/draws/lookups.py:NEW_KINDS."""
    assert vllm_adapter.has(SINK_MANAGER_REFUSES_THE_ZEROING_FLAG)
    with pytest.raises(TypeError, match="needs_kv_cache_zeroing"):
        vllm_adapter.coordinator_hit(LookupSetting((FULL, SINK), 16), state_with(4, 4), 64)
    assert resolve(S.CIRCULAR_BUFFER_FIND) is not None  # the symbols the variants patch exist


def test_hisparse_source_keeps_its_longer_hit_on_the_core_only(vllm_adapter):
    """The hit is 32 (the indexer's 2 blocks) on every path; the core leaves the source its own
    4 blocks (HiSparseSourceManager.retains_longer_hit), the Mooncake store (no role: plain MLA,
    merged with the equal-spec indexer) gives it 2; the hot and resident groups get nothing."""
    assert set(both_paths(vllm_adapter, HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64).values()) == {32}
    blocks = ((True,) * 4, (True,) * 2, (), ())
    assert vllm_adapter.coordinator_hit(HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64).real_blocks == blocks
    assert coordinator_lookup(HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64, vllm_adapter.rules).real_blocks == blocks
    trimmed = ((True,) * 2, (True,) * 2, (), ())
    assert vllm_adapter.mooncake_hit(HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64).real_blocks == trimmed
    assert mooncake_lookup(HISPARSE_LAYOUT, SOURCE_AHEAD_OF_INDEXER, 64, vllm_adapter.rules).real_blocks == trimmed


def test_hisparse_groups_come_only_as_its_layout_makes_them():
    source, indexer, resident, hot = HISPARSE_LAYOUT.groups
    assert lookup_preconditions_hold(HISPARSE_LAYOUT.groups)
    assert lookup_preconditions_hold((source, indexer, resident, resident, hot, hot, FULL, MAMBA))
    assert not lookup_preconditions_hold((FULL, resident, hot))  # no source
    assert not lookup_preconditions_hold((source, indexer))  # a source without its GPU groups
    assert not lookup_preconditions_hold((resident, source, indexer, hot))  # the source after a resident group
    assert not lookup_preconditions_hold((source, source, resident, hot))  # two sources
    assert not lookup_preconditions_hold((source, indexer, CacheGroup(Kind.HISPARSE_RESIDENT, 32), hot))
    with pytest.raises(ValueError, match="only an MLA group"):
        CacheGroup(Kind.FULL, 16, hisparse_source=True)


def test_the_check_reaches_each_new_kind_above_its_minimum(vllm_adapter):
    result = check_lookups(vllm_adapter, GateOptions(scale=0.2))
    assert result.holds, result.details
    assert result.minimums == LOOKUP_MINIMUMS
    for key, minimum in LOOKUP_MINIMUMS.items():
        assert result.coverage[key] >= minimum * 0.2, key


@pytest.mark.parametrize("variant", ["circular-buffer-hit-minus-one", "hybrid-looks-up-scratch-groups",
                                     "hisparse-source-trimmed", "hisparse-source-merged-with-its-indexer"])
def test_each_new_variant_is_caught(vllm_adapter, variant):
    with applied(vllm_adapter, [variant]):
        result = check_lookups(vllm_adapter, GateOptions(scale=0.05))
    assert not result.holds


def test_the_variants_change_vllm_answers(vllm_adapter):
    with applied(vllm_adapter, ["circular-buffer-hit-minus-one"]):
        assert vllm_adapter.coordinator_hit(LookupSetting((RING,), 16), state_with(4), 64).length == -1
    with applied(vllm_adapter, ["hybrid-looks-up-scratch-groups"]):
        assert vllm_adapter.coordinator_hit(LookupSetting((RING, FULL), 16), state_with(0, 4), 64).length == 0


# ------------------------------------------------------------------ the write side (spec/kind_writes.py)
SMALL_RSWA = CacheGroup(Kind.RSWA, 4, rswa_window=4)


def decode_then_probe(adapter, group: CacheGroup, prompt_len: int, generated: int) -> tuple[int, tuple]:
    """One request with a ``prompt_len``-token prompt decodes ``generated`` tokens one a step,
    as vLLM's scheduler drives KVCacheManager (impl/live.py), and finishes; then the hit a new
    prompt made of every token it computed (plus one) gets, and its last block table."""
    live = adapter.live_manager([group], num_blocks=64)
    prompt = list(range(100, 100 + prompt_len))
    live.add_request("r0", prompt)
    step = live.schedule("r0", 64, next_token=200)
    for token in range(201, 201 + generated):
        step = live.schedule("r0", 64, next_token=token)
    live.finish("r0")
    computed = prompt + list(range(200, 200 + generated))
    return live.lookup(computed + [999])[0], step.tables


def test_ring_and_scratch_groups_publish_nothing():
    from kvspec.spec.kind_writes import publishes

    assert not publishes(RING) and not publishes(CROSS) and publishes(RSWA) and publishes(SINK)


def test_rswa_decode_blocks_serve_only_what_a_prompt_would_compute(vllm_adapter, request):
    """R-SWA window 4, block 4, prompt 8, 16 tokens decoded. Positions from 12 on were computed
    without the generated tokens before the window; a new prompt of those 24 tokens would see
    them, so only 12 are determined by the token prefix (spec/kind_writes.py:rswa_safe_reuse_limit).
    vLLM publishes every decode block (FullAttentionManager.cache_blocks) and the new prompt hits
    24; the gap blocks are freed (null in the table) yet still cached. A strict xfail wherever
    RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS holds (0.30 to 0.34)."""
    from kvspec.spec.kind_writes import rswa_safe_reuse_limit

    holds = vllm_adapter.has(RSWA_DECODE_BLOCKS_PUBLISHED_UNDER_TOKEN_KEYS)
    report = "docs/findings/rswa-decode-blocks-published-under-token-keys.md"
    request.applymarker(pytest.mark.xfail(holds, strict=True, reason=f"vLLM: R-SWA decode blocks reused; see {report}"))
    hit, tables = decode_then_probe(vllm_adapter, SMALL_RSWA, 8, 16)
    assert tables[0][2:4] == [0, 0]  # the gap blocks freed by RSWAManager.remove_skipped_blocks
    assert rswa_safe_reuse_limit(SMALL_RSWA, 8) == 12
    assert hit <= 12, f"a prompt of the computed tokens reuses {hit} tokens of decode-phase R-SWA KV"


def test_full_attention_decode_blocks_are_reused_whole(vllm_adapter):
    """The same run with full attention: 24 reused, all prefix-determined (the control)."""
    hit, tables = decode_then_probe(vllm_adapter, CacheGroup(Kind.FULL, 4), 8, 16)
    assert hit == 24 and 0 not in tables[0]


def test_a_ring_block_carries_no_key_as_spec_caching_predicts(vllm_adapter):
    """Full attention and a ring, block 4, a 6-token prompt computed: vLLM's ring table is one
    block with no key on it (CircularBufferManager.cache_blocks returns); spec/caching.py keeps
    no column of it and reference/published.py predicts no key; full attention's block 0 is keyed."""
    from kvspec.reference.published import RequestFacts, predict
    from kvspec.spec.caching import keeps_block

    groups = [CacheGroup(Kind.FULL, 4), CacheGroup(Kind.CIRCULAR_BUFFER, 4)]
    live = vllm_adapter.live_manager(groups, num_blocks=32)
    live.add_request("r0", list(range(100, 106)))
    step = live.schedule("r0", 64, next_token=200)
    assert len(step.tables[1]) == 1 and live.keys_on(step.tables[1][0]) == set()
    assert live.keys_on(step.tables[0][0])
    setting = LookupSetting(tuple(groups), 4)
    assert not keeps_block(setting, 1, 0, None, ())
    facts = RequestFacts(num_prompt_tokens=6, num_hashes=1, num_computed=6, hit=0, freed_at=0, shared_prefix_boundary=0)
    prediction = predict(setting, 1, facts, 1, frozenset(), None)
    assert prediction.columns[0].hash_indices == frozenset()
