"""The mutation operators of ``kvspec mutate``: which of cosmic-ray's operators are used, and
the few kvspec adds in cosmic-ray's own form.

cosmic-ray (a maintained mutation-testing tool) supplies the operators as classes over parso
trees, and ``cosmic_ray.mutating.mutate_code(source, operator, occurrence)`` applies one
operator at one site of a source *string*. That is all kvspec takes from it: cosmic-ray's
runner edits files on disk, which kvspec never does to vLLM (kvspec.tools.mutation compiles the
mutated string in memory instead).

The operators kvspec adds are missing from cosmic-ray and named by the brief: min/max and
gcd/lcm swaps, swapped positional arguments, a dropped operand of ``and``/``or``, a condition
replaced by ``True``/``False``, and off-by-one on loop and slice bounds (cosmic-ray's
``NumberReplacer`` shifts only literal numbers). They subclass cosmic-ray's ``Operator``, so
the same visitor numbers their sites the same way.
"""

from __future__ import annotations

import parso
from cosmic_ray.operators import (
    binary_operator_replacement as binary,
)
from cosmic_ray.operators import (
    boolean_replacer,
    break_continue,
    number_replacer,
    zero_iteration_for_loop,
)
from cosmic_ray.operators import (
    comparison_operator_replacement as comparison,
)
from cosmic_ray.operators import (
    unary_operator_replacement as unary,
)
from cosmic_ray.operators.operator import Example, Operator
from parso.python.tree import IfStmt, Name


def _replace_code(node, code: str):
    """A parso node that prints as ``code`` where ``node`` stood (whitespace kept)."""
    return parso.parse(node.get_first_leaf().prefix + code)


# ----------------------------------------------------------------------------- kvspec's own


class _RenameCall(Operator):
    """Rename a called builtin (``min(``) or a called attribute (``math.gcd(``)."""

    from_name = to_name = ""

    def mutation_positions(self, node):
        if isinstance(node, Name) and node.value == self.from_name and _is_called(node):
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        node.value = self.to_name
        return node

    @classmethod
    def examples(cls):
        return (Example(f"x = {cls.from_name}(a, b)", f"x = {cls.to_name}(a, b)"),)


def _is_called(name: Name) -> bool:
    parent = name.parent
    if parent.type == "trailer":  # math.gcd(...): the name is `.gcd`, a call must follow
        following = parent.get_next_sibling()
    elif parent.type in ("atom_expr", "power") and parent.children[0] is name:
        following = name.get_next_sibling()
    else:
        return False
    return following is not None and following.type == "trailer" and following.children[0].value == "("


class ReplaceMinWithMax(_RenameCall):
    from_name, to_name = "min", "max"


class ReplaceMaxWithMin(_RenameCall):
    from_name, to_name = "max", "min"


class ReplaceGcdWithLcm(_RenameCall):
    from_name, to_name = "gcd", "lcm"


class ReplaceLcmWithGcd(_RenameCall):
    from_name, to_name = "lcm", "gcd"


# Calls whose positional arguments commute (a swap is equivalent by construction) or whose
# swap is a type error on every input (killed by construction): not worth a mutant.
_NO_SWAP = {"min", "max", "gcd", "lcm", "isinstance", "zip", "replace", "setattr", "getattr"}


def _positional_args(trailer) -> list:
    if trailer.type != "trailer" or trailer.children[0].value != "(" or len(trailer.children) != 3:
        return []
    arglist = trailer.children[1]
    if arglist.type != "arglist":
        return []
    return [c for c in arglist.children[::2] if c.type != "argument" and c.type != "star_expr"]


def _called_name(trailer) -> str:
    previous = trailer.get_previous_sibling()
    if previous is None:
        return ""
    return previous.children[-1].value if previous.type == "trailer" else getattr(previous, "value", "")


class SwapArguments(Operator):
    """Swap two neighbouring positional arguments of a call: ``f(a, b)`` -> ``f(b, a)``."""

    def mutation_positions(self, node):
        args = _positional_args(node)
        if len(args) >= 2 and _called_name(node) not in _NO_SWAP:
            for first, second in zip(args, args[1:]):
                yield (first.start_pos, second.end_pos)

    def mutate(self, node, index):
        args = _positional_args(node)
        first, second = args[index], args[index + 1]
        children = node.children[1].children
        i, j = children.index(first), children.index(second)
        first_prefix, second_prefix = first.get_first_leaf().prefix, second.get_first_leaf().prefix
        children[i], children[j] = second, first
        second.get_first_leaf().prefix, first.get_first_leaf().prefix = first_prefix, second_prefix
        return node

    @classmethod
    def examples(cls):
        return (Example("f(a, b, c)", "f(b, a, c)"), Example("f(a, b, c)", "f(a, c, b)", occurrence=1))


class DropOperand(Operator):
    """Drop one operand of ``and``/``or``: ``a and b`` -> ``b`` (or ``a``)."""

    def mutation_positions(self, node):
        if node.type in ("and_test", "or_test"):
            for operand in node.children[::2]:
                yield (operand.start_pos, operand.end_pos)

    def mutate(self, node, index):
        operands = node.children[::2]
        kept = [op.get_code(include_prefix=False) for k, op in enumerate(operands) if k != index]
        keyword = node.children[1].value
        return _replace_code(node, f" {keyword} ".join(f"({code})" for code in kept))

    @classmethod
    def examples(cls):
        return (Example("x = a and b", "x = (b)"), Example("x = a or b or c", "x = (a) or (c)", occurrence=1))


