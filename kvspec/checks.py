"""The checks ``kvspec check`` runs against the target vLLM, each a function of the adapter
that returns what it covered and whether vLLM held. Later checks (grouping, hit length,
proofs) join the list in ``CHECKS``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from kvspec.impl.vllm_adapter import CacheState, VllmAdapter
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode


@dataclass
class CheckResult:
    name: str
    covered: str
    holds: bool
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return "holds" if self.holds else "FAILS"


# The seed scenario (vLLM #43559 / #48361): full attention and Mamba, block 16, four blocks
# cached in both groups, a 65-token prompt so the hit is capped at 64.
SEED_GROUPS = [CacheGroup(Kind.FULL, 16), CacheGroup(Kind.MAMBA, 16)]
SEED_STATE = CacheState.full_prefix(num_groups=2, num_hashes=4)
SEED_MAX_LENGTH = 64
# With EAGLE, full attention drops its last block (48) and Mamba must resume at that same
# verified prefix; without EAGLE every cached block is usable (64).
SEED_EXPECTED = {True: 48, False: 64}
SEED_COVERED = "[full 16, mamba 16], 4 blocks cached, M=64, EAGLE on/off"


def _seed_check(name: str, lookup: Callable[..., object]) -> CheckResult:
    result = CheckResult(name, SEED_COVERED, holds=True)
    for use_eagle, expected in SEED_EXPECTED.items():
        got = lookup(SEED_GROUPS, SEED_STATE, SEED_MAX_LENGTH, use_eagle=use_eagle).hit_length
        label = "EAGLE" if use_eagle else "no EAGLE"
        if got == expected:
            result.details.append(f"{label}: hit {got}")
        else:
            result.holds = False
            result.details.append(f"{label}: vLLM hit {got}, expected {expected}")
    return result


def check_seed_hybrid(adapter: VllmAdapter) -> CheckResult:
    return _seed_check("seed: hybrid coordinator", adapter.coordinator_hit)


def check_seed_mooncake(adapter: VllmAdapter) -> CheckResult:
    return _seed_check("seed: Mooncake store", adapter.mooncake_hit)


def check_warning_gate(adapter: VllmAdapter) -> CheckResult:
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
    result = CheckResult("warning gate", covered, holds=True)
    for label, (layers, should_warn) in cases.items():
        warned = adapter.group_layers(layers, SpecDecode("eagle")).warned_unannotated_eagle
        ok = warned == should_warn
        result.holds &= ok
        expected = "warns" if should_warn else "silent"
        got = "warns" if warned else "silent"
        result.details.append(f"{label}: {got}" + ("" if ok else f", expected {expected}"))
    return result


def check_live_manager(adapter: VllmAdapter) -> CheckResult:
    """A real KVCacheManager serves a finished request's prompt to the next identical one."""
    result = CheckResult("live KVCacheManager", "full 16, 65-token prompt twice", holds=True)
    manager = adapter.live_manager([CacheGroup(Kind.FULL, 16)], num_blocks=16)
    prompt = list(range(65))
    manager.add_request("first", prompt)
    first_hit = manager.admit("first", first_chunk=len(prompt))
    manager.finish("first")
    manager.add_request("second", prompt)
    second_hit = manager.admit("second", first_chunk=len(prompt))
    # 64 = four full blocks; the 65th token is always recomputed for its logits.
    result.holds = (first_hit, second_hit) == (0, 64)
    result.details.append(f"hits {first_hit} then {second_hit}, expected 0 then 64")
    return result


CHECKS: list[Callable[[VllmAdapter], CheckResult]] = [
    check_seed_hybrid,
    check_seed_mooncake,
    check_warning_gate,
    check_live_manager,
]


def run_checks(adapter: VllmAdapter) -> list[CheckResult]:
    results = []
    for check in CHECKS:
        started = time.perf_counter()
        result = check(adapter)
        result.seconds = time.perf_counter() - started
        results.append(result)
    return results
