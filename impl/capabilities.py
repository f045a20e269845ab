"""The capability probe: before any example runs, which of the vLLM symbols each check drives
this vLLM lacks, or has with a signature the adapter's call no longer fits.

A check whose symbols are all there runs; one that misses any is reported as "cannot drive",
naming the symbol and the adapter's line that uses it. That is kvspec's problem, never a vLLM
bug. A module that does not even compile (a syntax error in a checkout) is a broken set-up.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kvspec.gate.names import Check
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_symbols import Symbol, SymbolMissing, resolve

_SPECS = (S.FULL_ATTENTION_SPEC, S.MLA_ATTENTION_SPEC, S.SLIDING_WINDOW_SPEC, S.CHUNKED_LOCAL_ATTENTION_SPEC,
          S.MAMBA_SPEC, S.KV_CACHE_GROUP_SPEC, S.KV_CACHE_CONFIG)  # fmt: skip
_CONFIG = (S.VLLM_CONFIG, S.DEVICE_CONFIG, S.SPECULATIVE_CONFIG)
_BLOCK_SIZES = (S.RESOLVE_BLOCK_SIZES, S.RESOLVE_HIT_ALIGNMENT, S.RESOLVE_DCP_BLOCK_SIZE)
_HASHES = (S.BLOCK_HASH, S.MAKE_BLOCK_HASH_WITH_GROUP_ID)
_CORE_LOOKUP = (*_CONFIG, *_SPECS, *_BLOCK_SIZES, *_HASHES, S.GET_KV_CACHE_COORDINATOR, S.UNITARY_FIND, S.HYBRID_FIND)
_HISPARSE_SOURCE = (S.HISPARSE_SOURCE_GROUP_SPEC, S.HISPARSE_SOURCE_ROLE)
_MOONCAKE = (S.MOONCAKE_COORDINATOR, S.EXTERNAL_CACHED_BLOCK_POOL, S.MOONCAKE_FIND)
_GROUPING = (*_CONFIG, *_SPECS, S.GET_GLOBAL_KV_CACHE_GROUPS, S.GET_KV_CACHE_CONFIGS, S.GET_KV_CACHE_GROUPS,
             S.PLANNING_LOGGER, S.ITER_LAYER_SPECS)
_LIVE = (*_CONFIG, *_SPECS, *_BLOCK_SIZES, *_HASHES, S.KV_CACHE_MANAGER, S.REQUEST, S.REQUEST_STATUS,
         S.SAMPLING_PARAMS, S.GET_REQUEST_BLOCK_HASHER, S.INIT_NONE_HASH, S.SHA256)  # fmt: skip
_OFFLOADING = (*_CONFIG, *_SPECS, S.OFFLOADING_SCHEDULER, S.WINDOW_IN_CHUNKS, S.OFFLOADING_EVENTS_CONFIG,
               S.OFFLOAD_REQ_CONTEXT, S.MAKE_OFFLOAD_KEY, S.CPU_OFFLOADING_MANAGER, S.KV_TRANSFER_CONFIG,
               S.RESOLVE_HASH_LOOKAHEAD)  # fmt: skip

# What each check drives. A check is listed here or it cannot be registered (tests/test_capabilities.py).
DRIVES: dict[Check, tuple[Symbol, ...]] = {
    Check.SAVED_FINDS: (*_CORE_LOOKUP, *_MOONCAKE),
    Check.SEED_HYBRID: _CORE_LOOKUP,
    Check.SEED_MOONCAKE: (*_CORE_LOOKUP, *_MOONCAKE),
    Check.WARNING_GATE: _GROUPING,
    Check.LIVE_MANAGER: _LIVE,
    Check.GROUPING: _GROUPING,
    Check.BLOCK_SIZES: (*_CORE_LOOKUP, S.EAGLE_PROOF_MARGIN, S.BLOCK_HASH_LIST_WITH_BLOCK_SIZE),
    Check.LOOKUPS: (*_CORE_LOOKUP, *_MOONCAKE, *_HISPARSE_SOURCE),
    Check.OFFLOADING: _OFFLOADING,
    Check.CONNECTOR_HITS: (*_LIVE, *_CORE_LOOKUP, S.HYBRID_FIND_PER_GROUP, S.CONNECTOR_COMPUTED_BLOCKS),
    Check.SIMPLE_OFFLOAD: (*_CORE_LOOKUP, S.KV_CACHE_TENSOR, S.SIMPLE_CPU_OFFLOAD_SCHEDULER,
                           S.SIMPLE_CPU_OFFLOAD_MATCHED, S.SIMPLE_CPU_OFFLOAD_ADMIT, S.SIMPLE_CPU_OFFLOAD_FINISHED,
                           S.SIMPLE_CPU_OFFLOAD_OUTPUT, S.SIMPLE_CPU_OFFLOAD_BIND_GPU_POOL, S.BLOCK_POOL,
                           S.POOL_INSERT_BLOCK_HASH, S.KV_CACHE_BLOCKS, S.KV_CONNECTOR_OUTPUT),
    Check.STORES: (*_CORE_LOOKUP, *_MOONCAKE, S.MOONCAKE_STORE_MASK, *_OFFLOADING, S.REQUEST_STATUS,
                   S.OFFLOAD_STORABLE_CHUNKS, S.OFFLOAD_BUILD_CONNECTOR_META, S.OFFLOAD_REQUEST_FINISHED),
    Check.STATEFUL: (*_LIVE, S.SCHEDULER_MAMBA_SPLIT, S.SCHEDULER_PREFILL_LOOKAHEAD),
    Check.PROOFS: (*_CORE_LOOKUP, *_MOONCAKE, *_GROUPING, S.BLOCK_HASH_LIST_WITH_BLOCK_SIZE),
}


@dataclass(frozen=True)
class Missing:
    """A symbol a check drives that this vLLM lacks or has with another signature."""

    symbol: Symbol
    reason: str
    used_at: str  # the adapter's line that uses it, "impl/<file>.py:<line>"
    signature: str = ""  # this vLLM's, when the call no longer binds to it

    def __str__(self) -> str:
        return f"kvspec cannot drive {self.symbol}: {self.reason} (used at {self.used_at})"

    def lines(self) -> list[str]:
        return [str(self)] + ([f"  this vLLM's signature: {self.signature}"] if self.signature else [])


def probe(checks, rules) -> dict[Check, list[Missing]]:
    """Every symbol of every check in ``checks`` resolved and its signature bound as the adapter
    calls it on a target with these release ``rules`` (spec/releases.py), once each."""
    driven = {c: [s for s in DRIVES[Check(c)] if s.driven_under(rules)] for c in checks}
    found = {symbol: _missing(symbol, rules) for symbol in {s for symbols in driven.values() for s in symbols}}
    return {Check(c): [m for s in driven[c] if (m := found[s])] for c in checks}


def _missing(symbol: Symbol, rules) -> Missing | None:
    try:
        target = resolve(symbol)
    except SymbolMissing as exc:
        return Missing(symbol, exc.reason, used_at(symbol))
    if (shape := symbol.call_shape(rules)) is None:
        return None
    positional, keywords = shape
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to bind
        return None
    try:
        signature.bind(*range(positional), **dict.fromkeys(keywords))
    except TypeError as exc:
        return Missing(symbol, f"the adapter's call no longer binds: {exc}", used_at(symbol), str(signature))
    return None


@cache
def _uses() -> dict[str, str]:
    """Each ``S.NAME`` the adapter's modules use, at the first line that resolves it (the call
    site), else at its first mention."""
    here = Path(__file__).resolve().parent
    resolved: dict[str, str] = {}
    mentioned: dict[str, str] = {}
    for path in sorted(here.glob("*.py")):
        if path.name in ("vllm_symbols.py", "capabilities.py"):
            continue
        tree = ast.parse(path.read_text())
        calls = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                 and isinstance(node.func, ast.Name) and node.func.id == "resolve"}
        nodes = [n for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "S"]
        for node in sorted(nodes, key=lambda n: n.lineno):
            where = f"impl/{path.name}:{node.lineno}"
            (resolved if id(node) in calls else mentioned).setdefault(node.attr, where)
    return {**mentioned, **resolved}


def used_at(symbol: Symbol) -> str:
    names = [name for name, value in vars(S).items() if value == symbol and name.isupper()]
    return next((_uses()[n] for n in names if n in _uses()), "impl/vllm_symbols.py")
