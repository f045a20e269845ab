"""The gate's Hypothesis-driven properties beyond the lookups and grouping, each as one judge of
one drawn case: what kvspec/tools/fuzz_targets_checks.py makes campaign targets of and
kvspec/gate/saved_finds.py replays a saved find with.

A judge is its check's own per-case function (the check's ``*_conforms``, then the same filing
of divergences), on the check's own draws, so a campaign judges as the gate does: a violated rule
raises ``Violated`` (vLLM's own exception for a crash); a divergence the check would file that
known-divergences.toml does not record raises ``NewDivergence`` (the gate fails on it too); a
recorded one passes (the gate counts it).

Not here: the core and Mooncake lookups and drawn groupings (kvspec/tools/fuzz_targets.py), the stateful
machine (kvspec/stateful/campaign.py), the fixed scenarios and saved finds (nothing drawn), and the
proofs (Z3 over the spec, not Hypothesis over vLLM).
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Callable

from hypothesis.errors import HypothesisDeprecationWarning

from kvspec.divergences.connector_hits import observe_connector_divergence
from kvspec.divergences.known import Observed, load
from kvspec.draws import codec
from kvspec.draws.block_sizes import MARGIN_CASES, dcp_and_cache_cases, group_lists_and_units
from kvspec.draws.connector_hits import connector_cases
from kvspec.draws.lookups import LOOKUP_MIX, dcp_lookups, lookups
from kvspec.draws.models import worker_splits
from kvspec.draws.offloading import bounded_offload_cases, offload_cases
from kvspec.draws.offloading_stores import offload_store_cases
from kvspec.draws.simple_offload import simple_offload_cases
from kvspec.draws.stores import store_cases
from kvspec.emit.lookup_test import told_partial_hits
from kvspec.gate.block_sizes import margin_as_the_spec_says, resolves_as_spec_dcp_says, resolves_as_the_spec_says
from kvspec.gate.connector_hits import connector_conforms, lookup_limit
from kvspec.gate.grouping import workers_conform
from kvspec.gate.lookups import dcp_core_conforms, load_mask_conforms, observe_divergences
from kvspec.gate.names import Check
from kvspec.gate.offloading import observe_short_hit, offloading_conforms, reference_offloading, vllm_offloading
from kvspec.gate.offloading_load_bound import load_bound_part
from kvspec.gate.offloading_stores import observe_offload_store, offloading_store_conforms
from kvspec.gate.simple_offload import observe_short_match, simple_offload_violations
from kvspec.gate.stores import mooncake_store_conforms, observe_store_divergences
from kvspec.impl.offloading import trims_window_before_cap
from kvspec.oracles.invariants import NEW_DIVERGENCE, Violated, Violation, most_severe, require_none, violations_of
from kvspec.oracles.situations import (
    block_sizes_situation,
    grouping_situation,
    lookup_situation,
    margin_situation,
    offloading_situation,
    simple_offload_situation,
)
from kvspec.spec.dcp import DcpSetting
from kvspec.spec.offloading import OffloadSetting
from kvspec.spec.offloading_stores import OffloadStoreCase
from kvspec.spec.releases import HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE
from kvspec.spec.simple_offload import SimpleOffloadCase
from kvspec.spec.stores import StoreCase, StoreSave

for _cls in (DcpSetting, OffloadSetting, OffloadStoreCase, SimpleOffloadCase, StoreCase, StoreSave):
    codec.register(_cls)  # a saved find's input is plain data (kvspec/draws/codec.py)


class NewDivergence(Violated):
    """A safe departure from the best the spec allows that known-divergences.toml does not
    record: the gate's check fails on it, printing the entry to record."""

    def __init__(self, observed: Observed, new: list[tuple[str, str]]):
        self.key = new[0]  # (kind, where): the situation a campaign files it under
        super().__init__([Violation(NEW_DIVERGENCE, observed.new_entry(key)[0]) for key in new])


def no_new_divergence(observed: Observed, known: dict) -> None:
    if new := observed.new(known):
        raise NewDivergence(observed, new)


def no_new_lookup_divergence(adapter, path: str, case, hit, known: dict) -> None:
    """The prefix-cache lookups check's filing of a conforming hit ("core" or "mooncake"): shorter
    than the longest safe one, or another path answering the prompt differently
    (kvspec/gate/lookups.py:observe_divergences)."""
    observed = Observed()
    observe_divergences(observed, adapter, path, case, hit)
    no_new_divergence(observed, known)


@cache
def recorded() -> dict:
    """known-divergences.toml, read once: what the gate's default run excuses."""
    return load()


# ----------------------------------------------------------------------------- the judges
# Each takes (adapter, case, the recorded divergences) and returns nothing: it raises on failure.
def _workers(adapter, case, known) -> None:
    workers_conform(adapter, case)


def _block_sizes(adapter, case, known) -> None:
    resolves_as_the_spec_says(adapter, *case)


def _margins(adapter, case, known) -> None:
    # The gate runs no margin where the engine resolves none (spec/releases.py): nothing to judge.
    if adapter.has(HIT_ALIGNMENT_RESOLVED_BY_THE_ENGINE):
        margin_as_the_spec_says(adapter, case)


def _dcp_block_sizes(adapter, case, known) -> None:
    resolves_as_spec_dcp_says(adapter, case)


def _dcp_lookups(adapter, case, known) -> None:
    dcp_core_conforms(adapter, case)


def _load_masks(adapter, case, known) -> None:
    load_mask_conforms(adapter, case)


