"""What a request writes to the Mooncake store: which of its blocks the store side puts, as
rules over the blocks a later lookup on the store's path reads (spec/hits.py, reference/lookup.py:
mooncake_lookup).

vLLM's store side (mooncake/store/worker.py:_handle_request) saves a request in steps: each save
covers the tokens ``[start, end)`` computed since the last one, both on the scheduler block (the
lcm of the groups' block sizes, ``checkpoint_len``), and puts, per group, the blocks of that range
``MooncakeStoreCoordinator.store_mask`` marks (``_reachable_masks``; ``None`` marks them all). A
save's mask of group ``g`` is indexed from the group's first block at or after ``start``
(``store_block_range``).

Two kinds of rule, each a property returning its violations (like spec/grouping_properties.py):

* SAFETY (``store_safety_violations``): a save puts only blocks the request holds computed KV
  for, in the group they belong to. That is, per group, a mask exactly as long as the group's
  blocks in ``[start, end)`` (a longer mask names a block past the computed tokens; a shorter or
  longer one is a mask built for another group's block size), one mask per group, and no block
  of a Mamba group: an align-mode Mamba table is not append-only (interior states are nulled or
  freed, speculative decoding relocates state blocks in place), so a positional put may write a
  null, freed or speculative state under a valid prefix hash (store_mask's docstring, 0.30 to
  0.33). Mamba states reach the store only through the exact hand-off of the core
  (``boundary_state_offloads``), not modelled here (MAMBA_STATES_BY_HANDOFF).
* COMPLETENESS (``store_completeness_gaps``): the saves of a request put every block of its
  computed range that a later lookup on this path reads at a hit it could return on a scheduler
  block boundary (STORE_KEEPS_EVERY_REACHABLE_TAIL; store_mask passes ``alignment_tokens=
  lcm_block_size``). A gap is not a failure to hide: kvspec records it as a divergence. Hits
  inside a block (partial hits, only at Mamba's prompt checkpoint) are stored by another put
  (scheduler.py:_partial_tail_non_mamba_puts) and are outside these rules.

Which blocks a lookup reads is reference/stores.py's business (brute force over the lookup);
this module says what the saves must and must not put, given that answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.layers import Kind
from kvspec.spec.resolution import scheduler_block_size
from kvspec.spec.setting import LookupSetting

# The rules, each naming the vLLM symbol it models.
STORE_PUTS_ONLY_HELD_BLOCKS = (
    "a save puts, per group, only blocks within the tokens it covers "
    "(mooncake/store/coordinator.py:MooncakeStoreCoordinator._reachable_masks, start_block/end_block)"
)
MAMBA_STATES_BY_HANDOFF = (
    "a Mamba group's states are never put positionally "
    "(MooncakeStoreCoordinator.store_mask, exclude_mamba=True; scheduler.py:_handle_boundary_state_offloads)"
)
STORE_KEEPS_EVERY_REACHABLE_TAIL = (
    "every block a later lookup reads at a scheduler-block boundary within the saved tokens is put "
    "(MooncakeStoreCoordinator._reachable_masks over SingleTypeKVCacheManager.reachable_block_mask)"
)


@dataclass(frozen=True)
class StoreSave:
    """One save of the store's worker: tokens ``[start, end)``, both multiples of the scheduler
    block (worker.py:_handle_request: ``save_start`` and ``checkpoint_len``)."""

    start: int
    end: int


@dataclass(frozen=True)
class StoreCase:
    """A request's saves on the Mooncake store path: the lookup setting (groups, hash unit,
    EAGLE, partial hits), its prompt, and the saves in order, each starting where the last ended."""

    setting: LookupSetting
    num_prompt_tokens: int
    saves: tuple[StoreSave, ...]

    def __post_init__(self) -> None:
        lcm, start = scheduler_block_size(self.setting), 0
        for save in self.saves:
            if save.start != start or save.end <= save.start or save.end % lcm or save.end > self.num_prompt_tokens:
                raise ValueError(f"saves must tile [0, end) on the scheduler block {lcm}: {self.saves}")
            start = save.end

    @property
    def saved_tokens(self) -> int:
        return self.saves[-1].end if self.saves else 0


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def store_block_range(setting: LookupSetting, gid: int, save: StoreSave) -> range:
    """The blocks of group ``gid`` a save covers: from the first starting at or after ``start``
    to the last ending at or before ``end`` (_reachable_masks: ``cdiv(start_token, block_size)``,
    ``aligned_token_len // block_size``)."""
    block = setting.groups[gid].block_size
    end = save.end // block
    return range(min(end, _cdiv(save.start, block)), end)


def stored_blocks(setting: LookupSetting, save: StoreSave, masks) -> dict[int, frozenset[int]]:
    """The block indices each group puts, read from a save's masks (``None``: every block of
    the range), indexed from the range's first block as vLLM's worker reads them."""
    stored = {}
    for gid, mask in enumerate(masks):
        if gid >= len(setting.groups):
            break
        first = store_block_range(setting, gid, save).start
        covered = store_block_range(setting, gid, save) if mask is None else range(first, first + len(mask))
        stored[gid] = frozenset(i for j, i in enumerate(covered) if mask is None or mask[j])
    return stored


def store_safety_violations(setting: LookupSetting, save: StoreSave, masks) -> list[str]:
    """Every way a save's ``masks`` would put a block the request does not hold for that group
    (STORE_PUTS_ONLY_HELD_BLOCKS, MAMBA_STATES_BY_HANDOFF)."""
    found = []
    if len(masks) != len(setting.groups):
        found.append(f"{len(masks)} masks for {len(setting.groups)} groups: a group's blocks put under another's")
    for gid, mask in enumerate(masks[: len(setting.groups)]):
        span = store_block_range(setting, gid, save)
        if mask is not None and len(mask) != len(span):
            beyond = [span.start + j for j in range(len(span), len(mask)) if mask[j]]
            found.append(
                f"group {gid}: a mask of {len(mask)} blocks for the {len(span)} of tokens [{save.start}, {save.end})"
                + (f", putting blocks {beyond} past the computed tokens" if beyond else "")
            )
        if setting.groups[gid].kind == Kind.MAMBA and (mask is None or any(mask)):
            put = sorted(stored_blocks(setting, save, masks)[gid])
            found.append(f"Mamba group {gid}: states {put} put positionally, not by the exact hand-off")
    return found


def store_completeness_gaps(
    setting: LookupSetting, needed: dict[int, frozenset[int]], stored: dict[int, frozenset[int]]
) -> dict[int, frozenset[int]]:
    """Per group, the blocks a later lookup reads (``needed``, reference/stores.py) that no save
    put (STORE_KEEPS_EVERY_REACHABLE_TAIL); empty groups left out."""
    gaps = {gid: needed.get(gid, frozenset()) - stored.get(gid, frozenset()) for gid in range(len(setting.groups))}
    return {gid: blocks for gid, blocks in gaps.items() if blocks}


def store_unread_blocks(
    setting: LookupSetting, needed: dict[int, frozenset[int]], stored: dict[int, frozenset[int]]
) -> dict[int, frozenset[int]]:
    """Per group, blocks put that no later lookup reads at a boundary: safe, but space the store
    spends on nothing (a divergence, recorded like a gap)."""
    extra = {gid: stored.get(gid, frozenset()) - needed.get(gid, frozenset()) for gid in range(len(setting.groups))}
    return {gid: blocks for gid, blocks in extra.items() if blocks}
