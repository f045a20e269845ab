"""The store sides: what real vLLM writes to the Mooncake store, judged by spec/stores.py and
against the reference's prediction (reference/stores.py), on the Mooncake lookups' draws
(kvspec/draws/stores.py). Stateless: each example builds the store's coordinator and asks
``store_mask`` for every save of one request (impl/stores.py).

A save that would put a block the request does not hold (past its computed tokens, a Mamba state
put positionally, a mask of another group's size) fails. A block a later lookup reads that no
save puts, or a block put that no later lookup reads, is a divergence: it passes only when
recorded in known-divergences.toml under its situation, and a new one fails, printing the entry
to record and a plain-vLLM test replaying its smallest example (kvspec/emit/store_tests.py).

The OffloadingConnector's store side (offloading/scheduler.py:_build_store_jobs, driven through
build_connector_meta step by step and at the request's finish) is judged the same way, on the
offloading lookups' draws (kvspec/gate/offloading_stores.py).

Filtered out, as for the lookups (kvspec/gate/lookups.py): chunked-local preconditions vLLM
asserts, and a partial-hit decision the store would not get beside this core. And where the store
decides partial hits itself (a release without MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE), a
chunked-local group its own lookup would assert on
(docs/findings/mooncake-store-decides-partial-hits-before-0.32.md): no boundary of that store can be looked up, so none is the store side's to keep.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import assume

from kvspec.divergences.known import Observed
from kvspec.divergences.stores import store_where
from kvspec.draws.offloading_stores import offload_store_cases
from kvspec.draws.stores import store_cases
from kvspec.emit.describe import describe_group, ranges
from kvspec.emit.lookup_test import told_partial_hits
from kvspec.emit.store_tests import mooncake_store_test, offloading_store_test
from kvspec.gate.lookups import chunked_local_preconditions_hold, store_beside_this_core
from kvspec.gate.names import Check
from kvspec.gate.offloading_stores import (
    OFFLOAD_STORE_EXAMPLES,
    count_offload_store,
    observe_offload_store,
    offloading_store_conforms,
)
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.impl.stores import mooncake_store_masks
from kvspec.oracles.invariants import require_none
from kvspec.oracles.stores import StoreComparison, compare_with_reference, store_violations
from kvspec.reference.stores import needed_blocks
from kvspec.spec.layers import Kind
from kvspec.spec.releases import MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE, OFFLOADING_TAKES_LOOKAHEAD_HASHES
from kvspec.spec.resolution import mamba_partial_hits_possible
from kvspec.spec.stores import StoreCase

STORE_EXAMPLES = 1500


def mooncake_store_conforms(adapter, case: StoreCase) -> StoreComparison:
    """vLLM's saves put only blocks the request holds; what they put, against the reference."""
    assume(chunked_local_preconditions_hold(case.setting))
    assume(store_beside_this_core(adapter, case.setting))
    assume(store_lookup_takes_chunked_local(adapter, case.setting))
    masks = mooncake_store_masks(adapter, case.setting, case.saves, case.num_prompt_tokens)
    require_none(store_violations(case, masks), describe_store(case))
    return compare_with_reference(case, masks, needed_blocks(case.setting, case.saved_tokens, adapter.rules))


def store_lookup_takes_chunked_local(adapter, setting) -> bool:
    """Whether the store's own lookup accepts the chunked-local groups at its alignment: the
    core's where the store follows it, else the store's own (hash unit when Mamba allows partial
    hits; ChunkedLocalAttentionManager.find_longest_cache_hit asserts its block is the alignment)."""
    if adapter.has(MOONCAKE_PARTIAL_HITS_FOLLOW_THE_CORE) or not mamba_partial_hits_possible(setting):
        return True
    return all(g.kind != Kind.CHUNKED_LOCAL or g.block_size == setting.hash_block_size for g in setting.groups)


