"""The vLLM functions ``kvspec mutate`` mutates, the gate checks that drive each, and how one
mutant is put into (and taken out of) the running vLLM, in memory.

A mutant is one operator at one site of one function: ``function:operator:site``, where the
site is cosmic-ray's occurrence index of that operator in the function's own source, so the
id stays put when unrelated code of the module moves. Sites in the signature and in
``assert`` statements are left out: a mutated precondition makes vLLM refuse every input, a
mutant that any check kills and that says nothing about the checks.
"""

from __future__ import annotations
import __future__

import importlib
import inspect
import sys
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import parso
from cosmic_ray.ast import ast_nodes
from cosmic_ray.mutating import mutate_code

from kvspec.tools.mutation_operators import OPERATORS

CORE = "vllm.v1.core."
MANAGERS = CORE + "single_type_kv_cache_manager"
COORDINATORS = CORE + "kv_cache_coordinator"
UTILS = CORE + "kv_cache_utils"
PLANNING = CORE + "kv_cache_planning"
MOONCAKE = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.coordinator"

SEEDS = ("seed: hybrid coordinator", "seed: Mooncake store")
LOOKUPS = ("prefix-cache lookups",)
STATEFUL = ("stateful KVCacheManager",)
GROUPING = ("grouping",)


@dataclass(frozen=True)
class Target:
    """One vLLM function and the gate checks that call it (kvspec.gate.registry.CHECKS names)."""

    module: str
    qualname: str  # "function" or "Class.method"
    checks: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.qualname


TARGETS = (
    # Single-type managers' finders: what each kind of group may hit.
    Target(MANAGERS, "FullAttentionManager.find_longest_cache_hit", SEEDS + ("live KVCacheManager",) + STATEFUL + LOOKUPS),
    Target(MANAGERS, "SlidingWindowManager._contiguous_blocks_for_hit", STATEFUL + LOOKUPS),
    Target(MANAGERS, "SlidingWindowManager.find_longest_cache_hit", STATEFUL + LOOKUPS),
    Target(MANAGERS, "ChunkedLocalAttentionManager.find_longest_cache_hit", STATEFUL + LOOKUPS),
    Target(MANAGERS, "MambaManager.find_longest_cache_hit", SEEDS + LOOKUPS),
    Target(UTILS, "resolve_block_hashes", SEEDS + STATEFUL + LOOKUPS),
    # Core coordinators: one group, and the hybrid fixed point.
    Target(COORDINATORS, "UnitaryKVCacheCoordinator.find_longest_cache_hit", ("live KVCacheManager",) + STATEFUL + LOOKUPS),
    Target(COORDINATORS, "HybridKVCacheCoordinator.find_longest_cache_hit", SEEDS[:1] + STATEFUL + LOOKUPS),
    Target(COORDINATORS, "HybridKVCacheCoordinator.verify_and_split_kv_cache_groups", SEEDS[:1] + STATEFUL + LOOKUPS),
    Target(COORDINATORS, "HybridKVCacheCoordinator._cache_hit_alignment_tokens", SEEDS[:1] + STATEFUL + LOOKUPS),
    # The Mooncake store connector's coordinator, over vLLM's duck-typed pool.
    Target(MOONCAKE, "MooncakeStoreCoordinator._find_hit_blocks", SEEDS[1:] + LOOKUPS),
    Target(MOONCAKE, "MooncakeStoreCoordinator._verify_and_split_kv_cache_groups", SEEDS[1:] + LOOKUPS),
    Target(MOONCAKE, "MooncakeStoreCoordinator.find_longest_cache_hit", SEEDS[1:] + LOOKUPS),
    Target(MOONCAKE, "ExternalCachedBlockPool.get_cached_block", SEEDS[1:] + LOOKUPS),
    # Grouping and the unannotated-EAGLE warning.
    Target(PLANNING, "get_global_kv_cache_groups", ("warning gate",) + GROUPING),
    Target(PLANNING, "_warn_if_unannotated_eagle_mamba", ("warning gate",) + GROUPING),
    Target(PLANNING, "get_kv_cache_groups", ("warning gate",) + GROUPING),
    Target(PLANNING, "_get_kv_cache_groups_uniform_page_size", GROUPING),
    Target(PLANNING, "unify_kv_cache_spec_page_size", GROUPING),
    Target(PLANNING, "is_kv_cache_spec_uniform", GROUPING),
    Target(PLANNING, "unify_hybrid_kv_cache_specs", GROUPING),
    Target(PLANNING, "_promote_local_kv_cache_specs", GROUPING),
    Target(PLANNING, "_try_get_full_allocation_fallback_groups", GROUPING),
    # Block sizes, alignment and the EAGLE peek margin.
    Target(UTILS, "resolve_kv_cache_block_sizes", SEEDS + ("block sizes",) + LOOKUPS),
    Target(UTILS, "resolve_cache_hit_alignment_tokens", ("block sizes",)),
    Target(UTILS, "partial_hash_hits_enabled", SEEDS + ("block sizes",) + LOOKUPS),
    Target(UTILS, "eagle_proof_margin", SEEDS + ("block sizes",) + LOOKUPS),
)

# Cheapest first, so a killed mutant costs little; fixed, so "killed by" replays exactly.
CHECK_ORDER = (
    "seed: hybrid coordinator",
    "seed: Mooncake store",
    "warning gate",
    "live KVCacheManager",
    "block sizes",
    "stateful KVCacheManager",
    "grouping",
    "prefix-cache lookups",
)


def ordered_checks(checks: tuple[str, ...]) -> list[str]:
    """The checks in CHECK_ORDER (a check this list does not know runs last)."""
    return sorted(set(checks), key=lambda c: (CHECK_ORDER.index(c) if c in CHECK_ORDER else len(CHECK_ORDER), c))


