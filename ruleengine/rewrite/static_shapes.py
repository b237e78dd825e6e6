"""Fold the Shape/Size of a static tensor made inside a fused group to a constant.

A ``Shape`` (or ``Size``) of a tensor whose shape is static is a compile-time value, and so
is the shape arithmetic after it (``Node.compile_time``): the topology checks
(``ruleengine/topology.py``) and the matcher do not count it as a path or as a reader. So a
group may hold a tensor and the Reshape/Slice whose bounds an exporter computed from that
tensor's shape (TorchScript's rotary Reshape reads a Shape of its own Concat; Pythia's
Q/K/V Slices a Shape of the head Transpose). In the fused graph that tensor is made inside
the group's node, and a Shape left outside would read it and feed the group again: a cycle.
Each such Shape/Size becomes a ``Constant`` with the same output name and the static value
(what any compiler folds it to), so the fused graph stays acyclic and computes the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from ruleengine.graph import onnxlite
from ruleengine.graph.model import Graph

if TYPE_CHECKING:
    import onnx

_SHAPE_READERS = frozenset({"Shape", "Size"})


def _attr(proto: onnx.NodeProto, name: str) -> int | None:
    for a in proto.attribute:
        if a.name == name:
            return int(a.i)
    return None


def _value(proto: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """What the node computes on a tensor of ``shape`` (Shape's start/end of opset 15)."""
    if proto.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    rank = len(shape)
    start, end = _attr(proto, "start"), _attr(proto, "end")
    lo = 0 if start is None else max(0, min(rank, start + rank if start < 0 else start))
    hi = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
    return np.array(shape[lo:hi], dtype=np.int64)


def fold_static_shapes(
    g: onnx.GraphProto,
    graph: Graph,
    groups: Iterable[Iterable[str]],
    positions: Mapping[str, int],
) -> int:
    """Replace in ``g`` (a copy the rewriter owns) every Shape/Size outside the groups that
    reads a static tensor made inside one; return how many were folded."""
    inside: set[str] = set()
    for nodes in groups:
        inside.update(nodes)
    folded = 0
    for node in graph.nodes:
        if node.op_type not in _SHAPE_READERS or node.domain not in ("", "ai.onnx"):
            continue
        read = graph.tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
        if (
            read is None
            or read.producer not in inside  # made inside a group (one producer per tensor)
            or node.name in inside
            or node.name not in positions
        ):
            continue
        shape = graph.tensor(node.inputs[0]).shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            continue
        proto = g.node[positions[node.name]]
        constant = onnxlite.make_node(
            "Constant",
            [],
            list(proto.output),
            name=proto.name,
            value=onnxlite.from_array(_value(proto, tuple(shape)), f"{proto.output[0]}_value"),
        )
        proto.CopyFrom(constant)
        folded += 1
    return folded
