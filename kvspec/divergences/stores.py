"""Where a store-side divergence happens (kvspec/gate/stores.py), named by its cause in vLLM's
rules: a one-token window (store_mask keeps the run of cdiv(W - 1, block) = 0 blocks its lookup
asks for, yet the lookup wants one cached block at the end of the run), chunked local attention
(store_mask keeps every block, but a hit at a block boundary never reads the block that ends a
local chunk), EAGLE (a group whose boundary hit the store's own lookup cannot return, after its
drop and re-alignment, keeps the blocks of that tail), else the groups' kinds."""

from __future__ import annotations

from kvspec.spec.layers import Kind
from kvspec.spec.setting import LookupSetting


def store_where(setting: LookupSetting, blocks: dict[int, frozenset[int]]) -> str:
    """The situation of a store that differs from the reference in the groups of ``blocks``."""
    groups = [setting.groups[gid] for gid in sorted(blocks)]
    if any(g.kind == Kind.SLIDING_WINDOW and g.window == 1 for g in groups):
        cause = "one-token window"
    elif any(g.kind == Kind.CHUNKED_LOCAL for g in groups):
        cause = "chunked local"
    elif setting.use_eagle:
        cause = "EAGLE"
    else:
        cause = ", ".join(sorted({g.kind.value for g in groups}))
    return f"mooncake store: {cause}"
