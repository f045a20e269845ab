"""How a broken variant patches real vLLM in memory, and undoes it.

Two kinds of patch, both at run time and never on vLLM's files:

* ``patch`` / ``patch_everywhere``: put a replacement of ours in place of one vLLM attribute;
* ``edited``: vLLM's own function, recompiled from the source vLLM was imported from after a
  few exact text edits (each must occur exactly once, so a vLLM whose code moved is refused in
  one line rather than silently left unbroken). The result runs in the function's own module
  globals, so everything it calls is still vLLM's.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from typing import Callable

from kvspec.impl.target import TargetError

Undo = Callable[[], None]


def patch(owner, attribute: str, replacement) -> Undo:
    """Set ``owner.attribute`` (a class or module) to ``replacement``; the undo restores it."""
    original = owner.__dict__[attribute]
    setattr(owner, attribute, replacement)
    return lambda: setattr(owner, attribute, original)


def patch_everywhere(original, replacement) -> Undo:
    """Replace a module-level function in every loaded vLLM module that holds it by name
    (``from module import function`` copies the reference)."""
    owners = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("vllm") and getattr(module, original.__name__, None) is original
    ]
    undo = [patch(module, original.__name__, replacement) for module in owners]
    return lambda: [restore() for restore in reversed(undo)]


def _unwrapped(attribute):
    return attribute.__func__ if isinstance(attribute, (classmethod, staticmethod)) else attribute


def edited(function, edits: list[tuple[str, str]]):
    """vLLM's ``function`` rebuilt from its source with each ``(old, new)`` text edit applied.
    A classmethod or staticmethod comes back wrapped the same way."""
    plain = _unwrapped(function)
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
    module = sys.modules[plain.__module__]
    # Annotations stay unevaluated: some name types imported only under TYPE_CHECKING. (The
    # future import at the top binds ``annotations`` to the feature, which carries the flag.)
    flags = annotations.compiler_flag
    try:
        code = compile(source, f"<kvspec edit of {where}>", "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:  # e.g. a flush-left string that keeps the method indented
        raise TargetError(f"cannot re-introduce the bug: {where} does not recompile alone: {exc}") from None
    namespace: dict = {}
    exec(code, module.__dict__, namespace)  # noqa: S102 - vLLM's own source, edited by us
    rebuilt = namespace[plain.__name__]
    if isinstance(function, (classmethod, staticmethod)) and not isinstance(rebuilt, type(function)):
        rebuilt = type(function)(rebuilt)  # the decorator line was not part of the source
    return rebuilt


def edit_method(cls, name: str, edits: list[tuple[str, str]]) -> Undo:
    """Replace ``cls.name`` with vLLM's own method after ``edits``."""
    return patch(cls, name, edited(cls.__dict__[name], edits))


def edit_function(module, name: str, edits: list[tuple[str, str]]) -> Undo:
    """Replace the module-level function ``module.name``, wherever vLLM imported it, with vLLM's
    own function after ``edits``."""
    original = module.__dict__[name]
    return patch_everywhere(original, edited(original, edits))
