"""How kvspec patches real vLLM in memory, and undoes it: the one engine behind the bug zoo
(impl/broken*.py) and ``kvspec mutate`` (kvspec/tools/mutation_targets.py).

Every patch names its site by a symbol of impl/vllm_symbols.py, at run time and never on
vLLM's files:

* ``replace`` / ``install``: put a replacement of ours in place of one vLLM attribute (its
  owner only, or, for a module-level function, every vLLM module that imported it by name);
* ``edit``: vLLM's own function, recompiled from the source vLLM was imported from after a few
  exact text edits (each must occur exactly once, so a vLLM whose code moved is refused in one
  line rather than silently left unbroken);
* ``recompiled``: vLLM's function from a source a caller rewrote (a mutant), for ``install``.

A rebuilt function runs in its own module's globals, so everything it calls is still vLLM's.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from typing import Callable

from kvspec.impl import vllm_symbols as symbols
from kvspec.impl.target import TargetError
from kvspec.impl.vllm_symbols import Symbol

Undo = Callable[[], None]


def _patch(owner, attribute: str, replacement) -> Undo:
    original = owner.__dict__[attribute]
    setattr(owner, attribute, replacement)
    return lambda: setattr(owner, attribute, original)


def replace(symbol: Symbol, replacement) -> Undo:
    """Set the attribute ``symbol`` names, on its owner only, to ``replacement``."""
    owner, attribute = symbols.owner_and_attribute(symbol)
    return _patch(owner, attribute, replacement)


def install(symbol: Symbol, replacement) -> Undo:
    """Put ``replacement`` wherever vLLM holds ``symbol``: a class member on its class; a
    module-level function in every loaded vLLM module that holds it by name (``from module
    import function`` copies the reference). The undo restores each, last patched first."""
    owner, attribute = symbols.owner_and_attribute(symbol)
    if isinstance(owner, type):
        return _patch(owner, attribute, replacement)
    original = symbols.raw(symbol)
    holders = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("vllm") and getattr(module, attribute, None) is original
    ]
    undo = [_patch(module, attribute, replacement) for module in holders]
    return lambda: [restore() for restore in reversed(undo)]


def function_of(attribute):
    """The plain function behind a classmethod, staticmethod or property."""
    for inner in ("__func__", "fget"):
        if hasattr(attribute, inner):
            return getattr(attribute, inner)
    return attribute


def source_of(symbol: Symbol) -> str:
    """The function's source, decorators included, dedented to module level."""
    return textwrap.dedent(inspect.getsource(function_of(symbols.raw(symbol))))


def first_line(symbol: Symbol) -> int:
    """The file line of the first line of ``source_of(symbol)`` (its first decorator)."""
    return inspect.getsourcelines(function_of(symbols.raw(symbol)))[1]


def recompiled(symbol: Symbol, source: str, filename: str):
    """``source``, a rewrite of the function ``symbol`` names, compiled as ``filename`` and run
    in the function's own module globals: what it defines under the function's name. Compile
    and run errors propagate."""
    plain = function_of(symbols.raw(symbol))
    # Annotations stay unevaluated: some name types imported only under TYPE_CHECKING. (The
    # future import at the top binds ``annotations`` to the feature, which carries the flag.)
    code = compile(source, filename, "exec", flags=annotations.compiler_flag, dont_inherit=True)
    namespace: dict = {}
    exec(code, sys.modules[plain.__module__].__dict__, namespace)  # noqa: S102 - vLLM's own source, edited by us
    return namespace[plain.__name__]


def edited(function, edits: list[tuple[str, str]]):
    """vLLM's ``function`` rebuilt from its source with each ``(old, new)`` text edit applied.
    A classmethod or staticmethod comes back wrapped the same way."""
    plain = function_of(function)
    where = f"{plain.__module__}:{plain.__qualname__}"
    try:
        source = textwrap.dedent(inspect.getsource(plain))
    except OSError:  # already one of our rebuilds: two edits of one function do not compose
        raise TargetError(f"cannot re-introduce the bug: {where} is already patched by another variant") from None
    for old, new in edits:
        found = source.count(old)
        if found != 1:
            raise TargetError(f"cannot re-introduce the bug: {where} contains {old.strip()!r} {found} times, not once")
        source = source.replace(old, new)
    if plain.__code__.co_freevars:  # a closure or a zero-argument super() cannot be rebuilt alone
        raise TargetError(f"cannot re-introduce the bug: {where} uses free variables {plain.__code__.co_freevars}")
    flags = annotations.compiler_flag
    try:
        code = compile(source, f"<kvspec edit of {where}>", "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:  # e.g. a flush-left string that keeps the method indented
        raise TargetError(f"cannot re-introduce the bug: {where} does not recompile alone: {exc}") from None
    namespace: dict = {}
    exec(code, sys.modules[plain.__module__].__dict__, namespace)  # noqa: S102 - vLLM's own source, edited by us
    rebuilt = namespace[plain.__name__]
    if isinstance(function, (classmethod, staticmethod)) and not isinstance(rebuilt, type(function)):
        rebuilt = type(function)(rebuilt)  # the decorator line was not part of the source
    return rebuilt


def edit(symbol: Symbol, edits: list[tuple[str, str]]) -> Undo:
    """Replace the function ``symbol`` names, wherever vLLM holds it, with vLLM's own function
    after ``edits``."""
    return install(symbol, edited(symbols.raw(symbol), edits))
