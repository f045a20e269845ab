"""The gate's fixed scenarios: the seed report's hit on the hybrid coordinator and the Mooncake
store (vLLM #43559 / #48361), the unannotated-EAGLE warning gate (#56791), and a live
``KVCacheManager`` serving a finished prompt to the next request."""

from __future__ import annotations

from typing import Callable

from kvspec.gate.names import Check
from kvspec.gate.options import GateOptions
from kvspec.gate.result import CheckResult
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode
from kvspec.spec.setting import CacheState, LookupSetting

# The seed scenario (vLLM #43559 / #48361): full attention and Mamba, block 16, four blocks
# cached in both groups, a 65-token prompt so the hit is capped at 64.
SEED_GROUPS = [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)]
SEED_STATE = CacheState.full_prefix(num_groups=2, num_hashes=4)
SEED_MAX_LENGTH = 64
# With EAGLE, full attention drops its last block (48) and Mamba must resume at that same
# verified prefix; without EAGLE every cached block is usable (64).
SEED_EXPECTED = {True: 48, False: 64}
SEED_COVERED = "[full 16, mamba 16], 4 blocks cached, M=64, EAGLE on/off"


def _seed_check(name: Check, lookup: Callable[..., object]) -> CheckResult:
    outcomes, holds = [], True
    for use_eagle, expected in SEED_EXPECTED.items():
        # Block sizes as the engine core resolves them for these groups (the hash unit below
        # is only what that resolution gives): the seed drives vLLM's resolution too.
        setting = LookupSetting(tuple(SEED_GROUPS), SEED_GROUPS[0].block_size, use_eagle)
        got = lookup(setting, SEED_STATE, SEED_MAX_LENGTH, engine_block_sizes=True).length
        label = "EAGLE" if use_eagle else "no EAGLE"
        holds &= got == expected
        outcomes.append(f"{label}: hit {got}" if got == expected else f"{label}: vLLM hit {got}, expected {expected}")
    return CheckResult(name, SEED_COVERED, holds=holds, details=["; ".join(outcomes)])


def check_seed_hybrid(adapter, options: GateOptions) -> CheckResult:
    return _seed_check(Check.SEED_HYBRID, adapter.coordinator_hit)


def check_seed_mooncake(adapter, options: GateOptions) -> CheckResult:
    return _seed_check(Check.SEED_MOONCAKE, adapter.mooncake_hit)


def check_warning_gate(adapter, options: GateOptions) -> CheckResult:
    """The unannotated-eagle warning fires with a Mamba group and stays silent without one."""
    full, mamba = LayerSpec(Kind.FULL, 16), LayerSpec(Kind.MAMBA, 16, state_bytes=4096)
    cases = {
        "attention + Mamba": (
            {"model.layers.0.attn": full, "model.layers.1.mixer": mamba},
            True,
        ),
        "attention only": (
            {"model.layers.0.attn": full, "model.layers.1.attn": full},
            False,
        ),
    }
    covered = "eagle, no draft layer: attention + Mamba / attention only"
    outcomes, holds = [], True
    for label, (layers, should_warn) in cases.items():
        warned = adapter.group_layers(layers, SpecDecode("eagle")).warned_unannotated_eagle
        holds &= warned == should_warn
        got, expected = ("warns" if w else "silent" for w in (warned, should_warn))
        outcomes.append(f"{label}: {got}" + ("" if got == expected else f", expected {expected}"))
    return CheckResult(Check.WARNING_GATE, covered, holds=holds, details=["; ".join(outcomes)])


def check_live_manager(adapter, options: GateOptions) -> CheckResult:
    """A real KVCacheManager serves a finished request's prompt to the next identical one."""
    manager = adapter.live_manager([CacheGroup(Kind.FULL, 16)], num_blocks=16)
    prompt = list(range(65))
    manager.add_request("first", prompt)
    first_hit = _admitted_hit(manager.schedule("first", len(prompt)))
    manager.finish("first")
    manager.add_request("second", prompt)
    second_hit = _admitted_hit(manager.schedule("second", len(prompt)))
    # 64 = four full blocks; the 65th token is always recomputed for its logits.
    return CheckResult(Check.LIVE_MANAGER, "full 16, 65-token prompt twice", holds=(first_hit, second_hit) == (0, 64),
                       details=[f"hits {first_hit} then {second_hit}, expected 0 then 64"])


def _admitted_hit(step) -> int | None:
    """The prefix-cache hit of an admitting step; None when the pool could not hold the chunk."""
    return None if step is None else step.hit
