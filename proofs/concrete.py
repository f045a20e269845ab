"""From a z3 model of proofs/encoding.py to kvspec's concrete vocabulary (LookupSetting,
CacheState, M in tokens) and back, so that every counterexample replays on the reference model
and on real vLLM, and so that the encoding can be checked against the reference on samples."""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvspec.proofs.encoding import FULL, MAMBA, SW, Len, Scenario
from kvspec.spec.layers import CacheGroup, Kind
from kvspec.spec.setting import CacheState, LookupSetting

UNIT = 16  # tokens per hash unit in a replay; any u >= 2 can carry M's fraction
KINDS = {FULL: Kind.FULL, SW: Kind.SLIDING_WINDOW, MAMBA: Kind.MAMBA}


@dataclass(frozen=True)
class Lookup:
    """One concrete lookup: ``path`` is "hybrid", "unitary" or "mooncake"."""

    path: str
    setting: LookupSetting
    state: CacheState
    max_length: int

    def describe(self) -> str:
        groups = ", ".join(
            f"{g.kind.value}/{g.block_size}" + (f"/w{g.window}" if g.window else "") + ("*" if g.is_eagle_group else "")
            for g in self.setting.groups
        )
        cached = {
            gid: sorted(j for g, j in self.state.cached if g == gid) for gid in range(len(self.setting.groups))
        }
        return (
            f"{self.path} [{groups}] hash={self.setting.hash_block_size} eagle={self.setting.use_eagle} "
            f"partial={self.setting.allow_partial_hash_hits} M={self.max_length} units={self.state.num_hashes} "
            f"cached={cached}"
        )


def _int(model, term) -> int:
    return model.eval(term, model_completion=True).as_long()


def _bool(model, term) -> bool:
    return z3.is_true(model.eval(term, model_completion=True))


def tokens(model, length: Len) -> int:
    return _int(model, length.units) * UNIT + (UNIT // 2 if _bool(model, length.frac) else 0)


def lookup_of(model, sc: Scenario, path: str) -> Lookup:
    groups, windows_used = [], set()
    for g in sc.groups:
        kind, k = KINDS[_int(model, g.kind)], _int(model, g.k)
        block = k * UNIT
        window = None
        if kind == Kind.SLIDING_WINDOW:
            need = _int(model, g.need)
            # Any window with ceil((w - 1) / block) == need; distinct ones keep distinct specs apart.
            window = next(w for w in range(need * block + 1, 0, -1) if (block, w) not in windows_used)
            windows_used.add((block, window))
        groups.append(CacheGroup(kind, block, window=window, is_eagle_group=_bool(model, g.annotated)))
    setting = LookupSetting(tuple(groups), UNIT, _bool(model, sc.eagle), _bool(model, sc.allow_partial))
    cached = frozenset((gid, j) for gid, g in enumerate(sc.groups) for j, b in enumerate(g.bits) if _bool(model, b))
    return Lookup(path, setting, CacheState(_int(model, sc.nh), cached), tokens(model, sc.m))


def pins(sc: Scenario, lookup: Lookup) -> list:
    """Constraints fixing the scenario's inputs to a concrete lookup (windows by ``need``)."""
    s, unit = lookup.setting, lookup.setting.hash_block_size
    facts = [sc.nh == lookup.state.num_hashes, sc.m.units == lookup.max_length // unit]
    facts += [sc.m.frac == z3.BoolVal(lookup.max_length % unit != 0)]
    facts += [sc.eagle == s.use_eagle, sc.allow_partial == s.allow_partial_hash_hits]
    code = {v: c for c, v in KINDS.items()}
    for gid, (g, cg) in enumerate(zip(sc.groups, s.groups)):
        k = cg.block_size // unit
        need = -(-(cg.window - 1) // cg.block_size) if cg.window else 0
        facts += [g.kind == code[cg.kind], g.k == k, g.need == need, g.annotated == cg.is_eagle_group]
        facts += [b == ((gid, j) in lookup.state.cached) for j, b in enumerate(g.bits)]
    return facts
