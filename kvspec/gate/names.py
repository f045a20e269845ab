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
    STATEFUL = "stateful KVCacheManager"
    PROOFS = "proofs"
