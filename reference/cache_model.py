"""An obviously-correct model of vLLM's prefix-cache block pool: which ``(block hash, group)``
keys are cached in which blocks, reference counts, the null block, and the free queue whose
order is the eviction order (vllm.v1.core.block_pool:BlockPool, BlockHashToBlockMap,
vllm.v1.core.kv_cache_utils:FreeKVCacheBlockQueue).

It is driven by the pool-level operations vLLM's managers ask for (allocate n blocks, touch
the blocks of a hit, free blocks in an order, cache or uncache a key on a block, reset), and
says what each must do, so that one sequence of operations has one expected outcome:

* block 0 is the null block: never free, never cached, never counted;
* an allocation takes the first ``n`` blocks of the free queue and evicts every key those
  blocks carry (a block is evicted, not a key: other blocks caching the same key keep it);
* a touch takes a free block out of the queue; every touch adds one reference;
* a free drops one reference per listed block; blocks reaching zero go to the front of the
  queue if they carry no key (reused first, in the order given) and to the back otherwise
  (least recently used evicted first);
* keys are never de-duplicated: one key may be cached in several blocks, and a lookup is
  served by the earliest-inserted block still carrying it;
* a reset clears every key, and only succeeds when every block is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

NULL_BLOCK = 0

Key = Hashable  # vLLM's BlockHashWithGroupId: the chained block hash plus the group id


@dataclass
class CacheModel:
    num_blocks: int
    ref_counts: dict[int, int] = field(init=False)
    free_queue: list[int] = field(init=False)  # head first: the next block handed out
    copies: dict[Key, list[int]] = field(init=False)  # key -> blocks caching it, insertion order
    keys_of: dict[int, list[Key]] = field(init=False)  # block -> keys it carries
    evicted_blocks: int = field(init=False, default=0)  # allocations that evicted a cached block

    def __post_init__(self) -> None:
        if self.num_blocks < 2:
            raise ValueError("a pool needs the null block and at least one more")
        self.ref_counts = {b: 0 for b in range(1, self.num_blocks)}
        self.free_queue = list(range(1, self.num_blocks))
        self.copies = {}
        self.keys_of = {}

    # ------------------------------------------------------------------ operations
    def allocate(self, n: int) -> list[int]:
        """The ``n`` blocks the pool hands out: the head of the free queue, each evicted."""
        if n > len(self.free_queue):
            raise ValueError(f"cannot allocate {n} of {len(self.free_queue)} free blocks")
        taken, self.free_queue = self.free_queue[:n], self.free_queue[n:]
        for block in taken:
            self.evicted_blocks += block in self.keys_of
            self.evict(block)
            self.ref_counts[block] = 1
        return taken

    def touch(self, blocks: list[int]) -> None:
        for block in blocks:
            if block == NULL_BLOCK:
                continue
            if self.ref_counts[block] == 0:
                self.free_queue.remove(block)
            self.ref_counts[block] += 1

    def retain(self, blocks: list[int]) -> None:
        """One more reference on held blocks: a copy-on-write endpoint kept alive until the
        worker has copied it (single_type_kv_cache_manager:SingleTypeKVCacheManager._apply_cow)."""
        for block in blocks:
            if self.ref_counts[block] <= 0:
                raise ValueError(f"block {block} retained while free")
            self.ref_counts[block] += 1

    def free(self, ordered_blocks: list[int]) -> None:
        """Release one reference per listed block, in eviction-priority order."""
        unkeyed, keyed = [], []
        for block in ordered_blocks:
            if block == NULL_BLOCK:
                continue
            if self.ref_counts[block] <= 0:
                raise ValueError(f"block {block} freed with no reference held")
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                (keyed if self.keys_of.get(block) else unkeyed).append(block)
        self.free_queue = unkeyed + self.free_queue + keyed

    def cache(self, key: Key, block: int) -> None:
        """Cache ``key`` on ``block`` (a no-op if the block already carries it)."""
        if block == NULL_BLOCK:
            raise ValueError("the null block is never cached")
        if block in self.copies.get(key, ()):
            return
        self.copies.setdefault(key, []).append(block)
        self.keys_of.setdefault(block, []).append(key)

    def uncache(self, key: Key, block: int) -> None:
        """Remove ``key`` from ``block`` only; other copies of the key stay cached."""
        holders = self.copies.get(key, [])
        if block in holders:
            holders.remove(block)
            if not holders:
                del self.copies[key]
            self.keys_of[block].remove(key)
            if not self.keys_of[block]:
                del self.keys_of[block]

    def evict(self, block: int) -> None:
        for key in list(self.keys_of.get(block, ())):
            self.uncache(key, block)

    def reset(self) -> bool:
        if any(self.ref_counts.values()):
            return False
        self.copies.clear()
        self.keys_of.clear()
        return True

    # ------------------------------------------------------------------ observations
    def served(self, key: Key) -> int | None:
        """The block a lookup of ``key`` returns: the earliest-inserted copy still cached."""
        holders = self.copies.get(key)
        return holders[0] if holders else None

    def cached_keys(self) -> set[Key]:
        return set(self.copies)

    def copies_snapshot(self) -> dict[Key, tuple[int, ...]]:
        return {key: tuple(blocks) for key, blocks in self.copies.items()}

    def num_free(self) -> int:
        return len(self.free_queue)


def replay(model: CacheModel, operations) -> list[str]:
    """Apply recorded pool operations to ``model``; returns where vLLM's recorded outcome
    differs from the model's (an allocation handing out other blocks than the free queue's
    head). Operations: ("allocate", ids), ("touch", ids), ("retain", ids), ("free", ids), ("cache", key, id),
    ("uncache", key, id[, during_free]), ("reset", succeeded)."""
    problems = []
    for operation in operations:
        kind = operation[0]
        if kind == "allocate":
            expected = model.allocate(len(operation[1]))
            if list(operation[1]) != expected:
                problems.append(f"vLLM allocated blocks {list(operation[1])}, the free queue's head is {expected}")
        elif kind == "touch":
            model.touch(list(operation[1]))
        elif kind == "retain":
            model.retain(list(operation[1]))
        elif kind == "free":
            model.free(list(operation[1]))
        elif kind == "cache":
            model.cache(operation[1], operation[2])
        elif kind == "uncache":
            model.uncache(operation[1], operation[2])
        elif kind == "reset":
            if model.reset() != operation[1]:
                problems.append(f"vLLM's reset returned {operation[1]}, the model's {not operation[1]}")
        else:
            raise ValueError(f"unknown pool operation {kind!r}")
    return problems
