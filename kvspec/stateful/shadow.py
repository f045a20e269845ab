"""The shadow: what each physical block of a real ``KVCacheManager``'s pool really holds,
written the way vLLM's worker writes it, independent of vLLM's hash map. It is the ground
truth the stateful check judges every read and every prefix-cache hit by.

* An attention block holds KV for its positions of one token sequence. The KV at position
  ``p`` depends on tokens ``[0, p]``; a drafter's (EAGLE) KV at ``p`` also on token ``p + 1``,
  so a block records the tokens up to its last written position and the one after it.
* A Mamba block holds one recurrent state: the state after exactly ``n`` tokens of one
  sequence. A chunk ``[s, e)`` reads the state at ``s`` from column ``(s - 1) // B`` of the
  request's block table and writes the state at ``e`` into column ``(e - 1) // B``
  (vllm.v1.worker.mamba_utils: the aligned state index ``(seq_len - 1) // block_size`` and the
  pre-copy from the running block); a state computed from a wrong state is wrong.
* Copy-on-write copies run before the step's forward (KVCacheManager.take_kv_cache_block_copies).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.oracles.invariants import STATEFUL_DRAFTER, STATEFUL_SAFE, Violation
from kvspec.spec.hits import window_start
from kvspec.spec.layers import NOT_PREFIX_CACHEABLE_KINDS, CacheGroup, Kind

NULL_BLOCK = 0


@dataclass(frozen=True)
class Kv:
    """Attention KV of group ``group`` for a sequence's positions up to ``len(context) - 1``
    (exclusive): ``context`` is the sequence up to the last written position plus the token
    after it, which a drafter's KV at that position depends on."""

    group: int
    context: tuple[int, ...]


@dataclass(frozen=True)
class State:
    """Group ``group``'s recurrent state after exactly ``tokens``; None when it was computed
    from a wrong state."""

    group: int
    tokens: tuple[int, ...] | None


# A problem only the drafter's KV has (filed under STATEFUL_DRAFTER): the target's KV is right,
# the drafter's KV at the block's last position was computed with another next token (it costs
# draft acceptance). Every other read problem is the target's (STATEFUL_SAFE).
DRAFTER_ONLY = "drafter KV:"


def _holds(content, gid: int, sequence, reach: int) -> bool:
    return (isinstance(content, Kv) and content.group == gid and len(content.context) >= reach
            and content.context[:reach] == tuple(sequence[:reach]))


def describe(content) -> str:
    if content is None:
        return "nothing"
    if isinstance(content, State):
        return f"group {content.group}'s state " + (
            "computed from a wrong state" if content.tokens is None else f"after {len(content.tokens)} tokens"
        )
    return f"group {content.group}'s KV of a {len(content.context) - 1}-token prefix"


