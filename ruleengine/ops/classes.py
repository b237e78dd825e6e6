"""Op classes (``@elementwise``, ``@view``, ...) and commutative ops, from ops/classes.yaml.

A class is a set of ONNX op types; rules may use ``@<class>`` as an op type. The table is
data, loaded once and cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from ruleengine.ops._data import load_ops_yaml

# Marker type for nodes the loader flagged opaque (control flow, unknown domains): only
# ``@opaque`` matches them.
OPAQUE_MARKER = "<opaque>"


@cache
def _table() -> tuple[Mapping[str, frozenset[str]], frozenset[str], Mapping[str, str]]:
    data = load_ops_yaml("classes.yaml", "op_classes")
    classes = {
        f"@{name}": frozenset(spec["ops"]) | ({OPAQUE_MARKER} if name == "opaque" else set())
        for name, spec in data["classes"].items()
    }
    descriptions = {f"@{k}": v.get("description", "") for k, v in data["classes"].items()}
    return (
        MappingProxyType(classes),
        frozenset(data.get("commutative", ())),
        MappingProxyType(descriptions),
    )


def op_classes() -> Mapping[str, frozenset[str]]:
    """Class name (with its ``@``, e.g. ``"@elementwise"``) -> the ONNX op types in it."""
    return _table()[0]


def commutative_ops() -> frozenset[str]:
    """Binary ops whose inputs may be swapped (matched in either input order)."""
    return _table()[1]


def class_descriptions() -> Mapping[str, str]:
    return _table()[2]


def classes_of(op_type: str) -> tuple[str, ...]:
    """The classes an ONNX op type belongs to, sorted (e.g. ``("@broadcast", "@elementwise")``)."""
    return tuple(sorted(c for c, ops in op_classes().items() if op_type in ops))


def is_view(op_type: str) -> bool:
    """True for metadata-only ops (Reshape, Squeeze, ...): they move no data."""
    return op_type in op_classes().get("@view", frozenset())
