"""Checks of what kvspec reads, run before vLLM is imported: the environment variables, flag
values argparse lets through (a ``nan``, a negative bound) and the files (finds, databases).
Each failure is one ``TargetError`` naming the variable, flag or file, so the CLI prints one
line and exits 2 within a second instead of a traceback after vLLM's import."""

from __future__ import annotations

import math
import os
from pathlib import Path

from kvspec.gate import saved_finds
from kvspec.impl.target import TargetError, releases_home, resolve, supported_versions

# Spellings a boolean variable (KVSPEC_STRICT_DRAFTER) may take; anything else is refused, so a
# "false" is never read as true.
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value not in TRUE_WORDS + FALSE_WORDS:
        raise TargetError(f"{name}={os.environ[name]!r}: give 1 or 0 (or true/false, yes/no)")
    return value in TRUE_WORDS


def check_environment() -> None:
    """Every KVSPEC_* variable kvspec reads, each refused by its name when its value is bad."""
    env = os.environ
    if "KVSPEC_VLLM_HOME" in env and not releases_home().is_dir():
        raise TargetError(f"KVSPEC_VLLM_HOME={env['KVSPEC_VLLM_HOME']}: no such directory")
    if env.get("KVSPEC_VLLM_SRC"):
        if env.get("KVSPEC_VLLM"):
            raise TargetError("KVSPEC_VLLM and KVSPEC_VLLM_SRC are both set: give one")
        _named("KVSPEC_VLLM_SRC", lambda: resolve(None, env["KVSPEC_VLLM_SRC"]))
    elif env.get("KVSPEC_VLLM") and env["KVSPEC_VLLM"] not in supported_versions():
        raise TargetError(f"KVSPEC_VLLM={env['KVSPEC_VLLM']}: unsupported vLLM version {env['KVSPEC_VLLM']!r} "
                          f"(supported: {', '.join(supported_versions())})")
    if env.get("KVSPEC_DIVERGENCES") and not Path(env["KVSPEC_DIVERGENCES"]).is_file():
        raise TargetError(f"KVSPEC_DIVERGENCES={env['KVSPEC_DIVERGENCES']}: no such file")
    if "KVSPEC_STRICT_DRAFTER" in env:
        env_flag("KVSPEC_STRICT_DRAFTER")
    if env.get("KVSPEC_FINDS"):
        directory = Path(env["KVSPEC_FINDS"])
        if directory.exists() and not directory.is_dir():
            raise TargetError(f"KVSPEC_FINDS={directory}: not a directory")


def _named(variable: str, work):
    try:
        return work()
    except TargetError as exc:
        raise TargetError(f"{variable}={os.environ[variable]}: {str(exc).split(': ', 1)[-1]}") from None


def finite(flag: str, value: float, *, positive: bool = True) -> float:
    """``value`` of ``flag``, refused when it is nan, infinite, or (``positive``) not above 0."""
    if not math.isfinite(value) or (positive and value <= 0):
        raise TargetError(f"{flag} {value:g}: give a positive number" if positive else f"{flag} {value:g}: give a number")
    return value


def at_least(flag: str, value: int, least: int) -> int:
    if value < least:
        raise TargetError(f"{flag} {value}: give at least {least}")
    return value


def writable_directory(flag: str, path: Path) -> Path:
    """A directory kvspec writes into (an example database, a finds folder): existing and
    writable, or creatable; never a file, never under a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise TargetError(f"{flag} {path}: not a directory")
    existing = next(p for p in [path, *path.absolute().parents] if p.exists())
    if not existing.is_dir():
        raise TargetError(f"{flag} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise TargetError(f"{flag} {path}: {existing} is not writable")
    return path


def readable_finds(directory: Path) -> list[dict]:
    """The saved finds in ``directory``, each file checked (saved_finds.load names a bad one)."""
    return saved_finds.load(directory)