def _offloading(adapter, case, known) -> None:
    observed = Observed()
    observe_short_hit(observed, case, offloading_conforms(adapter, case), trims_window_before_cap(adapter))
    no_new_divergence(observed, known)


def _load_bound(adapter, case, known) -> None:
    observed, trim = Observed(), trims_window_before_cap(adapter)
    prop, _ = load_bound_part(adapter, Counter(), observed, lambda c, vllm: observe_short_hit(observed, c, vllm, trim),
                              vllm_offloading, reference_offloading)
    prop(case)
    no_new_divergence(observed, known)


def _connector(adapter, case, known) -> None:
    observed = Observed()
    observe_connector_divergence(observed, adapter, case, lookup_limit(adapter, case), connector_conforms(adapter, case))
    no_new_divergence(observed, known)


def _simple_offload(adapter, case, known) -> None:
    observed = Observed()
    matched, found = simple_offload_violations(adapter, case)
    require_none(found, f"simple-offload: {case}")
    observe_short_match(observed, adapter, case, matched)
    no_new_divergence(observed, known)


def _mooncake_stores(adapter, case, known) -> None:
    observed = Observed()
    comparison = mooncake_store_conforms(adapter, case)
    observe_store_divergences(observed, case, comparison, told_partial_hits(adapter.rules, case.setting))
    no_new_divergence(observed, known)


def _offloading_stores(adapter, case, known) -> None:
    observed = Observed()
    observe_offload_store(observed, case, offloading_store_conforms(adapter, case))
    no_new_divergence(observed, known)


@dataclass(frozen=True)
class GateProperty:
    check: Check  # the gate's check that runs it
    draws: Callable[[], object]  # the check's strategy, as it draws it
    judge: Callable[[object, object, dict], None]
    situation: Callable[[object], str]  # kvspec/oracles/situations.py: what a find is filed under


# By campaign target name (no commas: ``kvspec fuzz --targets`` takes a comma-separated list).
GATE_PROPERTIES: dict[str, GateProperty] = {
    "grouping across workers": GateProperty(Check.GROUPING, worker_splits, _workers,
                                            lambda case: grouping_situation(case[0]) + " two workers"),
    "block sizes": GateProperty(Check.BLOCK_SIZES, group_lists_and_units, _block_sizes,
                                lambda case: block_sizes_situation(*case)),
    "EAGLE margins": GateProperty(Check.BLOCK_SIZES, lambda: MARGIN_CASES, _margins, margin_situation),
    "block sizes under DCP or no caching": GateProperty(Check.BLOCK_SIZES, dcp_and_cache_cases, _dcp_block_sizes,
                                                        lambda case: block_sizes_situation(*case)),
    "DCP core lookups": GateProperty(Check.LOOKUPS, dcp_lookups, _dcp_lookups,
                                     lambda case: lookup_situation(f"core DCP {case[0].dcp}", case[0])),
    "Mooncake load masks": GateProperty(Check.LOOKUPS, lambda: lookups(LOOKUP_MIX), _load_masks,
                                        lambda case: lookup_situation("mooncake load mask", case[0])),
    "offloading lookups": GateProperty(Check.OFFLOADING, offload_cases, _offloading,
                                       lambda case: offloading_situation("offloading", case[0])),
    "offloading load bound": GateProperty(Check.OFFLOADING, bounded_offload_cases, _load_bound,
                                          lambda case: offloading_situation("offloading load bound", case[0])),
    "connector lookups": GateProperty(Check.CONNECTOR_HITS, connector_cases, _connector,
                                      lambda case: lookup_situation("connector", case[0])),
    "SimpleCPUOffload lookups": GateProperty(Check.SIMPLE_OFFLOAD, simple_offload_cases, _simple_offload,
                                             simple_offload_situation),
    "Mooncake stores": GateProperty(Check.STORES, store_cases, _mooncake_stores,
                                    lambda case: lookup_situation("mooncake store", case.setting)),
    "offloading stores": GateProperty(Check.STORES, offload_store_cases, _offloading_stores,
                                      lambda case: offloading_situation("offloading store", case.setting)),
}


def exception_key(name: str, case, exc: BaseException) -> tuple[str, str, str]:
    """(invariant, situation, message) of ``exc``, raised judging ``case``: a new divergence is
    filed under its own (kind, where), as the gate and known-divergences.toml name it."""
    invariant, message = most_severe(violations_of(exc, otherwise=f"{GATE_PROPERTIES[name].check}: an assertion of its check"))
    if isinstance(exc, NewDivergence):
        return invariant, " ".join(exc.key), message
    return invariant, GATE_PROPERTIES[name].situation(case), message


def property_key(name: str, adapter, case, known: dict | None = None) -> tuple[str, str, str]:
    """(invariant, situation, message) of judging ``case`` again; the message is empty if it
    holds (or the case is one the check filters out)."""
    try:
        with warnings.catch_warnings():  # the check's assume() outside a test: the case met it once already
            warnings.simplefilter("ignore", HypothesisDeprecationWarning)
            GATE_PROPERTIES[name].judge(adapter, case, recorded() if known is None else known)
    except Exception as exc:  # noqa: BLE001 - a crash on the input is a verdict too
        if type(exc).__name__ != "UnsatisfiedAssumption":
            return exception_key(name, case, exc)
    return f"{GATE_PROPERTIES[name].check} conformance", GATE_PROPERTIES[name].situation(case), ""
