"""The obviously-correct prediction of what a request must store on the OffloadingConnector
(spec/offloading_stores.py): by brute force over the connector's own lookup
(reference/offloading.py:offloading_lookup), the chunks some later lookup reads.

A later request shares this request's computed prefix and may be any length (every hash-unit
multiple up to two of the longest chunks past the computed tokens, and one token more, so each
hit ends where the later prompt does or one token before it; under lookahead hashes only the
second, ``later_prompts``). The store it meets holds every
chunk ending by then (past the computed tokens, another request's: an EAGLE group's proof
chunk), Mamba's state at every chunk end (the boundary hand-off stores those). A chunk of a
non-Mamba group within the computed tokens is needed iff taking it out of that store lowers some
such lookup.
"""

from __future__ import annotations

import functools

from kvspec.reference.offloading import offloading_lookup
from kvspec.spec.layers import Kind
from kvspec.spec.offloading import OffloadSetting, chunk_key, tokens_per_chunk
from kvspec.spec.setting import CacheState


def full_store(setting: OffloadSetting, computed: int) -> dict[tuple[int, int], int]:
    """Every chunk ending within ``computed`` tokens: ``(group, hash index) -> chunk``."""
    return {
        (gid, chunk_key(setting, gid, chunk)): chunk
        for gid in range(len(setting.groups))
        for chunk in range(computed // tokens_per_chunk(setting, gid))
    }


def later_prompts(setting: OffloadSetting, units: int) -> tuple[int, ...]:
    """The lengths of a later prompt that carries ``units`` hashes, one ending at the last unit
    and one a token past it; under lookahead hashes a unit is hashed only once the token after it
    exists, so only the second (spec/caching.py:hashed_units)."""
    end = units * setting.hash_block_size
    return (end + 1,) if setting.lookahead_hashes else (end, end + 1)


@functools.lru_cache(maxsize=4096)
def needed_chunks(setting: OffloadSetting, computed: int) -> dict[int, frozenset[int]]:
    """Per non-Mamba group, the chunks within ``computed`` tokens a later lookup reads."""
    hash_bs = setting.hash_block_size
    longest = max(tokens_per_chunk(setting, gid) for gid in range(len(setting.groups)))
    horizon = computed + 2 * longest  # what other requests stored past this one
    entries = full_store(setting, horizon)
    needed: dict[int, set[int]] = {gid: set() for gid, g in enumerate(setting.groups) if g.kind != Kind.MAMBA}
    for units in range(1, horizon // hash_bs + 1):
        held = frozenset(e for e in entries if e[1] < units)
        for num_tokens in later_prompts(setting, units):
            state = CacheState(units, held)
            hit = offloading_lookup(setting, state, num_tokens).length
            if not hit:
                continue
            for entry in held:
                gid, chunk = entry[0], entries[entry]
                size = tokens_per_chunk(setting, gid)
                if gid not in needed or chunk in needed[gid] or (chunk + 1) * size > computed:
                    continue
                if offloading_lookup(setting, CacheState(units, held - {entry}), num_tokens).length < hit:
                    needed[gid].add(chunk)
    return {gid: frozenset(chunks) for gid, chunks in needed.items()}
