"""The gate's checks by name, in the order the gate runs them. The name is what a result, the
JSON report, the bug zoo's ``caught_by`` and mutate's targets carry; it is defined here alone."""

from enum import StrEnum


class Check(StrEnum):
    SAVED_FINDS = "saved finds"
    SEED_HYBRID = "seed: hybrid coordinator"
    SEED_MOONCAKE = "seed: Mooncake store"
    WARNING_GATE = "warning gate"
    LIVE_MANAGER = "live KVCacheManager"
    GROUPING = "grouping"
    BLOCK_SIZES = "block sizes"
    LOOKUPS = "prefix-cache lookups"
    OFFLOADING = "offloading connector lookups"
    CONNECTOR_HITS = "connector-scheduled core lookups"
    SIMPLE_OFFLOAD = "SimpleCPUOffload lookups"
    STORES = "store sides"
    STATEFUL = "stateful KVCacheManager"
    PROOFS = "proofs"


class Outcome(StrEnum):
    """What one check's row says about this vLLM (README: "Outcomes and exit codes")."""

    HOLDS = "holds"
    RULE_VIOLATED = "FAILS"  # vLLM broke a rule of spec/: the minimal input and a vLLM test
    VLLM_CRASHED = "vLLM crashed"  # vLLM raised on an input kvspec holds valid
    VLLM_HUNG = "vLLM hung"  # a call into vLLM outlived the deadline
    CANNOT_DRIVE = "cannot drive"  # kvspec's failure: a symbol it drives moved or changed

    @property
    def is_finding(self) -> bool:
        """A claim against vLLM: the gate fails with exit 1."""
        return self in (Outcome.RULE_VIOLATED, Outcome.VLLM_CRASHED, Outcome.VLLM_HUNG)
