"""Reading ONNX value types: ``(element type, shape)`` of a TypeProto, each distinct
type converted once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ruleengine.graph import onnxlite
from ruleengine.graph.binding import UNNAMED

if TYPE_CHECKING:
    import onnx


def type_shape(tp: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
    """Static dims as ints, symbolic ones by name, unknown ones (also a negative value,
    PaddlePaddle's ``-1``, and the name ``?``) as None; None when the rank is unknown."""
    tt = tp.tensor_type
    if not tp.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            out.append(d.dim_value if d.dim_value >= 0 else None)
        else:
            out.append(None if d.dim_param in UNNAMED else d.dim_param)
    return tuple(out)


class TypeReader:
    """``(elem_type, type_shape)`` of TypeProtos, converted once per distinct type: a
    stack of identical layers has a handful of distinct types for 10^5 tensors, and one
    serialization (C) + a dict lookup is far cheaper than reading each dim in Python."""

    def __init__(self) -> None:
        self._seen: dict[bytes, tuple[int, tuple | None] | None] = {}

    def read(self, tp: onnx.TypeProto) -> tuple[int, tuple | None] | None:
        """None when ``tp`` is no tensor type (sequence, optional, map)."""
        key = tp.SerializeToString()
        try:
            return self._seen[key]
        except KeyError:
            pass
        out = (tp.tensor_type.elem_type, type_shape(tp)) if tp.HasField("tensor_type") else None
        self._seen[key] = out
        return out

    def read_bytes(self, key: bytes) -> tuple[int, tuple | None] | None:
        """``read`` of a serialized TypeProto (as sliced from a serialized model: no
        message made for a type seen before)."""
        try:
            return self._seen[key]
        except KeyError:
            pass
        out = self.read(onnxlite.TypeProto.FromString(key))
        self._seen[key] = out
        return out
