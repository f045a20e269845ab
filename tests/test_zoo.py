"""The bug zoo (impl/broken.py) and ``kvspec zoo`` (kvspec/tools/zoo.py), lightly: each entry's patch
changes real vLLM's answer on one hand-written input and is undone afterwards; the zoo runner
reports detections, misses and bad input. The full zoo (every entry against the whole gate)
takes minutes and is run by ``kvspec zoo`` and benchmarks/zoo_detection.py, not here."""

import json

import pytest

from kvspec.cli import main as kvspec
from kvspec.draws.connector_hits import FIXED_CONNECTOR_CASES
from kvspec.draws.lookups import HISPARSE_CASE
from kvspec.gate.options import QUICK_SCALE
from kvspec.impl import vllm_symbols as symbols
from kvspec.impl.broken import VARIANTS, BrokenVariant, applied
from kvspec.impl.connector_hits import connector_hit
from kvspec.impl.live import LiveManager
from kvspec.impl.patching import edited
from kvspec.impl.simple_offload import simple_offload_matched
from kvspec.impl.stores import mooncake_store_masks
from kvspec.impl.target import TargetError
from kvspec.impl.vllm_symbols import resolve
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode
from kvspec.spec.setting import CacheState, LookupSetting
from kvspec.spec.simple_offload import SimpleOffloadCase
from kvspec.spec.stores import StoreSave
from kvspec.tools import zoo

FULL, MAMBA = CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)
SIMPLE_CASE = SimpleOffloadCase(LookupSetting((FULL, MAMBA), 16),
                                CacheState(4, frozenset({(0, 0), (0, 1), (0, 2), (1, 2)})), 64, 16)
RING = CacheGroup(Kind.CIRCULAR_BUFFER, 16)
RING_BESIDE_FULL = CacheState(4, frozenset((1, j) for j in range(4)))  # full attention holds 4 blocks


@pytest.fixture(autouse=True)
def no_saved_finds(tmp_path, monkeypatch):
    """The gate's first check replays the finds saved in the project (kvspec/gate/saved_finds.py); a find
    made on one of these bugs would fire first. These tests are about the zoo, not the finds."""
    (tmp_path / "no-finds").mkdir()
    monkeypatch.setenv("KVSPEC_FINDS", str(tmp_path / "no-finds"))


SEED_STATE = CacheState.full_prefix(num_groups=2, num_hashes=4)  # 4 blocks cached in both groups


def core(adapter, groups, state, max_length, eagle, hash_block_size=None, allow_partial_hash_hits=True):
    """The core coordinator's hit; with no hash unit given, the block sizes vLLM resolves."""
    setting = LookupSetting(tuple(groups), hash_block_size or 16, eagle, allow_partial_hash_hits)
    hit = adapter.coordinator_hit(setting, state, max_length, engine_block_sizes=hash_block_size is None)
    return hit.length, hit.real_blocks


def mooncake(adapter, groups, state, max_length, eagle):
    setting = LookupSetting(tuple(groups), 16, eagle)
    return adapter.mooncake_hit(setting, state, max_length, engine_block_sizes=True).length


def warns(adapter):
    """(warns on attention + Mamba, warns on attention only), EAGLE on and nothing annotated."""
    full, mamba = LayerSpec(Kind.FULL, 16), LayerSpec(Kind.MAMBA, 16, state_bytes=4096)
    hybrid = adapter.group_layers({"a": full, "b": mamba}, SpecDecode("eagle"))
    attention = adapter.group_layers({"a": full, "b": full}, SpecDecode("eagle"))
    return hybrid.warned_unannotated_eagle, attention.warned_unannotated_eagle


def groups_of_3_full_4_sliding(adapter):
    layers = {f"f{i}": LayerSpec(Kind.FULL, 16) for i in range(3)}
    layers |= {f"s{i}": LayerSpec(Kind.SLIDING_WINDOW, 16, window=128) for i in range(4)}
    return [g.layer_names for g in adapter.group_layers(layers).groups]


def offloading(adapter):
    """The OffloadingConnector's hit for a 65-token prompt, EAGLE on, nothing annotated."""
    offloading_hit = pytest.importorskip("kvspec.impl.offloading").offloading_hit
    return offloading_hit(adapter, [FULL, MAMBA], SEED_STATE, 65, use_eagle=True, hash_block_size=16).length



