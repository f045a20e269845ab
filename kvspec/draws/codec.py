"""Plain JSON for the spec's vocabulary, so that a workload or a saved find crosses a process
boundary (kvspec review's workers) and outlives a run (kvspec fuzz's finds) as readable data.

Frozen dataclasses become ``{"$": "ClassName", field: value, ...}``, enums ``{"$enum": "Kind",
"value": ...}``, tuples and frozensets are tagged so that they come back hashable. Only the
classes named here are decoded: a find file is data, never code.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from kvspec.spec.grouping import Group, Grouping
from kvspec.spec.grouping_properties import Model
from kvspec.spec.layers import CacheGroup, Kind, LayerSpec, SpecDecode
from kvspec.spec.setting import CacheState, Hit, LookupSetting

CLASSES = {
    cls.__name__: cls for cls in (CacheGroup, CacheState, Group, Grouping, Hit, LayerSpec, LookupSetting, Model, SpecDecode)
}
ENUMS = {Kind.__name__: Kind}


def register(cls: type) -> type:
    """Let ``cls`` (a frozen dataclass of plain fields) cross as data too."""
    CLASSES[cls.__name__] = cls
    return cls


def encode(value: Any) -> Any:
    """A JSON-ready form of ``value`` (see the module docstring)."""
    if isinstance(value, Enum):
        return {"$enum": type(value).__name__, "value": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__name__ not in CLASSES:
            raise TypeError(f"kvspec.draws.codec does not know {type(value).__name__}")
        # A field of the target's (a release's rules) is not the value's data: it is left out,
        # and whoever judges the decoded value gives it the target's own.
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                  if not f.metadata.get("of_the_target")}
        return {"$": type(value).__name__, **fields}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"$frozenset": sorted((encode(v) for v in value), key=json.dumps)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"$dict": {k: encode(v) for k, v in value.items()}}
        raise TypeError("only string-keyed dicts are encoded")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"kvspec.draws.codec cannot encode {type(value).__name__}")


def decode(data: Any) -> Any:
    """The value ``encode`` was given."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "$enum" in data:
        return ENUMS[data["$enum"]](data["value"])
    if "$tuple" in data:
        return tuple(decode(v) for v in data["$tuple"])
    if "$frozenset" in data:
        return frozenset(decode(v) for v in data["$frozenset"])
    if "$dict" in data:
        return {k: decode(v) for k, v in data["$dict"].items()}
    if "$" in data:
        cls = CLASSES.get(data["$"])
        if cls is None:
            raise ValueError(f"unknown class {data['$']!r} in kvspec data")
        return cls(**{k: decode(v) for k, v in data.items() if k != "$"})
    raise ValueError(f"untagged object in kvspec data: {sorted(data)[:3]}")


def dumps(value: Any) -> str:
    return json.dumps(encode(value), separators=(",", ":"))


def loads(text: str) -> Any:
    return decode(json.loads(text))
