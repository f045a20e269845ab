"""The obviously-correct prediction of what a request must put in the Mooncake store
(spec/stores.py): by brute force over the store path's own lookup (reference/lookup.py:
mooncake_lookup), the blocks some later lookup reads at a scheduler-block boundary.

For each boundary ``h`` within the saved tokens, a later request shares the prefix up to ``h``
and one scheduler block more; the store holds every block ending by ``h``, Mamba's state at every
hash unit by ``h`` (the hand-off path stores those), and, for a group that drops its last block
under EAGLE, the blocks of the scheduler block after ``h`` (the one after ``h`` proves it; when
a block is shorter than the scheduler block the drop is followed by a round-down to it, so a hit
at ``h`` is found only from a run reaching the next boundary). The later request is capped at ``h``
(its prompt ends one token past it), or at one scheduler block more (a longer prompt, for a
release whose EAGLE look stops at the cap); either way no group that reads a block can go past
``h``, and the lookup returns ``h`` iff ``h`` is a hit this path can return. A block of the request is needed
iff taking it out of that store lowers the lookup below ``h`` for some such ``h``. Blocks after
the saved tokens (a proof block past the last save) are some other request's to put.
"""

from __future__ import annotations

import functools

from kvspec.reference.lookup import mooncake_lookup, spec_groups
from kvspec.spec.layers import Kind
from kvspec.spec.releases import NEWEST_RULES
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.setting import CacheState, LookupSetting


def dropping_groups(setting: LookupSetting) -> frozenset[int]:
    """The groups the store's lookup asks to drop their last block: those of a spec group with
    an annotated member, or every group when EAGLE is on and none is annotated
    (mooncake/store/coordinator.py:MooncakeStoreCoordinator._verify_and_split_kv_cache_groups)."""
    annotated = frozenset(gid for gid, g in enumerate(setting.groups) if g.is_eagle_group)
    groups = spec_groups(setting, annotated, by_role=False)
    if setting.use_eagle and not any(sg.drops for sg in groups):
        return frozenset(range(len(setting.groups)))
    return frozenset(gid for sg in groups if sg.drops for gid in sg.group_ids)


def _block_entry(setting: LookupSetting, gid: int, block: int) -> tuple[int, int]:
    """The store's key of a group's block: the hash unit that ends it."""
    per_block = setting.groups[gid].block_size // setting.hash_block_size
    return gid, (block + 1) * per_block - 1


def store_at_boundary(setting: LookupSetting, boundary: int) -> CacheState:
    """The store a later request meets at ``boundary``: every block ending by it, Mamba's state
    at every unit by it, each dropping group's blocks up to the next boundary; the request runs
    one scheduler block past it."""
    hash_bs, drops, lcm = setting.hash_block_size, dropping_groups(setting), scheduler_block_size(setting)
    num_hashes = (boundary + lcm) // hash_bs
    entries = set()
    for gid, group in enumerate(setting.groups):
        if group.kind == Kind.MAMBA:
            entries |= {(gid, j) for j in range(boundary // hash_bs)}
            continue
        blocks = (boundary + (lcm if gid in drops else 0)) // group.block_size
        entries |= {_block_entry(setting, gid, i) for i in range(blocks)}
    return CacheState(num_hashes, frozenset(entries))


@functools.lru_cache(maxsize=4096)
def needed_blocks(setting: LookupSetting, saved_tokens: int, rules=NEWEST_RULES) -> dict[int, frozenset[int]]:
    """Per non-Mamba group, the blocks of the first ``saved_tokens`` tokens that a later lookup
    on the Mooncake path (for a release with ``rules``) reads at some scheduler-block boundary
    within them: the blocks whose absence lowers that lookup below the boundary."""
    lcm = scheduler_block_size(setting)
    needed: dict[int, set[int]] = {gid: set() for gid, g in enumerate(setting.groups) if g.kind != Kind.MAMBA}
    for boundary, cap in ((b, c) for b in range(lcm, saved_tokens + 1, lcm) for c in (b, b + lcm)):
        store = store_at_boundary(setting, boundary)
        if mooncake_lookup(setting, store, cap, rules).length != boundary:
            continue  # not a hit this path returns at this cap: nothing there to keep
        for gid in needed:
            own = saved_tokens // setting.groups[gid].block_size  # this request's blocks
            for block in range(own):
                entry = _block_entry(setting, gid, block)
                if block in needed[gid] or entry not in store.cached:
                    continue
                without = CacheState(store.num_hashes, store.cached - {entry})
                if mooncake_lookup(setting, without, cap, rules).length < boundary:
                    needed[gid].add(block)
    return {gid: frozenset(blocks) for gid, blocks in needed.items()}
