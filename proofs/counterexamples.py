"""A refuted obligation's counterexample as data, for the runner to replay on real vLLM.

The theorems stay pure: an obligation's ``on_model`` returns text lines and these replays, and
whoever runs the theorems decides how a replay is turned into lines (proofs/core.py:run_theorem's
``replay``). Without vLLM, ``offline_lines`` prints what the proofs alone know; with vLLM,
kvspec/gate/proof_replays.py adds vLLM's own answers on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from kvspec.proofs.concrete import Lookup
from kvspec.reference.lookup import coordinator_lookup
from kvspec.spec.layers import LayerSpec, SpecDecode


@dataclass(frozen=True)
class LookupReplay:
    """One concrete lookup, replayed on the core and Mooncake coordinators, clean and, with
    ``variant``, with that impl/broken.py bug put back. ``loop_exits``: also print the core's
    hit as proof that vLLM's loop exits (T4's stop-strict mutant)."""

    title: str
    lookup: Lookup
    variant: str | None = None
    note: str = ""
    loop_exits: bool = False

    def header(self) -> str:
        return f"{self.title}: {self.lookup.describe()}" + (f"; {self.note}" if self.note else "")

    def reference(self) -> int | str:
        try:
            return coordinator_lookup(self.lookup.setting, self.lookup.state, self.lookup.max_length).length
        except AssertionError:
            return "n/a (vLLM asserts)"


@dataclass(frozen=True)
class WholeBlocksReplay:
    """T0: how many whole blocks of ``block_size`` vLLM counts in ``tokens`` hashed at ``unit``."""

    line: str
    tokens: int
    unit: int
    block_size: int


@dataclass(frozen=True)
class PartitionReplay:
    """T7's split: vLLM's sliding-window groups for these layers, at most ``size`` layers each."""

    line: str
    layers: dict[str, LayerSpec]
    size: int


@dataclass(frozen=True)
class PageReplay:
    """T7's page unification: the page sizes vLLM's grouping leaves for these layers."""

    line: str
    layers: dict[str, LayerSpec]


@dataclass(frozen=True)
class WarningReplay:
    """T6: whether vLLM warns for these layers, clean and with ``variant`` put back."""

    line: str
    layers: dict[str, LayerSpec]
    spec_decode: SpecDecode
    variant: str


Replay = Union[LookupReplay, WholeBlocksReplay, PartitionReplay, PageReplay, WarningReplay]
Item = Union[str, Replay]


def offline_lines(replay: Replay) -> list[str]:
    """What a replay prints when no vLLM is loaded."""
    if isinstance(replay, LookupReplay):
        return [replay.header(), f"  reference {replay.reference()}; vLLM not loaded, replay skipped"]
    return [replay.line + "; vLLM not loaded"]


def rendered(items: list[Item], replay: Callable[[Replay], list[str]] = offline_lines) -> list[str]:
    """Text lines kept, each replay turned into its lines by ``replay``."""
    return [line for item in items for line in ([item] if isinstance(item, str) else replay(item))]
