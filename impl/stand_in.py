"""The objects the adapter hands vLLM in place of real ones it cannot build cheaply (the
scheduler's fields its chunk rules read, a model config with no model, a connector's request).

A stand-in is a ``types.SimpleNamespace`` under its own name, so that when vLLM reads a field a
stand-in lacks (a release whose code reads one more), the ``AttributeError`` is known to be
kvspec's failure to drive that vLLM, never a vLLM crash (impl/failures.py)."""

from __future__ import annotations

import types


class StandIn(types.SimpleNamespace):
    """A stand-in for the vLLM object ``role`` names, holding only the fields given."""

    def __init__(self, role: str, /, **fields):
        super().__init__(_role=role, **fields)


def missing_field(exc: BaseException) -> str | None:
    """``"<role>.<field>"`` when ``exc`` is vLLM reading a field a stand-in lacks, else None."""
    if isinstance(exc, AttributeError) and isinstance(getattr(exc, "obj", None), StandIn):
        return f"{exc.obj._role}.{exc.name}"
    return None
