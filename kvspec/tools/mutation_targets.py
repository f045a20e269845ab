"""The vLLM functions ``kvspec mutate`` mutates, the gate checks that drive each, and how one
mutant is put into (and taken out of) the running vLLM, in memory.

A mutant is one operator at one site of one function: ``function:operator:site``, where the
site is cosmic-ray's occurrence index of that operator in the function's own source, so the
id stays put when unrelated code of the module moves. Sites in the signature and in
``assert`` statements are left out: a mutated precondition makes vLLM refuse every input, a
mutant that any check kills and that says nothing about the checks.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import parso
from cosmic_ray.ast import ast_nodes
from cosmic_ray.mutating import mutate_code

from kvspec.impl import patching
from kvspec.impl import vllm_symbols as S
from kvspec.impl.vllm_specs import SPEC_GROUPING_FUNCTIONS
from kvspec.impl.vllm_symbols import Symbol
from kvspec.tools.mutation_operators import OPERATORS

SEEDS = ("seed: hybrid coordinator", "seed: Mooncake store")
LOOKUPS = ("prefix-cache lookups",)
STATEFUL = ("stateful KVCacheManager",)
GROUPING = ("grouping",)
STORES = ("store sides",)
CONNECTOR_HITS = ("connector-scheduled core lookups",)
OFFLOADING = ("offloading connector lookups",)
SIMPLE_OFFLOAD = ("SimpleCPUOffload lookups",)


@dataclass(frozen=True)
class Target:
    """One vLLM function and the gate checks that call it (kvspec.gate.registry.CHECKS names)."""

    symbol: Symbol
    checks: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.symbol.qualname


TARGETS = (
    # Single-type managers' finders: what each kind of group may hit.
    Target(S.FULL_FIND, SEEDS + ("live KVCacheManager",) + STATEFUL + LOOKUPS),
    Target(S.SLIDING_WINDOW_RUN, STATEFUL + LOOKUPS),
    Target(S.SLIDING_WINDOW_FIND, STATEFUL + LOOKUPS),
    Target(S.CHUNKED_LOCAL_FIND, STATEFUL + LOOKUPS),
    Target(S.MAMBA_FIND, SEEDS + LOOKUPS),
    # Issue 15's managers (spec/hits.py): the ring's and HiSparse's finders answer 0.
    Target(S.CIRCULAR_BUFFER_FIND, STATEFUL + LOOKUPS),
    Target(S.HISPARSE_AUXILIARY_FIND, LOOKUPS),
    Target(S.RESOLVE_BLOCK_HASHES, SEEDS + STATEFUL + LOOKUPS),
    # Core coordinators: one group, and the hybrid fixed point.
    Target(S.UNITARY_FIND, ("live KVCacheManager",) + STATEFUL + LOOKUPS),
    Target(S.HYBRID_FIND, SEEDS[:1] + STATEFUL + LOOKUPS),
    # Its spec groups also name the full-attention group the connector's per-group lookup checks against.
    Target(S.HYBRID_VERIFY_AND_SPLIT, SEEDS[:1] + STATEFUL + LOOKUPS + CONNECTOR_HITS),
    Target(S.HYBRID_ALIGNMENT, SEEDS[:1] + STATEFUL + LOOKUPS),
    # The lookup for a request scheduled with a KV connector: per-group hits and hit_diverged.
    Target(S.HYBRID_FIND_PER_GROUP, CONNECTOR_HITS),
    Target(S.CONNECTOR_COMPUTED_BLOCKS, CONNECTOR_HITS),
    # The connectors' own numbers: the OffloadingConnector's load bound past the local hit, and
    # SimpleCPUOffload's match past a local prefix.
    Target(S.OFFLOADING_MAX_LOADABLE, OFFLOADING),
    Target(S.SIMPLE_CPU_OFFLOAD_MATCHED, SIMPLE_OFFLOAD),
    # The Mooncake store connector's coordinator, over vLLM's duck-typed pool.
    Target(S.MOONCAKE_FIND_HIT_BLOCKS, SEEDS[1:] + LOOKUPS),
    Target(S.MOONCAKE_VERIFY_AND_SPLIT, SEEDS[1:] + LOOKUPS),
    Target(S.MOONCAKE_FIND, SEEDS[1:] + LOOKUPS),
    Target(S.EXTERNAL_POOL_GET_CACHED_BLOCK, SEEDS[1:] + LOOKUPS),
    # Grouping and the unannotated-EAGLE warning.
    Target(S.GET_GLOBAL_KV_CACHE_GROUPS, ("warning gate",) + GROUPING),
    Target(S.WARN_UNANNOTATED_EAGLE, ("warning gate",) + GROUPING),
    Target(S.GET_KV_CACHE_GROUPS, ("warning gate",) + GROUPING),
    Target(S.GROUPS_UNIFORM_PAGE_SIZE, GROUPING),
    Target(S.UNIFY_PAGE_SIZE, GROUPING),
    Target(S.IS_SPEC_UNIFORM, GROUPING),
    Target(S.UNIFY_HYBRID_SPECS, GROUPING),
    Target(S.PROMOTE_LOCAL_SPECS, GROUPING),
    Target(S.FULL_ALLOCATION_FALLBACK, GROUPING),
    Target(S.GET_HISPARSE_KV_CACHE_GROUPS, GROUPING),
    Target(S.PARTITION_HISPARSE_SPECS, GROUPING),
    Target(S.LAY_OUT_HISPARSE_GROUPS, GROUPING),
    # The write side: what a step publishes and frees (spec/caching.py, the stateful write judge).
    Target(S.CACHE_BLOCKS, ("live KVCacheManager",) + STATEFUL),
    Target(S.CACHE_FULL_BLOCKS, ("live KVCacheManager",) + STATEFUL),
    Target(S.FULL_PARTIAL_TAIL, STATEFUL),
    Target(S.SLIDING_WINDOW_MASK, STATEFUL + STORES),
    Target(S.MAMBA_MASK, STATEFUL + STORES),
    Target(S.MAMBA_CACHE_BLOCKS, STATEFUL),
    Target(S.MAMBA_PARTIAL_TAIL, STATEFUL),
    Target(S.HYBRID_CACHEABLE, STATEFUL),
    Target(S.COORDINATOR_CACHEABLE, STATEFUL),
    Target(S.REPLAY_BOUNDARIES, STATEFUL),
    Target(S.REMOVE_SKIPPED_BLOCKS, STATEFUL),
    Target(S.SLIDING_WINDOW_SKIPPED, STATEFUL),
    Target(S.CHUNKED_LOCAL_SKIPPED, STATEFUL),
    Target(S.CIRCULAR_BUFFER_SKIPPED, STATEFUL),
    # The Mooncake store's put side (spec/stores.py).
    Target(S.MOONCAKE_STORE_MASK, STORES + LOOKUPS),
    Target(S.MOONCAKE_REACHABLE_MASKS, STORES + LOOKUPS),
    # The spec classes' merges, uniform-type tests and page sizes of the issue-15 kinds (grouping).
    *(Target(symbol, GROUPING) for symbol in SPEC_GROUPING_FUNCTIONS),
    # Block sizes, alignment and the EAGLE peek margin.
    Target(S.RESOLVE_BLOCK_SIZES, SEEDS + ("block sizes",) + LOOKUPS),
    Target(S.RESOLVE_HIT_ALIGNMENT, ("block sizes",)),
    Target(S.PARTIAL_HASH_HITS_ENABLED, SEEDS + ("block sizes",) + LOOKUPS),
    Target(S.EAGLE_PROOF_MARGIN, SEEDS + ("block sizes",) + LOOKUPS),
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
    "connector-scheduled core lookups",
    "SimpleCPUOffload lookups",
    "offloading connector lookups",
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


def available(target: Target) -> bool:
    """Whether this vLLM has the function (an older tree may lack or move it)."""
    return S.exists(target.symbol)


def source_of(target: Target) -> str:
    """The function's source, decorators included, dedented to module level."""
    return patching.source_of(target.symbol)


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
        for site, node, index, start in mutation_sites(tree, OPERATORS[name]()):
            if start >= body_start and not _inside_assert(node):
                mutated = mutated_in_place(tree, node, OPERATORS[name](), index)
                mutants.append(_describe(target, name, site, start, mutated, lines))
    return mutants


