"""The layout README's table describes, held: vLLM is named only in impl/, no import cycle,
each folder imports only the layers below it, no file over the size a reader takes in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The installed package's folders (pyproject.toml's package-dir): kvspec.spec is spec/, ...
FOLDERS = {"spec": "spec", "reference": "reference", "impl": "impl", "proofs": "proofs"}
MAX_LINES = 400


def module_files() -> dict[str, Path]:
    """Every kvspec module by its dotted name."""
    modules = {}
    for path in sorted((ROOT / "kvspec").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = f"kvspec.{package}" + ("" if path.stem == "__init__" else f".{path.stem}")
            modules[name] = path
    return modules


MODULES = module_files()


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def kvspec_imports(name: str) -> set[str]:
    return {m for m in imported(MODULES[name]) if m in MODULES and m != name}


def docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
                ids.add(id(node.body[0].value))
    return ids


def names_vllm(path: Path) -> list[str]:
    """The places ``path`` reaches vLLM: an import of it, or a string (not a docstring) holding
    one of its dotted module paths."""
    tree = ast.parse(path.read_text())
    skip = docstrings(tree)
    found = [f"imports {m}" for m in imported(path) if m == "vllm" or m.startswith("vllm.")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if "vllm." in node.value.replace("kvspec.impl.vllm", ""):
                found.append(f"line {node.lineno}: {node.value[:60]!r}")
    return found


@pytest.mark.parametrize("name", [n for n in MODULES if not n.startswith("kvspec.impl")])
def test_only_impl_names_vllm(name):
    assert not names_vllm(MODULES[name]), f"{MODULES[name].relative_to(ROOT)}: {names_vllm(MODULES[name])}"


def test_the_check_of_vllm_names_bites(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Cites vllm.v1.core in a docstring: fine."""\nLINE = "from vllm.v1.core import x"\n')
    assert names_vllm(sample) == ["line 2: 'from vllm.v1.core import x'"]


def test_there_is_no_import_cycle():
    graph = {name: kvspec_imports(name) for name in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a path that returns to its start, or None (depth-first search)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_bites():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# What each folder may import from kvspec: the layers below it, never the tools above.
ALLOWED = {
    "kvspec.spec": ("kvspec.spec",),
    "kvspec.reference": ("kvspec.spec", "kvspec.reference"),
    "kvspec.proofs": ("kvspec.spec", "kvspec.reference", "kvspec.proofs"),
    "kvspec.draws": ("kvspec.spec", "kvspec.reference", "kvspec.draws"),
    "kvspec.oracles": ("kvspec.spec", "kvspec.reference", "kvspec.oracles", "kvspec.divergences", "kvspec.impl.target"),
}
FORBIDDEN = {
    "kvspec.gate": ("kvspec.tools",),  # a tool cannot weaken the gate
    "kvspec.stateful": ("kvspec.tools", "kvspec.gate"),
    "kvspec.impl": ("kvspec.tools", "kvspec.gate", "kvspec.stateful", "kvspec.oracles", "kvspec.draws"),
}
# The checks' names are a leaf with no imports: the bug zoo says which checks catch each bug.
NAMES = "kvspec.gate.names"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_folder_imports_only_what_it_may(name):
    deps = kvspec_imports(name)
    for folder, allowed in ALLOWED.items():
        if name == folder or name.startswith(folder + "."):
            bad = [d for d in deps if d != "kvspec" and not d.startswith(allowed)]
            assert not bad, f"{name} may import only {allowed}, imports {bad}"
    for folder, forbidden in FORBIDDEN.items():
        if name == folder or name.startswith(folder + "."):
            bad = [d for d in deps if d.startswith(forbidden) and d != NAMES]
            assert not bad, f"{name} must not import {forbidden}, imports {bad}"


def test_no_file_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in ROOT.rglob("*.py")
        if not {".venv", ".vllm", "out", ".git"} & set(path.relative_to(ROOT).parts)
        and (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


def local_kvspec_imports(path: Path) -> list[int]:
    """Lines where a function imports a kvspec module: a hidden dependency, usually a cycle."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top
        and any(m.startswith("kvspec") for m in imported_by(node))
    ]


def imported_by(node) -> list[str]:
    return [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_kvspec_modules_are_imported_at_the_top(name):
    assert not local_kvspec_imports(MODULES[name]), f"{MODULES[name].relative_to(ROOT)}: lines {local_kvspec_imports(MODULES[name])}"