class _ReplaceCondition(Operator):
    """Replace the test of an ``if``/``elif`` or of a conditional expression by a constant."""

    constant = ""

    def mutation_positions(self, node):
        for test in _condition_tests(node):
            yield (test.start_pos, test.end_pos)

    def mutate(self, node, index):
        test = _condition_tests(node)[index]
        position = node.children.index(test)
        node.children[position] = _replace_code(test, self.constant)
        return node

    @classmethod
    def examples(cls):
        return (Example("x = a if b else c", f"x = a if {cls.constant} else c"),)


def _condition_tests(node) -> list:
    if isinstance(node, IfStmt):  # if t: ... elif t: ... (the `else` has no test)
        return [node.children[k + 1] for k, c in enumerate(node.children) if c.type == "keyword" and c.value in ("if", "elif")]
    if node.type == "test":  # a if t else b
        return [node.children[2]]
    return []


class ReplaceConditionWithTrue(_ReplaceCondition):
    constant = "True"


class ReplaceConditionWithFalse(_ReplaceCondition):
    constant = "False"


class _OffByOne(Operator):
    """Shift a loop or slice bound by one: arguments of ``range``/``islice`` and slice bounds."""

    delta = ""

    def mutation_positions(self, node):
        for bound in _bounds(node):
            yield (bound.start_pos, bound.end_pos)

    def mutate(self, node, index):
        bound = _bounds(node)[index]
        parent = bound.parent
        position = parent.children.index(bound)
        parent.children[position] = _replace_code(bound, f"({bound.get_code(include_prefix=False)}) {self.delta}")
        return node

    @classmethod
    def examples(cls):
        return (Example("x = y[a:]", f"x = y[(a) {cls.delta}:]"),)


def _bounds(node) -> list:
    if node.type == "subscript":
        return [c for c in node.children if c.type not in ("operator", "sliceop")]
    if node.type == "trailer" and _called_name(node) in ("range", "islice"):
        args = _positional_args(node)
        if not args and len(node.children) == 3 and node.children[1].type != "argument":
            args = [node.children[1]]  # a single argument has no arglist
        return args[1:] if _called_name(node) == "islice" else args
    return []


class AddOne(_OffByOne):
    delta = "+ 1"


class SubtractOne(_OffByOne):
    delta = "- 1"


# ----------------------------------------------------------------------------- the selection


def _comparisons() -> list[type[Operator]]:
    """Boundary flips (< <-> <=, > <-> >=), direction flips (< <-> >, <= <-> >=) and
    negations (< -> >=, == <-> !=, is <-> is not, ...). Not every permutation: ``<`` to
    ``is`` is a mutant no one would write."""
    pairs = [
        ("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"),  # boundary
        ("Lt", "Gt"), ("Gt", "Lt"), ("LtE", "GtE"), ("GtE", "LtE"),  # direction
        ("Lt", "GtE"), ("GtE", "Lt"), ("Gt", "LtE"), ("LtE", "Gt"),  # negation
        ("Eq", "NotEq"), ("NotEq", "Eq"), ("Is", "IsNot"), ("IsNot", "Is"),
    ]  # fmt: skip
    return [getattr(comparison, f"ReplaceComparisonOperator_{a}_{b}") for a, b in pairs]


def _arithmetic() -> list[type[Operator]]:
    """+ <-> -, * <-> //, // <-> %: the slips that keep an int an int (to ``/`` would be a
    float, to ``**`` or a shift a different kind of expression)."""
    pairs = [("Add", "Sub"), ("Sub", "Add"), ("Mul", "FloorDiv"), ("FloorDiv", "Mul"), ("FloorDiv", "Mod"), ("Mod", "FloorDiv")]
    return [getattr(binary, f"ReplaceBinaryOperator_{a}_{b}") for a, b in pairs]


OPERATORS: dict[str, type[Operator]] = {
    op.__name__: op
    for op in [
        *_comparisons(),
        *_arithmetic(),
        number_replacer.NumberReplacer,
        boolean_replacer.ReplaceAndWithOr,
        boolean_replacer.ReplaceOrWithAnd,
        boolean_replacer.ReplaceTrueWithFalse,
        boolean_replacer.ReplaceFalseWithTrue,
        boolean_replacer.AddNot,
        unary.ReplaceUnaryOperator_Delete_Not,
        break_continue.ReplaceBreakWithContinue,
        break_continue.ReplaceContinueWithBreak,
        zero_iteration_for_loop.ZeroIterationForLoop,
        ReplaceMinWithMax,
        ReplaceMaxWithMin,
        ReplaceGcdWithLcm,
        ReplaceLcmWithGcd,
        SwapArguments,
        DropOperand,
        ReplaceConditionWithTrue,
        ReplaceConditionWithFalse,
        AddOne,
        SubtractOne,
    ]
}