def offloading_load_bound(adapter) -> int | None:
    """[Mamba 16 offloaded, full 16, full 32 left out]: the bound is group 2's 64, not group 1's 96."""
    from kvspec.impl.offloading_load_bound import load_bound

    local = CacheState(6, frozenset((1, unit) for unit in range(6)) | {(2, 1), (2, 3)})
    setting = LookupSetting((MAMBA, FULL, CacheGroup(Kind.FULL, 32)), 16)
    return load_bound(adapter, setting, local, 97, frozenset({0}))[1]


def offloading_first_step_stores(adapter) -> tuple[int, ...]:
    """The chunks of a [full 2] request the OffloadingConnector stores after computing 1 of its 2 tokens."""
    from kvspec.impl.offloading_stores import offloading_stored_chunks
    from kvspec.spec.offloading import OffloadSetting

    setting = OffloadSetting((CacheGroup(Kind.FULL, 2),), 2)
    return offloading_stored_chunks(adapter, setting, ((0, 1),), 2)[0].get(0, ())


def published_keys(adapter, groups, prompt_length: int, decode: int = 0, retention=None,
                   finish: bool = False) -> tuple[int, ...]:
    """Keys each group holds after one request computes a prompt of ``prompt_length`` tokens
    (in the scheduler's own chunks), decodes ``decode`` more and (``finish``) is finished, on a
    real KVCacheManager."""
    live = LiveManager.for_groups(adapter, list(groups), num_blocks=64, retention_interval=retention)
    live.add_request("r", [token % 7 for token in range(prompt_length)])
    request = live.requests["r"].request
    while request.num_computed_tokens < prompt_length + decode:
        assert live.schedule("r", 2048 if request.num_computed_tokens < prompt_length else 1) is not None
    if finish:
        live.finish("r")
    group_ids = [int.from_bytes(key[-4:], "big") for key in live.cache_map()]
    return tuple(group_ids.count(gid) for gid in range(len(groups)))


def group_classes(adapter, *layers: LayerSpec) -> tuple[str, ...]:
    """The spec class of each group vLLM makes of these layers, in order (hybrid manager on)."""
    out = adapter.group_layers({f"model.layers.{i}": layer for i, layer in enumerate(layers)})
    return tuple(g.spec_class for g in out.groups)


def mooncake_mamba_mask(adapter):
    """The Mooncake store's put mask for the Mamba group of one 64-token save (None: every block)."""
    [masks] = mooncake_store_masks(adapter, LookupSetting((FULL, MAMBA), 16), (StoreSave(0, 64),), 64)
    return masks[1]

