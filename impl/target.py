"""Which vLLM kvspec checks, and how it is put on the import path.

A target is a tree that holds the ``vllm`` package: a pinned release that scripts/setup.sh
unpacked into ``.vllm/<version>/``, a local vLLM checkout (``--vllm-src``), or the vLLM this
Python would import anyway (``--vllm installed``: a developer's editable install, with kvspec
``pip install``ed beside it). Either way only its pure-Python files are used; the KV-cache code
never loads the compiled kernels. One process imports one target: two vLLMs cannot share
``sys.modules``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# A checkout must hold these: they are what kvspec drives.
REQUIRED_FILES = (
    "vllm/__init__.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
)


class TargetError(Exception):
    """Bad input or a broken set-up: the CLI prints the message on one line and exits 2."""


@dataclass(frozen=True)
class Target:
    root: Path  # the directory that holds the `vllm` package
    version: str  # the release, or what a checkout's _version.py says ("dev" if nothing)
    is_checkout: bool
    installed: bool = False  # found on this Python's path (``--vllm installed``), not placed by kvspec

    @property
    def label(self) -> str:
        if self.installed:
            return f"installed vLLM {self.version} ({self.root})"
        if self.is_checkout:
            return f"vLLM checkout {self.root} (version {self.version})"
        return f"vLLM {self.version} (release)"


def supported_versions() -> list[str]:
    """The releases kvspec supports, the default first (impl/vllm-versions.txt)."""
    text = resources.files("kvspec.impl").joinpath("vllm-versions.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def default_version() -> str:
    return supported_versions()[0]


def releases_home() -> Path:
    return Path(os.environ.get("KVSPEC_VLLM_HOME", PROJECT_ROOT / ".vllm")).absolute()


def resolve(version: str | None = None, src: str | os.PathLike | None = None) -> Target:
    """The target named by ``--vllm VERSION`` / ``--vllm-src PATH`` (or KVSPEC_VLLM /
    KVSPEC_VLLM_SRC), defaulting to the pinned release."""
    src = src if src is not None else os.environ.get("KVSPEC_VLLM_SRC") or None
    if src is not None:
        if version is not None:
            raise TargetError("give either --vllm VERSION or --vllm-src PATH, not both")
        return _checkout(Path(src))
    version = version or os.environ.get("KVSPEC_VLLM") or default_version()
    if version == INSTALLED:
        return installed()
    supported = supported_versions()
    if version not in supported:
        raise TargetError(
            f"unsupported vLLM version {version!r} (supported: {', '.join(supported)})"
        )
    root = releases_home() / version
    if not (root / ".kvspec-complete").is_file():
        raise TargetError(
            f"vLLM {version} is not installed at {root}: run scripts/setup.sh {version}"
        )
    return Target(root=root, version=version, is_checkout=False)


INSTALLED = "installed"


def installed() -> Target:
    """The ``vllm`` this Python imports by itself, located without importing it (so kvspec still
    sets vLLM up its way first, see ``activate``); its version is what vLLM will report."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        raise TargetError("--vllm installed: no vllm is importable in this Python "
                          f"({sys.executable}); install it, or give --vllm VERSION or --vllm-src PATH")
    root = Path(spec.origin).parent.parent
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        raise TargetError(f"--vllm installed: the vllm at {root} lacks {missing[0]}")
    version = _checkout_version(root)
    if version == "dev":
        try:
            version = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            pass
    return Target(root=root.absolute(), version=version, is_checkout=False, installed=True)


def _checkout(path: Path) -> Target:
    if not path.is_dir():
        raise TargetError(f"--vllm-src {path}: no such directory")
    if path.name == "vllm" and (path / "__init__.py").is_file() and not (path / "vllm").is_dir():
        path = path.parent  # the package folder was given; its parent is the checkout
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise TargetError(f"--vllm-src {path} is not a vLLM checkout (missing {missing[0]})")
    return Target(root=path.resolve(), version=_checkout_version(path), is_checkout=True)


def _checkout_version(path: Path) -> str:
    version_file = path / "vllm" / "_version.py"
    if version_file.is_file():
        # `__version__ = version = '0.34.0'` in releases; annotations alone (`__version__: str`) skipped.
        found = re.search(r"^(?:__version__|version)\b[^=\n]*=[^'\"\n]*['\"]([^'\"]+)['\"]",
                          version_file.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
    return "dev"


_active: Target | None = None


def activate(target: Target):
    """Import ``vllm`` from ``target`` and return the module. Refuses to mix two targets."""
    global _active
    if _active is not None:
        if _active != target:
            raise TargetError(f"this process already imported {_active.label}")
        return sys.modules["vllm"]
    if "vllm" in sys.modules:
        raise TargetError("vllm was imported before kvspec chose its target")
    # Offline and quiet: nothing here may reach a model hub, and vLLM's start-up chatter
    # (no vllm._C, no triton) is expected on CPU. Warnings kvspec asserts on are captured
    # from vLLM's loggers directly (impl/vllm_adapter.py), whatever this level.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # Out of an engine vLLM installs no log handler, so its warnings reach Python's last-resort
    # handler whatever VLLM_LOGGING_LEVEL says; quiet them at the package logger.
    logging.getLogger("vllm").setLevel(logging.ERROR)
    # With VLLM_TARGET_DEVICE=cpu, vLLM 0.34.0 insists on triton-cpu; kvspec passes a CPU
    # DeviceConfig instead (see the adapter).
    os.environ.pop("VLLM_TARGET_DEVICE", None)
    sys.path.insert(0, str(target.root))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*commit hash.*")
            warnings.filterwarnings("ignore", category=FutureWarning)
            import vllm  # noqa: PLC0415
    except Exception as exc:  # a broken tree or a missing dependency: a set-up problem
        sys.path.remove(str(target.root))
        raise TargetError(f"{target.label} does not import: {type(exc).__name__}: {exc}") from None
    origin = Path(os.path.abspath(vllm.__file__))  # unresolved: a checkout may hold symlinks
    if target.root not in origin.parents:
        raise TargetError(f"imported vllm from {origin}, not from {target.root}")
    if not (target.is_checkout or target.installed) and vllm.__version__ != target.version:
        raise TargetError(f"{target.root} holds vLLM {vllm.__version__}, expected {target.version}")
    _active = target
    return vllm
