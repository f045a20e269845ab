"""The OffloadingConnector's cache-hit lookup on real vLLM against the reference model
(reference/offloading.py) and the safety rules (spec/offloading.py), on random groups, chunk
sizes, stored chunks and requests. Stateless: each example builds a fresh connector scheduler
over a real CPU store holding exactly the drawn chunks (impl/offloading.py).

A hit shorter than the longest safe one is a divergence: it is filed under the rule of vLLM's
lookup that causes it (kvspec/divergences/offloading.py) and passes only when that cause is
recorded in known-divergences.toml; a new one fails, printing the entry to record and a
plain-vLLM test of its smallest example (kvspec/emit/vllm_tests.py:offloading_test).

Its load-bound part (kvspec/gate/offloading_load_bound.py) runs the same lookup under the bound
vLLM's OffloadingConnector derives from the groups it does not offload (HiSparse), judged by
spec/offloading_load_bound.py, with minimums on the situations it reaches.

Draws reuse kvspec/gate/lookups.py's groups, hash units and cache shapes; stored entries are
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

from hypothesis import reject

from kvspec.divergences.known import Observed
from kvspec.divergences.offloading import describe_offloading, short_hit_where
from kvspec.draws.offloading import LOAD_BOUND_FIXED, SPLIT_MAMBA_FINDING, offload_cases
from kvspec.emit.vllm_tests import offloading_test
from kvspec.gate.names import Check
from kvspec.gate.offloading_load_bound import (
    LOAD_BOUND_EXAMPLES,
    LOAD_BOUND_MINIMUMS,
    SHORT_BOUND_WHERE,
    load_bound_part,
)
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.impl.offloading import offloading_hit, trims_window_before_cap
from kvspec.oracles.invariants import require_none
from kvspec.oracles.offloading import offloading_violations
from kvspec.reference.offloading import offloading_lookup
from kvspec.spec.layers import Kind
from kvspec.spec.offloading import (
    OffloadSetting,
    max_safe_offload_hit,
)
from kvspec.spec.releases import OFFLOADING_TAKES_LOOKAHEAD_HASHES
from kvspec.spec.setting import CacheState, Hit


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
        lookahead_hashes=setting.lookahead_hashes,
    )


def offloading_takes_its_eagle_mode(adapter, setting: OffloadSetting) -> bool:
    """Whether this release's OffloadingConnector can run ``setting``: lookahead hashes only with
    spec/releases.py:OFFLOADING_TAKES_LOOKAHEAD_HASHES (0.33's engine keeps every connector on
    the legacy hashes). A draw it cannot run is filtered out, never judged."""
    return not setting.lookahead_hashes or adapter.has(OFFLOADING_TAKES_LOOKAHEAD_HASHES)


def reference_offloading(adapter, setting, state, num_tokens, cap) -> Hit:
    return offloading_lookup(setting, state, num_tokens, cap, trim_before_cap=trims_window_before_cap(adapter))


def offloading_conforms(adapter, case) -> Hit:
    """vLLM equals the reference, its hit is safe, and it loads only stored chunks and every
    chunk each group reads."""
    setting, state, num_tokens, cap = case
    if not offloading_takes_its_eagle_mode(adapter, setting):
        reject()
    context = f"offloading: {setting} {state} num_tokens={num_tokens} cap={cap}"
    vllm = vllm_offloading(adapter, setting, state, num_tokens, cap)
    reference = reference_offloading(adapter, setting, state, num_tokens, cap)
    require_none(offloading_violations(vllm, reference, setting, state, num_tokens, cap), context)
    return vllm


OFFLOADING_EXAMPLES = 2500
# Where the release takes lookahead hashes on this connector (its default EAGLE mode there).
LOOKAHEAD_MINIMUMS = {"lookahead hashes": 100, "lookahead hashes, annotated, hit": 20}


def check_offloading(adapter, options: GateOptions) -> CheckResult:
    """The OffloadingConnector's lookups equal the reference's and are safe, on
    ``OFFLOADING_EXAMPLES`` drawn (groups, chunk size, stored chunks, request, cap); a hit shorter
    than the longest safe one passes only under a cause recorded in known-divergences.toml."""
    seed, scale = options.seed, options.scale
    reached: Counter = Counter()
    observed = Observed()
    known = options.known()
    trim_before_cap = trims_window_before_cap(adapter)

    def prop(case):
        vllm = offloading_conforms(adapter, case)
        _count(reached, case, vllm)
        gap = observe_short_hit(observed, case, vllm, trim_before_cap)
        reached["short"] += gap > 0
        reached["tokens short"] += gap

    failure = run_property(prop, offload_cases(), seed=seed, examples=scaled(OFFLOADING_EXAMPLES, scale))
    bounded, bounded_cases = load_bound_part(adapter, reached, observed,
                                             lambda case, vllm: observe_short_hit(observed, case, vllm, trim_before_cap),
                                             vllm_offloading, reference_offloading)
    if not failure:
        failure = run_property(bounded, bounded_cases, seed=seed, examples=scaled(LOAD_BOUND_EXAMPLES, scale),
                               fixed=LOAD_BOUND_FIXED)
    covered = (
        f"{reached['lookups']} lookups: {reached['hybrid']} hybrid, {reached['chunks of 2 blocks']} with "
        f"2-block chunks, {reached['annotated']} EAGLE annotated, {reached['unannotated']} EAGLE unannotated, "
        f"{reached['mamba']} with Mamba, {reached['capped']} capped, {reached['hit']} hits > 0, "
        f"{reached['lookahead hashes']} under lookahead hashes ({reached['lookahead hashes, annotated, hit']} "
        "annotated with a hit); "
        + ", ".join(f"{reached[s]} {s}" for s in LOAD_BOUND_MINIMUMS)
    )
    minimums = {**LOAD_BOUND_MINIMUMS, **(LOOKAHEAD_MINIMUMS if adapter.has(OFFLOADING_TAKES_LOOKAHEAD_HASHES) else {})}
    common = {"coverage": dict(reached), "minimums": minimums}
    for key in [] if failure else observed.new(known):
        test = None  # a bound below the best is replayed by hand (divergences/test_offloading_load_bound_*.py)
        if key[1] != SHORT_BOUND_WHERE:
            case, safe, got = observed.smallest[key][2]
            test = offloading_test(*case, safe, f"{safe} is the longest safe hit; vLLM returns {got}", key[1])
        failure += observed.new_entry(key, test)
    if failure:
        return CheckResult(Check.OFFLOADING, covered, holds=False, details=failure, **common)
    details = [
        "every hit equals the reference's, is safe and loads what each group reads; no new divergence",
        f"{reached['short']} hits shorter than the longest safe one, by {reached['tokens short']} tokens in all; "
        + observed.summary(known),
        f"load bound (kvspec/gate/offloading_load_bound.py): every bound equals the reference's and lets no load "
        f"past what the groups left out hold; {reached['bound below the best']} bounds below the best, by "
        f"{reached['tokens below the best bound']} tokens in all (filed as divergences above)",
        SPLIT_MAMBA_FINDING,
    ]
    return CheckResult(Check.OFFLOADING, covered, holds=True, details=details, **common)


def observe_short_hit(observed: Observed, case, vllm: Hit, trim_before_cap: bool) -> int:
    """File a hit shorter than the longest safe one under its cause (kvspec/divergences/offloading.py);
    the tokens it lacks."""
    setting, state, num_tokens, cap = case
    safe = max_safe_offload_hit(setting, state, num_tokens, cap)
    if safe <= vllm.length:
        return 0
    where = short_hit_where(setting, state, num_tokens, cap, vllm.length, trim_before_cap)
    size = (len(setting.groups), state.num_hashes, len(state.cached), num_tokens)
    example = f"{describe_offloading(setting, state, num_tokens, cap)}; vLLM hit {vllm.length}, longest safe {safe}"
    observed.add("short-hit", where, size, example, safe - vllm.length, (case, safe, vllm.length))
    return safe - vllm.length


def _count(reached: Counter, case, vllm: Hit) -> None:
    setting, state, num_tokens, cap = case
    reached["lookups"] += 1
    annotated = any(g.is_eagle_group for g in setting.groups)
    reached["hybrid"] += len(setting.groups) > 1
    reached["chunks of 2 blocks"] += setting.blocks_per_chunk == 2
    reached["annotated"] += annotated
    reached["unannotated"] += setting.use_eagle and not annotated
    reached["mamba"] += any(g.kind == Kind.MAMBA for g in setting.groups)
    reached["capped"] += cap is not None
    reached["hit"] += vllm.length > 0
    reached["lookahead hashes"] += setting.lookahead_hashes
    reached["lookahead hashes, annotated, hit"] += setting.lookahead_hashes and annotated and vllm.length > 0