# Per entry: one hand-written input, vLLM's answer on it, and that answer with the bug back.
WITNESSES = {
    # EAGLE on the seed: attention verifies 48, Mamba must resume there, not at 64.
    "mamba-peek-margin-mooncake": (lambda a: mooncake(a, [FULL, MAMBA], SEED_STATE, 64, True), 48, 64),
    "mamba-peek-margin-core": (lambda a: core(a, [FULL, MAMBA], SEED_STATE, 64, True)[0], 48, 64),
    "mamba-peek-margin": (
        lambda a: (core(a, [FULL, MAMBA], SEED_STATE, 64, True)[0], mooncake(a, [FULL, MAMBA], SEED_STATE, 64, True)),
        (48, 48),
        (64, 64),
    ),
    "mamba-honours-eagle-drop": (lambda a: core(a, [FULL, MAMBA], SEED_STATE, 64, True)[0], 48, 32),
    "hybrid-later-group-raises-prefix": (lambda a: core(a, [FULL, MAMBA], SEED_STATE, 64, True)[0], 48, 64),
    # Full attention in blocks of 32 (alignment 32); the only Mamba state ends at 16.
    "mamba-ignores-checkpoint-alignment": (
        lambda a: core(
            a, [CacheGroup(Kind.FULL, 32), MAMBA], CacheState(3, frozenset({(0, 1), (1, 0)})), 48, False,
            hash_block_size=16, allow_partial_hash_hits=False,
        )[0],
        0,
        16,
    ),
    # [full, Mamba, sliding window 17]: the window lowers 64 to 32, where Mamba has no state;
    # a second pass lowers it to 16, where every group has what it needs.
    "hybrid-loop-one-pass": (
        lambda a: core(
            a,
            [FULL, MAMBA, CacheGroup(Kind.SLIDING_WINDOW, 16, window=17)],
            CacheState(4, frozenset({(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 3), (2, 0), (2, 1)})),
            64,
            False,
        )[0],
        16,
        32,
    ),
    # gpt-oss-like [full, sliding window] with EAGLE, everything cached (the report's case).
    "hybrid-eagle-collapse": (
        lambda a: core(a, [FULL, CacheGroup(Kind.SLIDING_WINDOW, 16, window=17)], SEED_STATE, 64, True)[0], 48, 0
    ),
    # Window 17 in blocks of 16 needs one block before the hit; EAGLE needs one more to drop.
    # The bug keeps the hit at 48 but hands the window a null block for tokens 32..47.
    "sliding-window-eagle-short-run": (
        lambda a: core(
            a, [CacheGroup(Kind.SLIDING_WINDOW, 16, window=17)], CacheState(4, frozenset({(0, 2), (0, 3)})), 64, True
        ),
        (48, ((False, False, True),)),
        (48, ((False, False, False),)),
    ),
    # Window 33 needs two blocks; only the last one is cached.
    "sliding-window-short-run": (
        lambda a: core(
            a, [CacheGroup(Kind.SLIDING_WINDOW, 16, window=33)], CacheState(4, frozenset({(0, 3)})), 64, False
        )[0],
        0,
        64,
    ),
    "warning-without-mamba-gate": (warns, (True, False), (True, True)),
    "warning-gate-inverted": (warns, (True, False), (False, True)),
    "warning-silent-with-mamba": (warns, (True, False), (False, False)),
    # Buckets of 3 and 4 layers: 4 < 1.5 x 3, so vLLM makes groups of 4.
    "group-size-one-per-layer": (
        groups_of_3_full_4_sliding,
        [("f0", "f1", "f2"), ("s0", "s1", "s2", "s3")],
        [("f0",), ("f1",), ("f2",), ("s0",), ("s1",), ("s2",), ("s3",)],
    ),
    "group-size-always-smallest": (
        groups_of_3_full_4_sliding,
        [("f0", "f1", "f2"), ("s0", "s1", "s2", "s3")],
        [("f0", "f1", "f2"), ("s0", "s2"), ("s1", "s3")],
    ),
    # A group of 64 probing inside blocks of hash unit 16 peeks one unit, not a block.
    "eagle-margin-whole-block": (lambda a: a.eagle_proof_margin(64, 16, True), 16, 64),
    # Unannotated groups are non-draft for offloading: no chunk popped (64), not one each (48).
    "offloading-flags-all-groups": (offloading, 64, 48),
    "offloading-bound-ignores-a-group-left-out": (offloading_load_bound, 64, 96),
    # The write side. Blocks of 32 and 16: a window of 17 needs one block per 32-token segment.
    "window-keeps-one-block-too-few": (
        lambda a: published_keys(a, [CacheGroup(Kind.FULL, 32), CacheGroup(Kind.SLIDING_WINDOW, 16, window=17)], 65),
        (2, 2),
        (2, 0),
    ),
    # Mamba keeping only its replay boundary (retention 0): the state at 16, never the one at 32.
    "mamba-state-cached-one-block-late": (
        lambda a: published_keys(a, [FULL, MAMBA], 17, decode=16, retention=0), (2, 1), (2, 2),
    ),
    "last-full-block-never-cached": (lambda a: published_keys(a, [FULL], 33), (2,), (1,)),
    "freed-blocks-forget-their-keys": (lambda a: published_keys(a, [FULL], 33, finish=True), (2,), (0,)),
    # The OffloadingConnector's store side: a step computing 1 of a 2-token chunk stores nothing.
    "offloading-stores-a-chunk-it-does-not-hold": (lambda a: offloading_first_step_stores(a), (), (0,)),
    # The issue-15 kinds' merges: R-SWA of two windows, full before R-SWA, a ring before full attention.
    "rswa-merges-any-window": (
        lambda a: group_classes(a, LayerSpec(Kind.RSWA, 16, rswa_window=64), LayerSpec(Kind.RSWA, 16, rswa_window=128)),
        ("UniformTypeKVCacheSpecs",), ("RSWASpec",),
    ),
    "full-merge-refuses-subclasses": (
        lambda a: group_classes(a, LayerSpec(Kind.FULL, 16), LayerSpec(Kind.RSWA, 16, rswa_window=64)),
        ("FullAttentionSpec",), ("UniformTypeKVCacheSpecs",),
    ),
    "circular-buffer-uniform-with-any-attention": (
        lambda a: group_classes(a, LayerSpec(Kind.CIRCULAR_BUFFER, 16), LayerSpec(Kind.FULL, 16)),
        ("CircularBufferSpec", "FullAttentionSpec"), ("UniformTypeKVCacheSpecs",),
    ),
    # [cross attention 32, Mamba 64, full 16]: cross attention is asked, so hits align to 64, not 16.
    "cross-attention-probes-inside-blocks": (
        lambda a: a.resolve_block_sizes([CacheGroup(Kind.CROSS_ATTENTION, 32), CacheGroup(Kind.MAMBA, 64),
                                         CacheGroup(Kind.FULL, 16)]).cache_hit_alignment,
        64, 16,
    ),
    # [full 16, Mamba 16], one save of 64 tokens: Mamba's states come by the hand-off, never by position.
    "store-puts-mamba-state-positionally": (lambda a: mooncake_mamba_mask(a), (False,) * 4, None),
    # [full 16, Mamba 16]: Mamba lags full attention (48): flagged; Mamba past it: the core's 32.
    "connector-hit-never-diverges": (lambda a: connector_hit(a, *FIXED_CONNECTOR_CASES[0])[1].hit_diverged, True, False),
    "per-group-hits-clamped-to-full-attention": (
        lambda a: connector_hit(a, *FIXED_CONNECTOR_CASES[1])[1].per_group, (32, 48), (32, 32),
    ),
    # [full 16, Mamba 16], CPU: full 3 blocks and Mamba's state at 48, local prefix 16: 32 past it.
    "simple-offload-counts-the-local-prefix": (lambda a: simple_offload_matched(a, SIMPLE_CASE), (32, True), (48, True)),
    # Issue 15's lookups: a ring alone answers 0, not -1; beside full attention it is skipped.
    "circular-buffer-hit-minus-one": (
        lambda a: a.coordinator_hit(LookupSetting((RING,), 16), CacheState.full_prefix(1, 4), 64).length, 0, -1
    ),
    "hybrid-looks-up-scratch-groups": (
        lambda a: a.coordinator_hit(LookupSetting((RING, FULL), 16), RING_BESIDE_FULL, 64).length, 64, 0
    ),
    # HiSparse's source holds 4 blocks, its equal-spec indexer 2: the source keeps its 4.
    # HiSparse's source holds 4 blocks, its equal-spec indexer 2: the core leaves the source its 4.
    **dict.fromkeys(("hisparse-source-trimmed", "hisparse-source-merged-with-its-indexer"),
                    (lambda a: a.coordinator_hit(*HISPARSE_CASE).real_blocks[0], (True,) * 4, (True,) * 2)),
}


