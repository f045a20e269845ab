"""The proofs' counterexamples replayed on real vLLM, through the adapter: what the runner
attaches to a refuted obligation (proofs/ stays pure and names no vLLM).

``on_vllm(adapter)`` is the ``replay`` that proofs/runner.py:run_proofs and
proofs/core.py:run_theorem take: each replay of proofs/counterexamples.py becomes its lines,
with vLLM's own answer on the same inputs, clean and with the named zoo bug put back.
"""

from __future__ import annotations

from typing import Callable

from kvspec.impl.broken import applied
from kvspec.impl.vllm_symbols import SymbolMissing
from kvspec.proofs.concrete import Lookup
from kvspec.proofs.counterexamples import (
    LookupReplay,
    PageReplay,
    PartitionReplay,
    Replay,
    WarningReplay,
    WholeBlocksReplay,
    offline_lines,
)
from kvspec.proofs.runner import run_proofs
from kvspec.spec.layers import Kind


def vllm_hit(adapter, lookup: Lookup, path: str = "core") -> int | str:
    """vLLM's hit for the lookup on the core or the Mooncake path; vLLM's own precondition
    asserts are answers too (the exception's name)."""
    try:
        if path == "mooncake":
            return adapter.mooncake_hit(lookup.setting, lookup.state, lookup.max_length).length
        return adapter.coordinator_hit(lookup.setting, lookup.state, lookup.max_length).length
    except Exception as exc:  # noqa: BLE001 - an answer, printed by name
        return f"{type(exc).__name__}"


def lookup_lines(adapter, replay: LookupReplay) -> list[str]:
    lookup, version = replay.lookup, adapter.version
    core, moon = vllm_hit(adapter, lookup), vllm_hit(adapter, lookup, "mooncake")
    lines = [replay.header(), f"  vLLM {version} clean: core {core}, mooncake {moon}; reference {replay.reference()}"]
    if replay.variant:
        lines.append(f"  vLLM {version} with {replay.variant}: " + _with_bug(
            adapter, replay.variant,
            lambda: f"core {vllm_hit(adapter, lookup)}, mooncake {vllm_hit(adapter, lookup, 'mooncake')}"))
    if replay.loop_exits:
        lines.append(f"  vLLM returns {vllm_hit(adapter, lookup)}: its loop exits")
    return lines


def _whole_blocks(adapter, replay: WholeBlocksReplay) -> str:
    got = adapter.whole_blocks(replay.tokens, replay.unit, replay.block_size)
    return f"BlockHashListWithBlockSize counts {got} blocks"


def _partition(adapter, replay: PartitionReplay) -> str:
    groups = adapter.group_layers(replay.layers).groups
    windows = [len(g.layer_names) for g in groups if Kind.SLIDING_WINDOW in g.kinds]
    return f"sliding-window groups of {windows} layers (at most {replay.size})"


def _pages(adapter, replay: PageReplay) -> str:
    try:
        return f"page sizes {sorted({g.page_size_bytes for g in adapter.group_layers(replay.layers).groups})}"
    except (ValueError, NotImplementedError) as exc:
        return f"refuses: {type(exc).__name__}"


def _warning(adapter, replay: WarningReplay) -> str:
    clean = adapter.group_layers(replay.layers, replay.spec_decode).warned_unannotated_eagle
    broken = _with_bug(adapter, replay.variant,
                       lambda: f"warns={adapter.group_layers(replay.layers, replay.spec_decode).warned_unannotated_eagle}")
    return f"clean warns={clean}, with {replay.variant} {broken}"


def _with_bug(adapter, variant: str, answer: Callable[[], str]) -> str:
    """``answer()`` on vLLM with the zoo bug ``variant`` put back, or why this release cannot
    host it (the bug is written against a symbol it lacks: kvspec's limit, not vLLM's)."""
    try:
        with applied(adapter, [variant]):
            return answer()
    except SymbolMissing as missing:
        return f"not put back on this release: {missing}"


_ANSWERS = {WholeBlocksReplay: _whole_blocks, PartitionReplay: _partition, PageReplay: _pages, WarningReplay: _warning}


def on_vllm(adapter) -> Callable[[Replay], list[str]]:
    """The replay of counterexamples on ``adapter``'s vLLM; without one, the proofs' own lines."""
    if adapter is None:
        return offline_lines

    def replay(counterexample: Replay) -> list[str]:
        if isinstance(counterexample, LookupReplay):
            return lookup_lines(adapter, counterexample)
        answer = _ANSWERS[type(counterexample)](adapter, counterexample)
        return [counterexample.line, f"  vLLM {adapter.version}: {answer}"]

    return replay


def run_proofs_on_vllm(bound: int, adapter) -> list:
    """Every theorem at ``bound``, its counterexamples replayed on ``adapter`` (None: not replayed)."""
    return run_proofs(bound, on_vllm(adapter))
