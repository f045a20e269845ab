"""The one command that replays a failure, as every command prints it: ``kvspec check`` on the
same target, seed, budget, injected bugs and check. A seed draws the same whatever command drew
it (kvspec/draws/determinism.py), so a zoo detection or a fuzz find replays with ``check``."""

from __future__ import annotations

import shlex
from pathlib import Path

from kvspec.divergences.known import KNOWN_FILE


def target_flags(target) -> list[str]:
    if target.installed:  # the same Python finds the same vLLM again
        return ["--vllm", "installed"]
    return ["--vllm-src", str(target.root)] if target.is_checkout else ["--vllm", target.version]


def check_command(target, *, seed: int, checks: list[str], inject: list[str] = (), quick: bool = False,
                  divergences: Path | None = None, strict_drafter: bool = False, finds: Path | None = None) -> str:
    """``kvspec check ...`` (shell-quoted) that reruns ``checks`` exactly as they ran."""
    words = ["kvspec", "check", *target_flags(target), "--seed", str(seed)]
    for name in checks:
        words += ["--check", str(name)]
    for name in inject:
        words += ["--inject", name]
    if quick:
        words.append("--quick")
    if divergences is not None and Path(divergences).absolute() != KNOWN_FILE.absolute():
        words += ["--divergences", str(divergences)]
    if strict_drafter:
        words.append("--strict-drafter")
    prefix = f"KVSPEC_FINDS={shlex.quote(str(finds))} " if finds is not None else ""
    return prefix + shlex.join(words)
