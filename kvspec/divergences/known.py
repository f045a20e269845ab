"""Known divergences: real vLLM behaviour that is safe but not the best the spec allows (a hit
shorter than the longest safe one, two paths answering one prompt differently, a hit that
shrinks when the cache grows). Each is recorded in ``known-divergences.toml`` with its reason,
a minimal example and the plain-vLLM test that replays it; the gate counts the known ones and
fails on any new one. A safety violation is never a divergence: it always fails.

A divergence is identified by its kind and *where* it happens, a coarse situation (the path,
one group or several, EAGLE on or off, a one-token window) so that the same behaviour met on
another seed is recognised, and a behaviour in a new situation is not.

A hit that is DRAFTER-UNPROVEN (spec/hits.py: the target's KV and state all there, but the
drafter's KV at the hit's last position not proven to have been computed with this request's
next token) costs draft acceptance, not output, and is recorded the same way (kind
``drafter-unproven``). With ``--strict-drafter`` the recorded
ones are ignored, so every such hit fails.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kvspec.impl.target import PROJECT_ROOT, TargetError
from kvspec.spec.layers import Kind
from kvspec.spec.setting import LookupSetting

KNOWN_FILE = PROJECT_ROOT / "known-divergences.toml"
KINDS = ("short-hit", "paths-disagree", "non-monotone", "drafter-unproven", "store-incomplete", "store-unread")
DRAFTER_KIND = "drafter-unproven"
FIELDS = ("id", "kind", "where", "reason", "example", "test")


@dataclass(frozen=True)
class KnownDivergence:
    id: str
    kind: str
    where: str
    reason: str
    example: str
    test: str  # the plain-vLLM test replaying the example (a path in the repository)
    replayed_on: tuple[str, ...] = ()


def load(path: Path = KNOWN_FILE, strict_drafter: bool = False) -> dict[tuple[str, str], KnownDivergence]:
    """The recorded divergences by (kind, where), without the drafter-unproven ones when
    ``strict_drafter``; a malformed file is a one-line TargetError."""
    known = _load(path)
    if strict_drafter:
        return {key: entry for key, entry in known.items() if entry.kind != DRAFTER_KIND}
    return known


def _load(path: Path) -> dict[tuple[str, str], KnownDivergence]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise TargetError(f"known divergences: {path}: no such file") from None
    except OSError as exc:  # a directory, unreadable
        raise TargetError(f"known divergences: {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TargetError(f"known divergences: {path}: not valid TOML ({exc})") from None
    entries = data.get("divergence", [])
    if not isinstance(entries, list) or set(data) - {"divergence"}:
        raise TargetError(f"known divergences: {path}: expected only [[divergence]] tables")
    known: dict[tuple[str, str], KnownDivergence] = {}
    for number, entry in enumerate(entries, 1):
        where = f"known divergences: {path}: entry {number}"
        if not isinstance(entry, dict):
            raise TargetError(f"{where}: not a table")
        missing = [name for name in FIELDS if not isinstance(entry.get(name), str) or not entry[name].strip()]
        if missing:
            raise TargetError(f"{where}: missing or empty {', '.join(missing)}")
        unknown = set(entry) - set(FIELDS) - {"replayed_on"}
        if unknown:
            raise TargetError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        if entry["kind"] not in KINDS:
            raise TargetError(f"{where}: kind {entry['kind']!r} is not one of {', '.join(KINDS)}")
        replayed = entry.get("replayed_on", [])
        if not isinstance(replayed, list) or not all(isinstance(v, str) for v in replayed):
            raise TargetError(f"{where}: replayed_on must be a list of vLLM versions")
        divergence = KnownDivergence(**{**entry, "replayed_on": tuple(replayed)})
        key = (divergence.kind, divergence.where)
        if key in known:
            raise TargetError(f"{where}: {divergence.kind} at {divergence.where!r} is already entry {known[key].id!r}")
        known[key] = divergence
    return known


# ------------------------------------------------------------------------- where it happens
def shape(setting: LookupSetting) -> str:
    return "one group" if len(setting.groups) == 1 else "several groups"


def one_token_window(setting: LookupSetting) -> bool:
    return any(g.kind == Kind.SLIDING_WINDOW and g.window == 1 for g in setting.groups)


def short_hit_where(path: str, setting: LookupSetting) -> str:
    """Without EAGLE the only known cause of a short hit is a one-token window."""
    if setting.use_eagle:
        return f"{path} {shape(setting)} EAGLE"
    return f"{path} one-token window" if one_token_window(setting) else f"{path} {shape(setting)} no EAGLE"


def paths_where(paths: str, setting: LookupSetting, longer: str, cause: str = "") -> str:
    eagle = "EAGLE" if setting.use_eagle else "no EAGLE"
    return f"{paths} {shape(setting)} {eagle}{' ' + cause if cause else ''}, {longer} longer"


def core_loop_cause(setting: LookupSetting, core_shorter: bool) -> str:
    """Why the core's HybridKVCacheCoordinator loop answers below a path that looks each group
    up once (Mooncake's single spec group, the connector's per-group lookup): with EAGLE, a
    group verified with the drop is looked up again without it once the candidate shrinks, and
    a one-token window then wants a cached block ending at the candidate (SlidingWindowManager
    needs no contiguous block yet still a cached one). Other shortfalls keep the plain key."""
    return "one-token window" if core_shorter and setting.use_eagle and one_token_window(setting) else ""


def drafter_where(path: str, setting: LookupSetting, cause: str = "nothing proves the token at the hit") -> str:
    """Where a drafter-unproven hit happens: the path, the shape, whether a group is annotated
    (else vLLM flags every group, warning when one is Mamba), Mamba present, and the cause."""
    annotated = "annotated" if any(g.is_eagle_group for g in setting.groups) else "unannotated"
    mamba = " with Mamba" if any(g.kind == Kind.MAMBA for g in setting.groups) else ""
    return f"{path} {shape(setting)} EAGLE {annotated}{mamba}: {cause}"


def served_copy_where(path: str) -> str:
    """Where a hit proven by the cache's keys is served another copy of its block, whose drafter
    KV was computed with another next token (vLLM keeps several copies of a key, serves the first)."""
    return f"{path} EAGLE drop: the block served is a copy whose drafter KV saw another next token"


# ------------------------------------------------------------------------------ observations
@dataclass
class Observed:
    """Divergences seen in one run, by (kind, where): how often, tokens lost, the smallest example."""

    counts: Counter = field(default_factory=Counter)
    tokens: Counter = field(default_factory=Counter)
    smallest: dict = field(default_factory=dict)  # key -> (size, example text, replay payload)

    def add(self, kind: str, where: str, size: tuple, example: str, tokens: int = 0, replay=None) -> None:
        key = (kind, where)
        self.counts[key] += 1
        self.tokens[key] += tokens
        if key not in self.smallest or size < self.smallest[key][0]:
            self.smallest[key] = (size, example, replay)

    def new(self, known: dict) -> list[tuple[str, str]]:
        return sorted(key for key in self.counts if key not in known)

    def summary(self, known: dict) -> str:
        seen = sorted(((n, key) for key, n in self.counts.items() if key in known), reverse=True)
        if not seen:
            return "no known divergence met"
        return "known divergences met: " + "; ".join(
            f"{known[key].id} x{n}" + (f" ({self.tokens[key]} tokens)" if self.tokens[key] else "") for n, key in seen
        )

    def new_entry(self, key: tuple[str, str], test: str | None = None) -> list[str]:
        """What to paste into known-divergences.toml once the example has been replayed on vLLM,
        then ``test``, the plain-vLLM test replaying it, when the check could write one (else
        the text says to write it by hand)."""
        kind, where = key
        example = self.smallest[key][1]
        replay = ("once replayed on vLLM (the test below)" if test else
                  "once replayed on plain vLLM (no test is printed for it: write one, like those in divergences/)")
        entry = [
            f"NEW divergence: {kind} at {where!r}, {self.counts[key]} case(s); smallest: {example}",
            f"  {replay} and explained, record it in known-divergences.toml:",
            "  [[divergence]]",
            f'  id = "..."\n  kind = "{kind}"\n  where = "{where}"\n  reason = "..."',
            f'  example = "{example}"\n  test = "divergences/test_....py"',
        ]
        return entry + (["  as a vLLM test:", *(f"    {line}" for line in test.splitlines())] if test else [])
