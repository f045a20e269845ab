"""What a prefix-cache lookup is asked and what it answers, as plain frozen data: the setting
(groups, hash unit, EAGLE, partial hits), the cached entries, and the hit.

Cache entries are ``(group_id, hash_index)``: the chained hash of the first
``(hash_index + 1) * hash_block_size`` tokens is cached for that group (spec/hits.py says which
hits those entries make safe, spec/resolution.py how vLLM resolves the sizes involved).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import wraps

from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, CacheGroup


def remembered(rule):
    """A rule of one frozen setting, worked out once per setting object and kept on it: the
    stateful check asks a setting's sizes at every column of every step. Kept in the instance's
    ``__dict__``, outside the fields, so equality, hashing, repr and encoding do not see it, and
    ``dataclasses.replace`` starts afresh."""
    kept = f"_remembered_{rule.__name__}"

    @wraps(rule)
    def answer(setting):
        try:
            return setting.__dict__[kept]
        except KeyError:
            setting.__dict__[kept] = value = rule(setting)
            return value

    return answer


@dataclass(frozen=True)
class LookupSetting:
    """Everything a lookup's answer depends on besides the cache and ``M``."""

    groups: tuple[CacheGroup, ...]
    hash_block_size: int
    use_eagle: bool = False  # the scheduler's use_eagle_block_drop, with no lookahead hashes
    allow_partial_hash_hits: bool = True

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a lookup needs at least one group")
        for group in self.groups:  # a group outside prefix caching is never hashed (resolution.hashing_sizes)
            if group.block_size % self.hash_block_size and group.kind not in NOT_PREFIX_CACHEABLE_KINDS:
                raise ValueError(f"block size {group.block_size} is not a multiple of the hash unit")

    @property
    def dcp(self) -> int:
        """Decode-context-parallel ranks: one, since the groups carry the block sizes the managers
        see. The resolution rules read it (spec/resolution.py); spec/dcp.py:DcpSetting carries
        more. A property, not a field, so a setting's equality, repr and encoding stay as they were."""
        return 1


@dataclass(frozen=True)
class CacheState:
    """The cached ``(group_id, hash_index)`` entries over ``num_hashes`` hash units."""

    num_hashes: int
    cached: frozenset[tuple[int, int]]

    @classmethod
    def full_prefix(cls, num_groups: int, num_hashes: int) -> "CacheState":
        """Every group holds every one of the ``num_hashes`` units."""
        return cls(num_hashes, frozenset((g, i) for g in range(num_groups) for i in range(num_hashes)))


@dataclass(frozen=True)
class Hit:
    """A lookup's answer: the hit length, and per group, for each block of the hit, whether a
    real block is reused (False: a null placeholder the group does not read)."""

    length: int
    real_blocks: tuple[tuple[bool, ...], ...]