def vllm_functions(adapter) -> dict:
    """Every attribute a zoo patch may replace, by identity, to show each patch is undone."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        RequestOffloadState,
        SchedulerOffloadConfig,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
    from vllm.v1 import kv_cache_interface
    from vllm.v1.core import kv_cache_coordinator, kv_cache_manager, kv_cache_utils, single_type_kv_cache_manager
    from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler

    owners = [
        SchedulerOffloadConfig,
        RequestOffloadState,
        OffloadingConnector,
        kv_cache_coordinator.HybridKVCacheCoordinator,
        kv_cache_manager.KVCacheManager,
        SimpleCPUOffloadScheduler,
        single_type_kv_cache_manager.MambaManager,
        single_type_kv_cache_manager.SlidingWindowManager,
        single_type_kv_cache_manager.CircularBufferManager,
        symbols.owner_and_attribute(symbols.CACHE_FULL_BLOCKS)[0],
        resolve(symbols.MOONCAKE_COORDINATOR),
        resolve(symbols.PLANNING),
        kv_cache_utils,
        kv_cache_interface.RSWASpec,
        kv_cache_interface.FullAttentionSpec,
        kv_cache_interface.CircularBufferSpec,
    ]
    # Functions only: building a manager re-seeds kv_cache_utils' hash seed, which no patch touches.
    return {(repr(owner), name): value for owner in owners for name, value in vars(owner).items()
            if callable(value) or isinstance(value, (classmethod, staticmethod))}


def test_every_entry_is_witnessed_and_documented():
    assert set(WITNESSES) == set(VARIANTS)
    for variant in VARIANTS.values():
        assert variant.upstream.startswith(("vLLM #", "none reported: ")), variant.name
        assert variant.wrong_behaviour and "\n" not in variant.wrong_behaviour
        assert variant.invariant and variant.caught_by


@pytest.mark.parametrize("name", WITNESSES)
def test_each_entry_changes_vllms_answer_and_is_undone(vllm_adapter, name):
    witness, correct, broken = WITNESSES[name]
    before = vllm_functions(vllm_adapter)
    assert witness(vllm_adapter) == correct
    with applied(vllm_adapter, [name]):
        assert witness(vllm_adapter) == broken
    assert witness(vllm_adapter) == correct
    after = vllm_functions(vllm_adapter)
    assert [key for key in before if after.get(key) is not before[key]] == []


def test_an_edit_that_no_longer_matches_vllm_is_refused(vllm_adapter):
    from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator

    with pytest.raises(TargetError, match="contains 'no such code' 0 times, not once"):
        edited(HybridKVCacheCoordinator.__dict__["find_longest_cache_hit"], [("no such code", "")])


def test_two_edits_of_one_function_are_refused_and_both_undone(vllm_adapter):
    before = vllm_functions(vllm_adapter)
    with pytest.raises(TargetError, match="already patched by another variant"):
        with applied(vllm_adapter, ["mamba-peek-margin-core", "hybrid-loop-one-pass"]):
            pass
    after = vllm_functions(vllm_adapter)
    assert [key for key in before if after.get(key) is not before[key]] == []


def test_a_harmless_entry_is_reported_missed(vllm_adapter):
    harmless = BrokenVariant("harmless", "vLLM #0", "nothing", "none", ("warning gate",), lambda adapter: lambda: None)
    VARIANTS["harmless"] = harmless
    try:
        run = zoo.run_entry(vllm_adapter, harmless, seed=0, checks=["seed: hybrid coordinator", "warning gate"])
    finally:
        del VARIANTS["harmless"]
    assert not run.detected and run.fired is None
    # The quick pass held, so the whole gate ran after it.
    assert [(c["check"], c["scale"], c["verdict"]) for c in run.checks] == [
        (check, scale, "holds") for scale in (QUICK_SCALE, 1.0) for check in ("seed: hybrid coordinator", "warning gate")]
    table = zoo.markdown_table([zoo.summary(harmless, [run])])
    assert "| `harmless` | vLLM #0 | 0/1 | - |" in table


def test_zoo_json_replays_from_the_seed(vllm_adapter, tmp_path, capsys):
    entries = ["--entry", "mamba-peek-margin-mooncake", "--entry", "warning-gate-inverted"]
    reports = []
    for run in ("first", "second"):
        out = tmp_path / f"{run}.json"
        assert kvspec(["zoo", *entries, "--seed", "3", "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    assert "kvspec zoo: vLLM" in capsys.readouterr().out

    def without_times(report):
        for entry in report["entries"]:
            for key in ("median_seconds", "median_cpu_seconds"):
                entry.pop(key)
            for run in entry["runs"]:
                run.pop("seconds"), run.pop("cpu_seconds")
                for check in run["checks"]:
                    check.pop("seconds")
        return report

    first, second = map(without_times, reports)
    assert first == second
    assert first["seeds"] == [3] and first["ok"] and first["control"]
    assert [(e["entry"], e["detected"], e["fired"]) for e in first["entries"]] == [
        ("mamba-peek-margin-mooncake", "1/1", ["seed: Mooncake store"]),
        ("warning-gate-inverted", "1/1", ["warning gate"]),
    ]
    assert first["entries"][1]["runs"][0]["control"] == "holds"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["zoo", "--entry", "no-such-bug"], "unknown zoo entry 'no-such-bug'"),
        (["zoo", "--seeds", "0"], "--seeds 0: at least one seed"),
        (["zoo", "--json", "/no/such/dir/zoo.json"], "directory /no/such/dir does not exist"),
        (["zoo", "--vllm", "0.1.0"], "0.1.0"),
        (["zoo", "--seed", "x"], "invalid int value"),
    ],
)
def test_bad_zoo_input_is_one_line_and_exit_2(argv, message, capsys):
    assert kvspec(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
