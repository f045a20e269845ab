"""The rest of the gate's Hypothesis-driven properties as campaign targets, beside the lookups
and grouping of kvspec/tools/fuzz_targets.py and in its pattern: grouping across two workers,
block sizes (with the EAGLE
margins and the DCP / no-caching resolution), the core lookups under DCP and the Mooncake load
masks, the OffloadingConnector's lookups and load bound, the connector-scheduled core lookups,
SimpleCPUOffload's lookups, and both store sides. Each draws what its gate check draws and judges
with the check's own per-case function (kvspec/gate/properties.py); what it breaks is filed under
(invariant, situation), and a saved find's (invariant, situation) lets its input pass.

A divergence known-divergences.toml records passes, as in the gate; a new one fails, filed under
its own (kind, where). The proofs are Z3 over the spec, not Hypothesis over vLLM: no target.
"""

from __future__ import annotations

from hypothesis import given

from kvspec.gate.names import Check
from kvspec.gate.properties import GATE_PROPERTIES, exception_key, property_key, recorded
from kvspec.tools.fuzz_targets import KNOWN, LAST, adapter, observe


def key(name: str, case) -> tuple[str, str, str]:
    """(invariant, situation, message) of an input ``name``'s property failed on."""
    return property_key(name, adapter(), case)


def _judged(name: str, case) -> None:
    LAST[name] = case
    observe(name, GATE_PROPERTIES[name].situation(case))
    try:
        GATE_PROPERTIES[name].judge(adapter(), case, recorded())
    except Exception as exc:
        if type(exc).__name__ == "UnsatisfiedAssumption" or tuple(exception_key(name, case, exc)[:2]) not in KNOWN:
            raise


# ----------------------------------------------------------------------------- the tests
# One function each, undecorated (as in fuzz_targets.py): the example database keys a test by
# its function's source, so each target needs its own.
def grouping_across_workers(case):
    _judged("grouping across workers", case)


def block_sizes(case):
    _judged("block sizes", case)


def eagle_margins(case):
    _judged("EAGLE margins", case)


def block_sizes_under_dcp_or_no_caching(case):
    _judged("block sizes under DCP or no caching", case)


def dcp_core_lookups(case):
    _judged("DCP core lookups", case)


def mooncake_load_masks(case):
    _judged("Mooncake load masks", case)


def offloading_lookups(case):
    _judged("offloading lookups", case)


def offloading_load_bound(case):
    _judged("offloading load bound", case)


def connector_lookups(case):
    _judged("connector lookups", case)


def simple_offload_lookups(case):
    _judged("SimpleCPUOffload lookups", case)


def mooncake_stores(case):
    _judged("Mooncake stores", case)


def offloading_stores(case):
    _judged("offloading stores", case)


_FUNCTIONS = {
    "grouping across workers": grouping_across_workers,
    "block sizes": block_sizes,
    "EAGLE margins": eagle_margins,
    "block sizes under DCP or no caching": block_sizes_under_dcp_or_no_caching,
    "DCP core lookups": dcp_core_lookups,
    "Mooncake load masks": mooncake_load_masks,
    "offloading lookups": offloading_lookups,
    "offloading load bound": offloading_load_bound,
    "connector lookups": connector_lookups,
    "SimpleCPUOffload lookups": simple_offload_lookups,
    "Mooncake stores": mooncake_stores,
    "offloading stores": offloading_stores,
}
assert set(_FUNCTIONS) == set(GATE_PROPERTIES), "a test for every gate property"
# target -> (property, strategy), as fuzz_targets.PROPERTIES
PROPERTIES = {name: (function, GATE_PROPERTIES[name].draws()) for name, function in _FUNCTIONS.items()}
# Every campaign target, by the gate check whose properties it runs.
TARGET_CHECKS: dict[str, Check] = {
    "core lookups": Check.LOOKUPS,
    "Mooncake lookups": Check.LOOKUPS,
    "grouping": Check.GROUPING,
    **{name: prop.check for name, prop in GATE_PROPERTIES.items()},
    "stateful": Check.STATEFUL,
}

# What pytest and HypoFuzz collect (kvspec/tools/fuzz_suite.py re-exports them).
test_grouping_across_workers = given(GATE_PROPERTIES["grouping across workers"].draws())(grouping_across_workers)
test_block_sizes = given(GATE_PROPERTIES["block sizes"].draws())(block_sizes)
test_eagle_margins = given(GATE_PROPERTIES["EAGLE margins"].draws())(eagle_margins)
test_block_sizes_under_dcp_or_no_caching = given(GATE_PROPERTIES["block sizes under DCP or no caching"].draws())(
    block_sizes_under_dcp_or_no_caching)
test_dcp_core_lookups = given(GATE_PROPERTIES["DCP core lookups"].draws())(dcp_core_lookups)
test_mooncake_load_masks = given(GATE_PROPERTIES["Mooncake load masks"].draws())(mooncake_load_masks)
test_offloading_lookups = given(GATE_PROPERTIES["offloading lookups"].draws())(offloading_lookups)
test_offloading_load_bound = given(GATE_PROPERTIES["offloading load bound"].draws())(offloading_load_bound)
test_connector_lookups = given(GATE_PROPERTIES["connector lookups"].draws())(connector_lookups)
test_simplecpuoffload_lookups = given(GATE_PROPERTIES["SimpleCPUOffload lookups"].draws())(simple_offload_lookups)
test_mooncake_stores = given(GATE_PROPERTIES["Mooncake stores"].draws())(mooncake_stores)
test_offloading_stores = given(GATE_PROPERTIES["offloading stores"].draws())(offloading_stores)