class Shadow:
    def __init__(self, groups: tuple[CacheGroup, ...], drafter_groups: frozenset[int]):
        self.groups, self.drafter_groups = groups, drafter_groups
        self.contents: dict[int, Kv | State] = {}

    # ------------------------------------------------------------------ judging
    def read_problems(self, sequence, position: int, tables) -> list[Violation]:
        """Why resuming ``sequence`` at ``position`` from these block tables reads wrong data
        ([] if it reads what it should): per group, the attention window's KV before
        ``position`` (with the token after each position for a drafter group), or the Mamba
        state after exactly ``position`` tokens."""
        if position == 0:
            return []
        return [p for gid, table in enumerate(tables) for p in self.group_read_problems(gid, sequence, position, table)]

    def group_read_problems(self, gid: int, sequence, position: int, table) -> list[Violation]:
        group = self.groups[gid]
        bs = group.block_size
        if position == 0 or group.kind in NOT_PREFIX_CACHEABLE_KINDS:  # scratch: never read from the cache
            return []
        if group.kind == Kind.MAMBA:
            column = (position - 1) // bs
            block = table[column] if column < len(table) else NULL_BLOCK
            if block != NULL_BLOCK and self.contents.get(block) == State(gid, tuple(sequence[:position])):
                return []
            got = "no block" if block == NULL_BLOCK else describe(self.contents.get(block))
            return [Violation(STATEFUL_SAFE, f"group {gid} (mamba) block {column} should hold the state after "
                                             f"{position} tokens, holds {got}")]
        problems = []
        extra = 1 if gid in self.drafter_groups else 0
        for column in range(window_start(group, position) // bs, -(-position // bs)):
            block = table[column] if column < len(table) else NULL_BLOCK
            reach = min((column + 1) * bs, position) + extra
            if block == NULL_BLOCK:
                problems.append(Violation(STATEFUL_SAFE, f"group {gid} ({group.kind}) needs block {column} at {position}: null"))
                continue
            content = self.contents.get(block)
            if _holds(content, gid, sequence, reach):
                continue
            if extra and _holds(content, gid, sequence, reach - 1):
                used = content.context[reach - 1] if len(content.context) >= reach else "no token"
                problems.append(Violation(STATEFUL_DRAFTER, f"{DRAFTER_ONLY} group {gid} ({group.kind}) block {column} "
                                          f"(id {block}) holds the {reach - 1}-token prefix, but its drafter KV at "
                                          f"position {reach - 2} was computed with token {used} after it, not "
                                          f"{sequence[reach - 1]}"))
                continue
            what = f"{reach - extra}-token prefix" + (" and the token after it" if extra else "")
            problems.append(Violation(STATEFUL_SAFE, f"group {gid} ({group.kind}) block {column} (id {block}) should "
                                                     f"hold KV of the {what}, holds {describe(content)}"))
        return problems

    def claim_problems(self, sequence, hit: int, claimed) -> list[Violation]:
        """Why a prefix-cache hit of ``hit`` tokens claiming these blocks is unsafe: what
        resuming there reads, and every real block it claims holding that prefix."""
        problems = self.read_problems(sequence, hit, claimed)
        for gid, (group, table) in enumerate(zip(self.groups, claimed)):
            if group.kind == Kind.MAMBA or group.kind in NOT_PREFIX_CACHEABLE_KINDS:
                continue
            bs = group.block_size
            for column, block in enumerate(table):
                reach = min((column + 1) * bs, hit)
                content = self.contents.get(block)
                if block != NULL_BLOCK and reach > column * bs and not (
                    isinstance(content, Kv) and content.group == gid and content.context[:reach] == tuple(sequence[:reach])
                ):
                    problems.append(Violation(STATEFUL_SAFE, f"group {gid} claims block {column} (id {block}) for the "
                                                             f"{reach}-token prefix, it holds {describe(content)}"))
        return sorted(set(problems), key=lambda problem: problem.detail)

    # ------------------------------------------------------------------ the worker
    def copy(self, source: int, destination: int) -> None:
        content = self.contents.get(source)
        if content is None:
            self.contents.pop(destination, None)
        else:
            self.contents[destination] = content

    def compute(self, sequence, start: int, end: int, tables) -> list[str]:
        """Write what computing ``sequence[start:end]`` into these block tables leaves in the
        pool (``sequence`` holds the token after ``end``, sampled or known); returns the
        positions that had no block to be written to."""
        problems = []
        for gid, (group, table) in enumerate(zip(self.groups, tables)):
            bs = group.block_size
            if group.kind in NOT_PREFIX_CACHEABLE_KINDS:
                # A circular buffer's one ring block holds the open compression group, rewritten
                # in place (CircularBufferSpec); it is never published, so it is not modelled.
                continue
            if group.kind == Kind.MAMBA:
                source_ok = not self.group_read_problems(gid, sequence, start, table)
                column = (end - 1) // bs
                block = table[column] if column < len(table) else NULL_BLOCK
                if block == NULL_BLOCK:
                    problems.append(f"group {gid} (mamba) has no block {column} for the state after {end}")
                else:
                    self.contents[block] = State(gid, tuple(sequence[:end]) if source_ok else None)
                continue
            for column in range(start // bs, (end - 1) // bs + 1):
                block = table[column] if column < len(table) else NULL_BLOCK
                if block == NULL_BLOCK:
                    problems.append(f"group {gid} ({group.kind}) has no block {column} for positions it computes")
                else:
                    self.contents[block] = self._written(gid, block, sequence, column * bs, start, min(end, (column + 1) * bs))
        return problems

    def _written(self, gid: int, block: int, sequence, block_start: int, start: int, end: int) -> Kv:
        """The block's content after positions ``[start, end)`` of ``sequence`` are written
        into it: appended to its earlier positions if those hold the same sequence, else only
        the prefix both sequences share stays meaningful."""
        new = Kv(gid, tuple(sequence[: end + 1]))
        if block_start >= start:
            return new
        old = self.contents.get(block)
        if isinstance(old, Kv) and old.group == gid and old.context[:start] == new.context[:start]:
            return new
        shared = 0
        old_context = old.context if isinstance(old, Kv) and old.group == gid else ()
        while shared < min(len(old_context), start) and old_context[shared] == sequence[shared]:
            shared += 1
        return Kv(gid, tuple(sequence[:shared]))
