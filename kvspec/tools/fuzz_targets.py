"""The gate's properties as plain Hypothesis tests, for long campaigns: ``kvspec fuzz`` runs
them in rounds, and HypoFuzz (``hypothesis fuzz -- kvspec/tools/fuzz_suite.py``) can schedule them
by coverage. Both use the same test functions, so they share the example database's keys: what
one finds, the other replays. Here the core and Mooncake lookups and grouping; every other
Hypothesis-driven check's properties are in kvspec/tools/fuzz_targets_checks.py, the stateful
machine in kvspec/stateful/campaign.py. The proofs (Z3) have no target.

The lookups draw and judge as the gate's check (kvspec/gate/lookups.py), filing divergences as it
does: one known-divergences.toml records passes, a new one fails, filed under its (kind, where).

Each test knows the finds already saved (kvspec/gate/saved_finds.py) and lets an input pass when the
(invariant, situation) it breaks is one of them, so that a campaign spends its time looking
for new bugs instead of rediscovering one. The target vLLM comes from KVSPEC_VLLM /
KVSPEC_VLLM_SRC, with the variants in KVSPEC_INJECT (comma-separated) applied, unless the
campaign hands its own adapter to ``use``.
"""

from __future__ import annotations

import os

from hypothesis import given, settings

from kvspec.draws.lookups import LOOKUP_MIX, lookups
from kvspec.draws.models import models
from kvspec.gate import saved_finds as finds
from kvspec.gate.grouping import conformance_failures
from kvspec.gate.lookups import core_conforms, mooncake_conforms, vllm_coordinator, vllm_mooncake
from kvspec.gate.properties import NewDivergence, no_new_lookup_divergence, recorded
from kvspec.impl.broken import applied
from kvspec.impl.target import resolve
from kvspec.impl.vllm_adapter import VllmAdapter
from kvspec.oracles.invariants import CRASHED, NEW_DIVERGENCE, Violation, most_severe
from kvspec.oracles.lookups import lookup_violations
from kvspec.oracles.situations import grouping_situation, lookup_situation
from kvspec.stateful import campaign
from kvspec.stateful.campaign import KNOWN, LAST, OBSERVERS, REACHED, campaign_machine, observe, use  # noqa: F401
from kvspec.tools import fuzz_db

STATEFUL_STEPS = 30  # the gate's
if os.environ.get("KVSPEC_FUZZ_DB"):  # under HypoFuzz: the campaign's database (a directory or Redis), no deadline
    settings.register_profile("kvspec-fuzz", database=fuzz_db.database(os.environ["KVSPEC_FUZZ_DB"], "KVSPEC_FUZZ_DB"),
                              deadline=None)
    settings.load_profile("kvspec-fuzz")


def adapter():
    """The campaign's adapter, or one made from the environment (under HypoFuzz)."""
    if campaign.current_adapter() is None:

        made = VllmAdapter(resolve())
        injected = [name for name in os.environ.get("KVSPEC_INJECT", "").split(",") if name]
        applied(made, injected).__enter__()  # for the life of the process
        use(made, {(f["invariant"], f["situation"]) for f in finds.load()})
    return campaign.current_adapter()


# ----------------------------------------------------------------------------- what broke
def lookup_key(path: str, case) -> tuple[str, str, str]:
    """(invariant, situation, message) of a lookup the gate's property failed on."""
    setting, state, max_length = case
    try:
        hit = (vllm_coordinator if path == "core" else vllm_mooncake)(adapter(), setting, state, max_length)
        broken = lookup_violations(path, hit, setting, state, max_length, known=recorded(), rules=adapter().rules)
        if not broken:
            no_new_lookup_divergence(adapter(), path, case, hit, recorded())
    except NewDivergence as exc:
        return NEW_DIVERGENCE, " ".join(exc.key), exc.violations[0].detail
    except Exception as exc:  # noqa: BLE001
        broken = [Violation(CRASHED, f"{type(exc).__name__}: {exc}")]
    invariant, message = most_severe(broken) if broken else ("lookup conformance (kvspec/gate/lookups.py)", "")
    return invariant, lookup_situation(path, setting), message


def grouping_key(model) -> tuple[str, str, str]:
    try:
        broken = conformance_failures(adapter(), model)
    except Exception as exc:  # noqa: BLE001
        broken = [Violation(CRASHED, f"{type(exc).__name__}: {exc}")]
    invariant, message = most_severe(broken) if broken else ("grouping conformance", "")
    return invariant, grouping_situation(model), message


def _masked(key) -> bool:
    return tuple(key[:2]) in KNOWN


# ----------------------------------------------------------------------------- the tests
# Undecorated, so that each campaign round wraps them afresh (Hypothesis allows one settings
# object per test); the database key is the function's digest either way.
def core_lookups(case):
    LAST["core lookups"] = case
    observe("core lookups", lookup_situation("core", case[0]))
    try:
        no_new_lookup_divergence(adapter(), "core", case, core_conforms(adapter(), case, recorded()), recorded())
    except Exception as exc:
        if type(exc).__name__ == "UnsatisfiedAssumption" or not _masked(lookup_key("core", case)):
            raise


def mooncake_lookups(case):
    LAST["Mooncake lookups"] = case
    observe("Mooncake lookups", lookup_situation("mooncake", case[0]))
    try:
        no_new_lookup_divergence(adapter(), "mooncake", case, mooncake_conforms(adapter(), case, recorded()),
                                 recorded())
    except Exception as exc:
        if type(exc).__name__ == "UnsatisfiedAssumption" or not _masked(lookup_key("mooncake", case)):
            raise


def grouping(model):
    LAST["grouping"] = model
    observe("grouping", grouping_situation(model))
    problems = conformance_failures(adapter(), model)
    if problems and not _masked(grouping_key(model)):
        raise AssertionError("\n".join(problems))


# target -> (property, strategy)
PROPERTIES = {
    "core lookups": (core_lookups, lookups(LOOKUP_MIX)),  # the gate's mix: issue 15's kinds too
    "Mooncake lookups": (mooncake_lookups, lookups(LOOKUP_MIX)),
    "grouping": (grouping, models()),
}
# What pytest and HypoFuzz collect.
test_core_lookups = given(lookups(LOOKUP_MIX))(core_lookups)
test_mooncake_lookups = given(lookups(LOOKUP_MIX))(mooncake_lookups)
test_grouping = given(models())(grouping)