@dataclass(frozen=True)
class Mutant:
    target: Target
    operator: str
    site: int  # cosmic-ray's occurrence index of ``operator`` in the function's source
    line: int  # 1-based line in the function's source
    original: str  # that line, stripped
    mutated: str  # the mutated line(s), stripped

    @property
    def id(self) -> str:
        return f"{self.target.name}:{self.operator}:{self.site}"


# ----------------------------------------------------------------------------- lookup


def _owner_and_raw(target: Target):
    module = importlib.import_module(target.module)
    *owner_path, attribute = target.qualname.split(".")
    owner = module
    for part in owner_path:
        owner = getattr(owner, part)
    raw = owner.__dict__[attribute] if owner_path else getattr(module, attribute)
    return module, owner, attribute, raw


def _function_of(raw):
    for attribute in ("__func__", "fget"):  # classmethod / staticmethod, property
        if hasattr(raw, attribute):
            return getattr(raw, attribute)
    return raw


def available(target: Target) -> bool:
    """Whether this vLLM has the function (an older tree may lack or move it)."""
    try:
        _owner_and_raw(target)
    except (ImportError, AttributeError, KeyError):
        return False
    return True


def source_of(target: Target) -> str:
    """The function's source, decorators included, dedented to module level."""
    return textwrap.dedent(inspect.getsource(_function_of(_owner_and_raw(target)[3])))


# ----------------------------------------------------------------------------- enumeration


def enumerate_mutants(target: Target) -> list[Mutant]:
    """Every mutant of ``target``, in a fixed order (operator name, then site)."""
    source = source_of(target)
    lines = source.splitlines()
    tree = parso.parse(source)
    funcdef = next(node for node in ast_nodes(tree) if node.type in ("funcdef", "async_funcdef"))
    body_start = funcdef.children[-1].start_pos
    mutants = []
    for name in sorted(OPERATORS):
        operator = OPERATORS[name]()
        site = 0
        for node in ast_nodes(tree):
            for start, _end in operator.mutation_positions(node):
                if start >= body_start and not _inside_assert(node):
                    mutants.append(_describe(target, name, site, start, source, lines))
                site += 1
    return mutants


def _inside_assert(node) -> bool:
    while node is not None:
        if node.type == "assert_stmt":
            return True
        node = node.parent
    return False


def _describe(target: Target, operator: str, site: int, start, source: str, lines: list[str]) -> Mutant:
    mutated = mutate_code(source, OPERATORS[operator](), site).splitlines()
    # The mutated lines: what lies between the common head and the common tail.
    head = next((k for k, (a, b) in enumerate(zip(lines, mutated)) if a != b), min(len(lines), len(mutated)))
    tail = 0
    while tail < min(len(lines), len(mutated)) - head and lines[-1 - tail] == mutated[-1 - tail]:
        tail += 1
    changed = [line.strip() for line in mutated[head : len(mutated) - tail] if line.strip()]
    return Mutant(target, operator, site, start[0], lines[start[0] - 1].strip(), " / ".join(changed) or "(deleted)")


# ----------------------------------------------------------------------------- application


class Stillborn(Exception):
    """The mutant does not compile, or cannot be put in place: no verdict, not counted."""


def compile_mutant(mutant: Mutant):
    """The mutated function object, compiled in its own module's globals."""
    module, _owner, attribute, _raw = _owner_and_raw(mutant.target)
    source = mutate_code(source_of(mutant.target), OPERATORS[mutant.operator](), mutant.site)
    if source is None:
        raise Stillborn(f"{mutant.id}: the operator has no such site")
    # vLLM's modules use postponed annotations; names imported only for type checking
    # must stay unevaluated here too.
    flags = __future__.annotations.compiler_flag
    try:
        code = compile(source, f"<mutant {mutant.id}>", "exec", flags=flags, dont_inherit=True)
        namespace: dict = {}
        exec(code, module.__dict__, namespace)  # noqa: S102 - vLLM's own code, one operator changed
    except Exception as exc:  # noqa: BLE001 - any failure to build the mutant
        raise Stillborn(f"{mutant.id}: {type(exc).__name__}: {exc}") from None
    return namespace[attribute]


def _set(owner, attribute: str, value) -> Callable[[], None]:
    original = owner.__dict__[attribute]
    setattr(owner, attribute, value)
    return lambda: setattr(owner, attribute, original)


@contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """vLLM with ``mutant`` in place; everything restored on exit. A module-level function
    is replaced in every vLLM module that imported it by name."""
    replacement = compile_mutant(mutant)
    module, owner, attribute, raw = _owner_and_raw(mutant.target)
    if owner is module:
        owners = [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and getattr(m, attribute, None) is raw]
    else:
        owners = [owner]
    undo = [_set(o, attribute, replacement) for o in owners]
    try:
        yield
    finally:
        for restore in reversed(undo):
            restore()


# ----------------------------------------------------------------------------- reach


def _first_line(target: Target) -> int:
    """The file line of the first line of ``source_of(target)`` (its first decorator)."""
    return inspect.getsourcelines(_function_of(_owner_and_raw(target)[3]))[1]


def line_in_file(mutant: Mutant) -> int:
    return _first_line(mutant.target) + mutant.line - 1


def code_objects(target: Target) -> list:
    """The function's code object and those nested in it (comprehensions, lambdas)."""
    found, stack = [], [_function_of(_owner_and_raw(target)[3]).__code__]
    while stack:
        code = stack.pop()
        found.append(code)
        stack.extend(c for c in code.co_consts if hasattr(c, "co_code"))
    return found
