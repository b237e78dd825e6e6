"""Values the loader reads from the model: dtype names, attribute and constant values as
plain hashable Python values, and the attributes ONNX implies (schema defaults, the
spatial attributes of Conv-like ops)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ruleengine.graph import onnxlite
from ruleengine.graph.onnxlite import AttributeProto, GraphProto, TensorProto

if TYPE_CHECKING:
    import onnx

# Constant tensors with at most this many elements keep their values (for param checks).
SMALL_CONST_NUMEL = 64


@functools.cache
def dtype_name(elem_type: int) -> str | None:
    """The name a ``Tensor.dtype`` has for ONNX element type ``elem_type`` (numpy's name,
    else ONNX's in lower case; None for an unknown type)."""
    if not elem_type:
        return None
    try:
        return onnxlite.np_dtype(elem_type).name
    except Exception:  # exotic types (float8, int4) have no numpy dtype
        name = TensorProto.DataType.Name(elem_type).lower()
        return {"float8e4m3fn": "float8e4m3fn"}.get(name, name)


def plain_value(value: Any) -> Any:
    """Attribute/const values as plain, hashable Python values (lists become tuples)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1).tolist()
        if value.dtype.kind in "biufc":  # tolist() gave plain Python numbers already
            return tuple(flat)
        return tuple(plain_value(v) for v in flat)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(plain_value(v) for v in value)
    if isinstance(value, TensorProto):
        arr = small_array(value)
        if arr is not None:
            return tuple(arr.reshape(-1).tolist())
        return f"<tensor {dtype_name(value.data_type)} {tuple(value.dims)}>"
    if isinstance(value, GraphProto):
        return f"<graph {value.name}>"
    return value


def small_array(t: TensorProto) -> np.ndarray | None:
    """The value of a tensor of at most ``SMALL_CONST_NUMEL`` elements held in the model."""
    numel = math.prod(t.dims)
    if numel > SMALL_CONST_NUMEL or t.data_location == TensorProto.EXTERNAL:
        return None
    try:
        return onnxlite.to_array(t)
    except Exception:  # exotic dtypes: no value, still a tensor
        return None


def attribute_value(a: AttributeProto) -> Any:
    """An attribute's value as a plain Python value (None when it cannot be read)."""
    try:
        return plain_value(onnxlite.attribute_value(a))
    except Exception:
        return None


class AttrInfo:
    """Name, type and value (``attribute_value``) of serialized AttributeProtos, each
    distinct one parsed and converted once (a stack of layers repeats a few hundred
    attributes 10^5 times)."""

    def __init__(self) -> None:
        self._seen: dict[bytes, tuple[str, int, Any]] = {}

    def __call__(self, key: bytes) -> tuple[str, int, Any]:
        got = self._seen.get(key)
        if got is None:
            a = AttributeProto.FromString(key)
            got = self._seen[key] = (a.name, a.type, attribute_value(a))
        return got

    @staticmethod
    def bodies(key: bytes) -> list[onnx.GraphProto]:
        """The subgraphs of a GRAPH or GRAPHS attribute."""
        a = AttributeProto.FromString(key)
        return [*([a.g] if a.type == AttributeProto.GRAPH else []), *a.graphs]


def schema_defaults(op_type: str, domain: str, opset: int) -> dict[str, Any]:
    """The default attributes of an op in its schema (a fresh dict the caller may fill)."""
    return dict(_schema_defaults_cached(op_type, domain, opset))


@functools.cache
def _schema_defaults_cached(op_type: str, domain: str, opset: int) -> dict[str, Any]:
    try:
        schema = onnxlite.get_schema(op_type, opset, domain)
    except Exception:  # unknown op: no defaults
        return {}
    out: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        dv = onnxlite.attribute_default(attr)
        if dv.type != AttributeProto.UNDEFINED:
            out[name] = attribute_value(dv)
    return out


_CONV_LIKE = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "QLinearConv")


def spatial_defaults(
    op_type: str, attrs: dict[str, Any], inputs: tuple[str, ...], shapes: Mapping[str, Any]
) -> None:
    """ONNX says absent kernel_shape/strides/dilations/pads follow from the weight's shape."""
    if op_type not in _CONV_LIKE:
        return
    k = None
    if "kernel_shape" in attrs:
        k = len(attrs["kernel_shape"])
    elif op_type in ("Conv", "ConvTranspose") and len(inputs) > 1:
        w = shapes.get(inputs[1])
        if w is not None and len(w) > 2 and all(isinstance(d, int) for d in w[2:]):
            attrs["kernel_shape"] = tuple(w[2:])
            k = len(w) - 2
    if k is None:
        return
    attrs.setdefault("strides", (1,) * k)
    if op_type != "LpPool" or "dilations" in attrs:
        attrs.setdefault("dilations", (1,) * k)
    if attrs.get("auto_pad", "NOTSET") == "NOTSET":
        attrs.setdefault("pads", (0,) * (2 * k))
