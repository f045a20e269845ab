"""Emitted plain-vLLM tests in vLLM's own style, so a reviewer pastes them without a lint round.

vLLM's ruff settings (``VLLM_RUFF``) are those of vLLM's repository: line length 88 and the rule
set E, F, UP, B, SIM, I, G with its ignores, read from vllm-project/vllm ``.buildkite/pyproject.toml``
at 7ded96b3c73f63400cdb048a73c34292ba862d99 ("the same core rules as the main pyproject.toml",
the line length of the ruff-format migration). The PyPI releases under ``.vllm/`` carry no
pyproject, so the target version is the oldest Python vLLM 0.34.0 declares (Requires-Python >=3.11)
and ``vllm`` is first party, as it is inside vLLM's tree.

``paste_ready`` leaves the code's layout to ruff itself (``ruff format`` and ``ruff check --fix``
for the import order, the pinned ruff binary kvspec depends on); ruff never rewraps comments or
docstrings, so those alone are wrapped here, by ``textwrap``, before ruff runs.
"""

from __future__ import annotations

import ast
import functools
import io
import subprocess
import textwrap
import tokenize
from pathlib import Path

WIDTH = 88
VLLM_RUFF = f"""\
line-length = {WIDTH}
target-version = "py311"

[lint]
select = ["E", "F", "UP", "B", "SIM", "I", "G"]
ignore = ["F405", "F403", "E731", "B007", "UP032", "UP007"]

[lint.isort]
known-first-party = ["vllm"]

[format]
docstring-code-format = true
"""


@functools.cache
def ruff_config() -> Path:
    """vLLM's settings as a file ruff reads (written once per process, in kvspec's temp dir)."""
    import tempfile  # noqa: PLC0415 - only when a test is emitted

    path = Path(tempfile.mkdtemp(prefix="kvspec-vllm-ruff-")) / "ruff.toml"
    path.write_text(VLLM_RUFF)
    return path


def ruff_binary() -> str:
    from ruff.__main__ import find_ruff_bin  # noqa: PLC0415 - the ruff kvspec pins

    return str(find_ruff_bin())


def _ruff(*args: str, source: str) -> str:
    done = subprocess.run([ruff_binary(), *args, "--config", str(ruff_config()), "--stdin-filename",
                           "test_kvspec.py", "-"], input=source, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"ruff {args[0]} refused an emitted test: {done.stderr.strip()}")
    return done.stdout


def emits_paste_ready(emitter):
    """``emitter`` (returning a test module's source) made to return it ``paste_ready``."""

    @functools.wraps(emitter)
    def emit(*args, **kwargs) -> str:
        return paste_ready(emitter(*args, **kwargs))

    return emit


def paste_ready(source: str) -> str:
    """``source`` (a complete test module) formatted and import-sorted as vLLM's ruff wants, its
    long comments and docstring lines wrapped at 88 columns."""
    source = _wrap_docstrings(_wrap_comments(source))
    source = _ruff("check", "--fix-only", "--exit-zero", "--select", "I", source=source)
    source = _ruff("format", source=source)
    return _wrap_comments(source)  # a comment ruff's layout moved or indented deeper


def _wrap_comments(source: str) -> str:
    """A comment past the width is wrapped onto comment lines of its own; a trailing one moves
    above the line it ended (Python reads the two the same)."""
    lines = source.splitlines()
    comments = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for token in reversed(comments):
        row, column = token.start
        line = lines[row - 1]
        if len(line) <= WIDTH:
            continue
        code = line[:column].rstrip()
        indent = line[: len(line) - len(line.lstrip())]
        text = token.string.lstrip("#").strip()
        wrapped = textwrap.wrap(text, WIDTH - len(indent) - 2, break_long_words=False) or [""]
        replacement = [f"{indent}# {part}" for part in wrapped]
        lines[row - 1: row] = replacement + ([code] if code.strip() else [])
    return "\n".join(lines) + "\n"


def _wrap_docstrings(source: str) -> str:
    """Lines of a module's or function's docstring past the width, wrapped in place."""
    tree = ast.parse(source)
    lines = source.splitlines()
    spans = []
    for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]:
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            spans.append((first.lineno, first.end_lineno))
    for start, end in sorted(spans, reverse=True):
        lines[start - 1: end] = _rewrap_paragraphs(lines[start - 1: end])
    return "\n".join(lines) + "\n"


def _rewrap_paragraphs(lines: list[str]) -> list[str]:
    """Each paragraph (lines between blank ones) with a line past the width, refilled."""
    out: list[str] = []
    paragraph: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            paragraph.append(line)
            continue
        if any(len(text) > WIDTH for text in paragraph):
            indent = paragraph[-1][: len(paragraph[-1]) - len(paragraph[-1].lstrip())]
            out += textwrap.wrap(" ".join(text.strip() for text in paragraph), WIDTH - len(indent),
                                 initial_indent=paragraph[0][: len(paragraph[0]) - len(paragraph[0].lstrip())],
                                 subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
        else:
            out += paragraph
        out.append(line)
        paragraph = []
    return out[:-1]


def style_problems(paths: list[Path]) -> list[str]:
    """What vLLM's ``ruff check`` and ``ruff format --check`` say of ``paths`` (empty: none)."""
    problems = []
    for command in (["check", "--output-format", "concise"], ["format", "--check"]):
        done = subprocess.run([ruff_binary(), *command, "--config", str(ruff_config()), *map(str, paths)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(done.stdout + done.stderr)
    return problems
