"""An operational model of the OffloadingConnector's complete-chunk lookup: what vLLM computes,
step by step, over the chunks a store holds (spec/offloading.py says which answers are safe).

Modelled: offloading/scheduler.py:OffloadingConnectorScheduler._lookup_complete_chunks with no
locally computed tokens, no per-request ``max_load_tokens`` and a store that answers every
lookup at once (HIT or MISS, never deferred); the partial-tail extension is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvspec.spec.layers import FULL_ATTENTION_KINDS, Kind
from kvspec.spec.offloading import OffloadSetting, chunk_key, tokens_per_chunk
from kvspec.spec.setting import CacheState, Hit


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GroupView:
    """One group as the lookup sees it (offloading/scheduler.py:GroupOffloadConfig)."""

    gid: int
    chunk: int  # tokens per chunk
    window: int | None  # chunks the group reads back (None: full attention)
    drafter: bool  # pops its trailing chunk (is_eagle_group, no lookahead hashes)
    spec_window: int | None  # SWA only: the window in tokens, for the load window


def window_chunks(setting: OffloadSetting, gid: int) -> int | None:
    """Chunks a group reads back: a sliding window's ceil(W / chunk), a local-attention chunk's
    ceil(C / chunk), one for Mamba's state, None for full attention
    (offloading/config.py:get_sliding_window_size_in_chunks)."""
    group, chunk = setting.groups[gid], tokens_per_chunk(setting, gid)
    if group.kind in FULL_ATTENTION_KINDS:
        return None
    if group.kind == Kind.SLIDING_WINDOW:
        return max(_cdiv(group.window, chunk), _cdiv(group.window - 1, chunk))
    if group.kind == Kind.CHUNKED_LOCAL:
        return _cdiv(group.chunk, chunk)
    return 1


def load_window(view: GroupView, end: int) -> int | None:
    """Chunks a load ending at ``end`` brings for the group: a sliding window also covers the
    window's start when ``end`` falls inside a chunk
    (offloading/scheduler.py:GroupOffloadConfig.load_window_size_in_chunks)."""
    if view.spec_window is None:
        return view.window
    return max(view.window, _cdiv(view.spec_window - 1 + (-end % view.chunk), view.chunk))


def lookup_order(setting: OffloadSetting) -> list[GroupView]:
    """Full attention first in group order, then the windowed groups, widest window first
    (OffloadingConnectorScheduler.__init__, _lookup_groups)."""
    views = [
        GroupView(
            gid,
            tokens_per_chunk(setting, gid),
            window_chunks(setting, gid),
            group.is_eagle_group and not setting.lookahead_hashes,
            group.window if group.kind == Kind.SLIDING_WINDOW else None,
        )
        for gid, group in enumerate(setting.groups)
    ]
    full = [v for v in views if v.window is None]
    return full + sorted((v for v in views if v.window is not None), key=lambda v: -v.window)


def initial_cap(setting: OffloadSetting, num_tokens: int, cap: int | None, trim_before_cap: bool) -> int:
    """The first bound on the hit: the request, less one token when a windowed group must
    recompute the last one, within the cap, rounded down to Mamba's chunk. ``trim_before_cap``
    is whether the target has spec/releases.py:OFFLOADING_TRIMS_WINDOW_BEFORE_CAP (the token
    comes off before the cap, so a tighter cap is already a boundary) or takes it off after."""
    windowed = any(window_chunks(setting, gid) is not None for gid in range(len(setting.groups)))
    bound = num_tokens
    if windowed and trim_before_cap:
        bound -= 1
    if cap is not None:
        bound = min(bound, cap)
    if windowed and not trim_before_cap:
        bound -= 1
    mamba = [tokens_per_chunk(setting, gid) for gid, g in enumerate(setting.groups) if g.kind == Kind.MAMBA]
    if windowed and mamba:
        bound -= bound % mamba[0]
    return bound


class Store:
    """The chunks held, by group (an OffloadingManager answering HIT or MISS)."""

    def __init__(self, setting: OffloadSetting, state: CacheState):
        self.setting, self.state = setting, state

    def has(self, gid: int, chunk: int) -> bool:
        return (gid, chunk_key(self.setting, gid, chunk)) in self.state.cached

    def leading_run(self, gid: int, num_chunks: int) -> int:
        """Chunks cached from the first on (_maximal_prefix_lookup)."""
        run = 0
        while run < num_chunks and self.has(gid, run):
            run += 1
        return run

    def rightmost_run_end(self, gid: int, num_chunks: int, window: int, first_window: int) -> int:
        """Scanning from the right, the end of the first run of cached chunks long enough: the
        rightmost run needs ``first_window``, any run left of a miss ``window``; with none, the
        run from chunk 0 (_sliding_window_lookup)."""
        run, needed = 0, first_window
        for chunk in reversed(range(num_chunks)):
            if self.has(gid, chunk):
                run += 1
                if run == needed:
                    return chunk + needed
            else:
                run, needed = 0, window
        return run


def offloading_lookup(
    setting: OffloadSetting,
    state: CacheState,
    num_tokens: int,
    cap: int | None = None,
    *,
    trim_before_cap: bool = True,
) -> Hit:
    """The connector's hit and, per group, which chunks of it the load brings (True) or leaves
    out (False). Each group in turn may only lower the bound; a drafter group looks one chunk
    past it and pops that chunk, once, until a non-drafter group lowers the bound; a lowering
    after a windowed group re-checks the windowed groups."""
    store, order = Store(setting, state), lookup_order(setting)
    num_keys = {v.gid: state.num_hashes * setting.hash_block_size // v.chunk for v in order}
    bound = initial_cap(setting, num_tokens, cap, trim_before_cap)
    hit, verified, pending = 0, set(), order
    while pending:
        passed_window, views, pending = False, pending, []
        for view in views:
            eager = view.drafter and view.gid not in verified
            bound = min(bound, num_keys[view.gid] * view.chunk)
            if bound < view.chunk:
                return _miss(setting)
            query = min(bound + view.chunk, num_keys[view.gid] * view.chunk) if eager else bound
            num_chunks = min(_cdiv(query, view.chunk), num_keys[view.gid])
            if view.window is None:
                found = store.leading_run(view.gid, num_chunks)
            else:
                end = min(bound, (num_chunks - eager) * view.chunk)
                found = store.rightmost_run_end(
                    view.gid, num_chunks, view.window + eager, load_window(view, end) + eager
                )
            if found == 0:
                return _miss(setting)
            if eager:
                found -= 1
                verified.add(view.gid)
            bound = min(bound, view.chunk * found)
            if bound < view.chunk:
                return _miss(setting)
            if bound < hit:
                if not view.drafter:
                    verified.clear()
                if passed_window and not pending:
                    pending = [v for v in order if v.window is not None]
            passed_window |= view.window is not None
            hit = bound
    return Hit(hit, tuple(_loaded(view, hit) for view in sorted(order, key=lambda v: v.gid)))


def _loaded(view: GroupView, hit: int) -> tuple[bool, ...]:
    """The chunks of the hit a load brings: all of them, or the last load window's
    (the hit chunks _lookup_complete_chunks checks against chunks already being loaded)."""
    total = _cdiv(hit, view.chunk)
    window = load_window(view, hit)
    first = 0 if window is None else max(0, total - window)
    return tuple(chunk >= first for chunk in range(total))


def _miss(setting: OffloadSetting) -> Hit:
    return Hit(0, tuple(() for _ in setting.groups))
