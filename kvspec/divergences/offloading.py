"""Why an OffloadingConnector hit is shorter than the longest safe one (spec/offloading.py): the
situation key the offloading check files a short hit under in known-divergences.toml.

The key names a cause, not a configuration, so that other seeds land on the same keys. Each
cause is one rule of vLLM's lookup (offloading/scheduler.py:_lookup_complete_chunks) that is
stricter than the spec. The rules are added one at a time to the spec's safety, in this order,
and the key is the first rule under which the longest acceptable hit is no longer than vLLM's:

0. ``cap less one token``: with a windowed group vLLM 0.33 takes the recomputed last token off
   the capped bound, not off the prompt (0.34 does not), so a cap below the prompt loses a token.
1. ``inside a chunk``: a hit ends at a chunk end of some group or at the request's bound (the
   prompt, less the recomputed token with a windowed group, the cap, Mamba's rounding); the spec
   may resume anywhere a hash unit ends inside a stored chunk.
2. ``less than a chunk``: a hit is at least one chunk of every group ("We can only load less than
   a chunk, so skip").
3. ``window of W tokens``: a sliding window of W needs the ceil(W / chunk) chunks before the hit
   (config.py:get_sliding_window_size_in_chunks; GroupOffloadConfig.load_window_size_in_chunks),
   where the spec needs the W - 1 tokens before it.
4. ``local chunk read whole``: chunked local attention needs ceil(C / chunk) chunks before the
   hit, like a window of C tokens; the spec needs the tokens from the hit's local chunk start.
5. ``EAGLE pop``: an annotated group needs the chunk after the hit stored (it queries one chunk
   past the bound and pops it), Mamba included; the spec needs one hash unit past the hit, and
   nothing from Mamba.

A short hit none of these explains is ``unexplained``: a new cause, which the check fails on.
"""

from __future__ import annotations

from kvspec.emit.describe import describe_group, ranges
from kvspec.reference.offloading import initial_cap, load_window, lookup_order
from kvspec.spec.layers import Kind
from kvspec.spec.offloading import OffloadSetting, chunk_key, offload_unsafe_reason, tokens_per_chunk
from kvspec.spec.setting import CacheState

PREFIX = "offloading"
UNEXPLAINED = "unexplained"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _stored(setting: OffloadSetting, state: CacheState, gid: int, chunk: int) -> bool:
    return 0 <= chunk and (gid, chunk_key(setting, gid, chunk)) in state.cached


def _windowed(setting: OffloadSetting, kind: Kind):
    """The lookup views (reference/offloading.py:GroupView) of the groups of ``kind``."""
    return [view for view in lookup_order(setting) if setting.groups[view.gid].kind == kind]


def _window_rule(setting: OffloadSetting, state: CacheState, kind: Kind):
    """vLLM's window: the load window's chunks ending at the hit's last chunk, all stored (a run
    from chunk 0 shorter than the window also serves)."""
    views = _windowed(setting, kind)

    def holds(hit: int) -> bool:
        for view in views:
            end = _cdiv(hit, view.chunk)
            first = max(0, end - load_window(view, hit))
            if not all(_stored(setting, state, view.gid, c) for c in range(first, end)):
                return False
        return True

    return holds


def causes(setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None, trim_before_cap: bool):
    """(name, rule) in ladder order; a rule says whether vLLM's lookup can stop at a hit."""
    bound = initial_cap(setting, num_tokens, cap, trim_before_cap)
    chunks = [tokens_per_chunk(setting, gid) for gid in range(len(setting.groups))]
    drafters = [gid for gid, g in enumerate(setting.groups) if g.is_eagle_group]
    return (
        ("cap less one token", lambda h: h <= bound),
        ("inside a chunk", lambda h: h == bound or any(h % c == 0 for c in chunks)),
        ("less than a chunk", lambda h: all(h >= c for c in chunks)),
        ("window of W tokens", _window_rule(setting, state, Kind.SLIDING_WINDOW)),
        ("local chunk read whole", _window_rule(setting, state, Kind.CHUNKED_LOCAL)),
        ("EAGLE pop", lambda h: all(_stored(setting, state, g, _cdiv(h, chunks[g])) for g in drafters)),
    )


def short_hit_cause(
    setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None, hit: int, trim_before_cap: bool = True
) -> str:
    """The first rule of the ladder (module doc) that brings the longest acceptable hit down to
    ``hit`` or below, or UNEXPLAINED."""
    limit = num_tokens if cap is None else min(num_tokens, cap)
    candidates = sorted(
        {h for h in set(range(0, limit + 1, setting.hash_block_size)) | {limit}
         if h > hit and offload_unsafe_reason(setting, state, h, num_tokens, cap) is None},
        reverse=True,
    )
    rules = []
    for name, rule in causes(setting, state, num_tokens, cap, trim_before_cap):
        rules.append(rule)
        if not any(all(r(h) for r in rules) for h in candidates):
            return name
    return UNEXPLAINED


def short_hit_where(
    setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None, hit: int, trim_before_cap: bool = True
) -> str:
    """The known-divergences key of a short offloading hit: ``offloading <cause>``."""
    return f"{PREFIX} {short_hit_cause(setting, state, num_tokens, cap, hit, trim_before_cap)}"


def describe_offloading(setting: OffloadSetting, state: CacheState, num_tokens: int, cap: int | None) -> str:
    """An offloading lookup in one readable line: groups, chunking, EAGLE, prompt, stored chunks, cap."""
    groups = ", ".join(f"{gid}: {describe_group(g)}" for gid, g in enumerate(setting.groups))
    stored = "; ".join(
        f"group {gid} chunks {ranges(j // (tokens_per_chunk(setting, gid) // setting.hash_block_size) for g, j in state.cached if g == gid)}"
        for gid in range(len(setting.groups))
    )
    return (
        f"the OffloadingConnector; groups [{groups}]; hash unit {setting.hash_block_size} tokens; "
        f"{setting.blocks_per_chunk} block(s) per chunk; EAGLE {'on' if setting.use_eagle else 'off'}; "
        f"prompt of {num_tokens} tokens ({state.num_hashes} units); stored: {stored}; "
        f"cap {'none' if cap is None else cap}"
    )