def mutation_sites(tree, operator) -> Iterator[tuple[int, object, int, tuple[int, int]]]:
    """Each of ``operator``'s sites in ``tree`` as (cosmic-ray's occurrence index, node, index of
    the position within the node, start), in the order cosmic-ray's visitor counts them."""
    site = 0
    for node in list(ast_nodes(tree)):
        for index, (start, _end) in enumerate(operator.mutation_positions(node)):
            yield site, node, index, start
            site += 1


def mutated_in_place(tree, node, operator, index: int) -> str:
    """The source with ``operator``'s ``index``-th mutation of ``node`` applied, as cosmic-ray's
    ``mutate_code`` prints it (what ``compile_mutant`` compiles; tests/test_mutation.py compares
    the two on every operator), without parsing the source once per mutant (90% of the time it
    took): the mutation is made on ``tree`` and undone. Operators edit only the node's subtree
    (children, leaf values and prefixes) and the node's place in its parent."""
    saved = [(n, list(n.children) if hasattr(n, "children") else None, getattr(n, "value", None),
              getattr(n, "prefix", None), n.parent) for n in ast_nodes(node)]
    parent = node.parent  # a site is inside the function, never the module itself
    siblings = list(parent.children)
    try:
        replacement = operator.mutate(node, index)
        position = parent.children.index(node)
        parent.children[position : position + 1] = [replacement] if replacement is not None else []
        return tree.get_code()
    finally:
        for n, children, value, prefix, up in saved:
            if children is not None:
                n.children = children
            else:
                n.value, n.prefix = value, prefix
            n.parent = up
        parent.children = siblings


def _inside_assert(node) -> bool:
    while node is not None:
        if node.type == "assert_stmt":
            return True
        node = node.parent
    return False


def _describe(target: Target, operator: str, site: int, start, mutated_source: str, lines: list[str]) -> Mutant:
    mutated = mutated_source.splitlines()
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
    source = mutate_code(source_of(mutant.target), OPERATORS[mutant.operator](), mutant.site)
    if source is None:
        raise Stillborn(f"{mutant.id}: the operator has no such site")
    try:
        return patching.recompiled(mutant.target.symbol, source, f"<mutant {mutant.id}>")
    except Exception as exc:  # noqa: BLE001 - any failure to build the mutant
        raise Stillborn(f"{mutant.id}: {type(exc).__name__}: {exc}") from None


@contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """vLLM with ``mutant`` in place; everything restored on exit. A module-level function
    is replaced in every vLLM module that imported it by name (impl/patching.py:install)."""
    undo = patching.install(mutant.target.symbol, compile_mutant(mutant))
    try:
        yield
    finally:
        undo()


# ----------------------------------------------------------------------------- reach


def line_in_file(mutant: Mutant) -> int:
    return patching.first_line(mutant.target.symbol) + mutant.line - 1


def code_objects(target: Target) -> list:
    """The function's code object and those nested in it (comprehensions, lambdas)."""
    found, stack = [], [patching.function_of(S.raw(target.symbol)).__code__]
    while stack:
        code = stack.pop()
        found.append(code)
        stack.extend(c for c in code.co_consts if hasattr(c, "co_code"))
    return found
