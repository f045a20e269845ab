"""The engine core's lookup for a request scheduled with a KV connector on real vLLM
(KVCacheManager.get_computed_blocks_for_connector, and the per-group hits of
HybridKVCacheCoordinator.find_longest_cache_hit_per_group it decides from) against the
reference (reference/connector_hits.py) and the rules of spec/connector_hits.py, on random
hybrid models, cache states and requests. Stateless: a fresh real manager per example
(impl/connector_hits.py).

Where it differs from the core's lookup (get_computed_blocks) safely it is a divergence, filed
by kvspec/divergences/connector_hits.py and passing only when recorded in known-divergences.toml:
an unflagged hit shorter than the core's, or a flag on a hit every group could resume at. A new one
prints its plain-vLLM test (kvspec/emit/connector_test.py).

The draws leave out what vLLM asserts against (kvspec/draws/connector_hits.py).
"""

from __future__ import annotations

from collections import Counter

from kvspec.divergences.connector_hits import observe_connector_divergence
from kvspec.divergences.known import Observed
from kvspec.draws.connector_hits import FIXED_CONNECTOR_CASES, connector_cases
from kvspec.emit.connector_test import connector_test
from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult, run_property, scaled
from kvspec.impl.connector_hits import connector_hit
from kvspec.oracles.connector_hits import connector_violations, flagged_hit_gaps
from kvspec.oracles.invariants import require_none
from kvspec.reference.connector_hits import connector_lookup
from kvspec.spec.connector_hits import max_connector_hit, takes_the_per_group_path
from kvspec.spec.layers import Kind
from kvspec.spec.releases import CONNECTOR_LOOKUP_TAKES_A_CAP

CONNECTOR_EXAMPLES = 800
# Per situation, the least a full-budget run must reach (kvspec/gate/coverage.py).
CONNECTOR_MINIMUMS = {
    "per-group path": 300,
    "core's path": 20,
    "flagged diverged": 40,
    "fallback: a group past full attention": 40,
    "per-group agree": 60,
    "EAGLE": 150,
    "window or chunked-local beside Mamba": 60,
    "capped": 100,
    "skips prefix-cache reads": 10,
    "Mamba without full attention": 20,
}


def lookup_limit(adapter, case) -> int:
    """The limit vLLM looks up at: num_tokens - 1, lowered by the cap where the release takes one."""
    _setting, _state, num_tokens, cap, _skip = case
    return max_connector_hit(num_tokens, cap if adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP) else None)


def connector_conforms(adapter, case):
    """vLLM's blocks and numbers equal the reference's and break no rule of spec/connector_hits.py
    (a lagging group's gap under a flag is the connector's to load: flagged_hit_gaps)."""
    setting, state, num_tokens, cap, skip_reads = case
    blocks, answer = connector_hit(adapter, *case)
    reference_blocks, reference = connector_lookup(*case, rules=adapter.rules)
    limit = lookup_limit(adapter, case)
    require_none(connector_violations(blocks, answer, reference_blocks, reference, setting, state, limit),
                 f"connector: {setting} {state} num_tokens={num_tokens} cap={cap} skip_reads={skip_reads}")
    return answer


def check_connector_hits(adapter, options: GateOptions) -> CheckResult:
    """get_computed_blocks_for_connector equals the reference and is safe on the fixed cases and
    ``CONNECTOR_EXAMPLES`` drawn ones; a safe difference from the core passes only when recorded."""
    reached: Counter = Counter()
    observed = Observed()
    known = options.known()
    smallest_gap: dict = {}

    def prop(case):
        answer = connector_conforms(adapter, case)
        _count(reached, case, answer, adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP))
        observe_connector_divergence(observed, adapter, case, lookup_limit(adapter, case), answer)
        if gaps := flagged_hit_gaps(case[0], case[1], lookup_limit(adapter, case), answer):
            reached["flagged hit with an attention gap"] += 1
            if smallest_gap.get("size", 1 << 30) > len(str(case)):
                smallest_gap.update(size=len(str(case)), example=f"{gaps[0]}; {case}")

    failure = []
    for case in FIXED_CONNECTOR_CASES:
        try:
            prop(case)
        except AssertionError as exc:
            failure = [f"fixed case {case}:", *str(exc).splitlines()]
            break
    if not failure:
        failure = run_property(prop, connector_cases(), seed=options.seed,
                               examples=scaled(CONNECTOR_EXAMPLES, options.scale))
    minimums, not_in_release = dict(CONNECTOR_MINIMUMS), []
    if not adapter.has(CONNECTOR_LOOKUP_TAKES_A_CAP):
        del minimums["capped"]
        not_in_release.append("the scheduler's cap (spec/releases.py:CONNECTOR_LOOKUP_TAKES_A_CAP)")
    coverage = dict(reached)
    covered = f"{reached['lookups']} lookups: " + ", ".join(f"{reached[s]} {s}" for s in CONNECTOR_MINIMUMS)
    for key in [] if failure else observed.new(known):
        case, cap, answer = observed.smallest[key][2]
        failure += observed.new_entry(key, connector_test(key[0], case, cap, answer, key[1]))
    if failure:
        return CheckResult(Check.CONNECTOR_HITS, covered, holds=False, details=failure,
                           coverage=coverage, minimums=minimums, not_in_release=not_in_release)
    details = [
        "every answer (hit, hit_diverged, per-group hits, blocks) equals the reference's and is safe; "
        "no new divergence",
        observed.summary(known),
        f"informational: {reached['flagged hit with an attention gap']} flagged hits leave an attention group "
        "lagging full attention; the scheduler falls back when the connector finds no tokens, and every "
        "connector asked this lookup loads the gap when it finds some (oracles/connector_hits.py:"
        f"flagged_hit_gaps; tests/test_connector_hits.py drives NIXL's). Smallest: {smallest_gap.get('example', 'none')}",
    ]
    return CheckResult(Check.CONNECTOR_HITS, covered, holds=True, details=details,
                       coverage=coverage, minimums=minimums, not_in_release=not_in_release)


def _count(reached: Counter, case, answer, capped: bool) -> None:
    setting, _state, _num_tokens, cap, skip_reads = case
    reached["capped"] += capped and cap is not None
    reached["skips prefix-cache reads"] += skip_reads
    reached["Mamba without full attention"] += (any(g.kind == Kind.MAMBA for g in setting.groups)
                                                and not any(g.kind in (Kind.FULL, Kind.MLA) for g in setting.groups))
    reached["lookups"] += 1
    per_group = takes_the_per_group_path(setting)
    reached["per-group path"] += per_group
    reached["core's path"] += not per_group
    reached["EAGLE"] += setting.use_eagle
    kinds = {g.kind for g in setting.groups}
    reached["window or chunked-local beside Mamba"] += Kind.MAMBA in kinds and bool(
        kinds & {Kind.SLIDING_WINDOW, Kind.CHUNKED_LOCAL})
    if per_group and answer.per_group is not None and not skip_reads:
        full = answer.per_group[min(g for g, grp in enumerate(setting.groups) if grp.kind in (Kind.FULL, Kind.MLA))]
        reached["flagged diverged"] += answer.hit_diverged
        reached["fallback: a group past full attention"] += any(h > full for h in answer.per_group)
        reached["per-group agree"] += len(set(answer.per_group)) == 1