def check_stores(adapter, options: GateOptions) -> CheckResult:
    """The Mooncake store's saves and the OffloadingConnector's store steps are safe, and store
    what the reference predicts, on ``STORE_EXAMPLES`` and ``OFFLOAD_STORE_EXAMPLES`` drawn
    requests; a difference passes only as a recorded divergence."""
    reached: Counter = Counter()
    observed = Observed()
    known = options.known()

    def prop(case: StoreCase):
        comparison = mooncake_store_conforms(adapter, case)
        _count(reached, case, comparison)
        observe_store_divergences(observed, case, comparison, told_partial_hits(adapter.rules, case.setting))

    def offload_prop(case):
        comparison = offloading_store_conforms(adapter, case)
        count_offload_store(reached, case, comparison)
        observe_offload_store(observed, case, comparison)

    failure = run_property(prop, store_cases(), seed=options.seed, examples=scaled(STORE_EXAMPLES, options.scale))
    if not failure:
        failure = run_property(offload_prop, offload_store_cases(), seed=options.seed,
                               examples=scaled(OFFLOAD_STORE_EXAMPLES, options.scale))
    covered = (
        f"{reached['requests']} Mooncake store requests, {reached['saves']} saves: {reached['hybrid']} hybrid, "
        f"{reached['windowed']} with a sliding window, {reached['eagle']} EAGLE, {reached['mamba']} with Mamba, "
        f"{reached['split']} saved in several steps, {reached['blocks']} blocks put; "
        f"{reached['offload requests']} OffloadingConnector requests, {reached['offload steps']} steps "
        f"({reached['offload split']} in several), {reached['offload chunks']} chunks stored, "
        f"{reached['offload under lookahead hashes']} under lookahead hashes"
    )
    # Where the release takes lookahead hashes on the OffloadingConnector (its default EAGLE mode there).
    minimums = {"offload under lookahead hashes": 50} if adapter.has(OFFLOADING_TAKES_LOOKAHEAD_HASHES) else {}
    common = {"coverage": dict(reached), "minimums": minimums}
    for key in [] if failure else observed.new(known):
        failure += observed.new_entry(key, store_test(key, observed.smallest[key][2]))
    if failure:
        return CheckResult(Check.STORES, covered, holds=False, details=failure, **common)
    details = [
        "every save and store step writes only blocks and chunks the request holds; what is written equals the reference's but for recorded divergences",
        observed.summary(known),
        "OffloadingConnector: block tables are whole (no null blocks), so its null-block skip is not driven",
    ]
    return CheckResult(Check.STORES, covered, holds=True, details=details, **common)


def store_test(key: tuple[str, str], replay) -> str:
    """The plain-vLLM test of a new store-side divergence, from its smallest example's replay."""
    kind, where = key
    if where.startswith("offloading store"):
        case, found = replay
        return offloading_store_test(kind, case, found, f"{kind} {where}")
    case, found, told = replay
    return mooncake_store_test(kind, case, found, told, f"{kind} {where}")


def observe_store_divergences(observed: Observed, case: StoreCase, comparison: StoreComparison,
                              told: bool | None = None) -> None:
    """File a gap (a block a later lookup reads, never put) or an unread block under its situation
    (``told``: the store coordinator's partial-hit decision, for its replay)."""
    size = (len(case.setting.groups), case.saved_tokens, len(case.saves))
    for kind, blocks in (("store-incomplete", comparison.gaps), ("store-unread", comparison.unread)):
        if not blocks:
            continue
        text = "; ".join(f"group {gid} blocks {ranges(b)}" for gid, b in sorted(blocks.items()))
        verb = "never put" if kind == "store-incomplete" else "put, read by no later lookup"
        observed.add(kind, store_where(case.setting, blocks), size, f"{describe_store(case)}; {verb}: {text}",
                     sum(len(b) * case.setting.groups[gid].block_size for gid, b in blocks.items()),  # tokens
                     (case, blocks, told))


def describe_store(case: StoreCase) -> str:
    setting = case.setting
    groups = ", ".join(f"{gid}: {describe_group(g)}" for gid, g in enumerate(setting.groups))
    saves = ", ".join(f"[{s.start}, {s.end})" for s in case.saves) or "none"
    return (f"Mooncake store; groups [{groups}]; hash unit {setting.hash_block_size} tokens; "
            f"EAGLE {'on' if setting.use_eagle else 'off'}; prompt {case.num_prompt_tokens} tokens; saves {saves}")


def _count(reached: Counter, case: StoreCase, comparison: StoreComparison) -> None:
    kinds = {g.kind for g in case.setting.groups}
    reached["requests"] += 1
    reached["saves"] += len(case.saves)
    reached["hybrid"] += len(case.setting.groups) > 1
    reached["windowed"] += Kind.SLIDING_WINDOW in kinds
    reached["eagle"] += case.setting.use_eagle
    reached["mamba"] += Kind.MAMBA in kinds
    reached["split"] += len(case.saves) > 1
    reached["blocks"] += sum(len(b) for b in comparison.stored.values())
