"""Binding what the user fixes on the command line into the model before it is read:
whole graph-input shapes (``--input-shape``) and symbolic dims (``--dim``), and which
input axes stay unknown afterwards.

An unknown dim is a symbolic one (``dim_param``), one with neither value nor name, or a
negative ``dim_value`` (PaddlePaddle writes ``-1`` for an unknown batch) or the name
``?`` (Paddle2ONNX's spelling of "unknown", not one size shared by its axes). A nameless
unknown axis of a graph input is bound by its axis name, ``--dim x[0]=1`` (the name the
"unbound input dims" note shows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ruleengine.graph.problems import fail

if TYPE_CHECKING:
    import onnx


# dim_param values that name no size: an axis so spelled is unknown on its own
UNNAMED = frozenset({"", "?"})


def _shape_of(tp: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
    """A value type's declared shape (None when it declares none)."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tp.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param not in UNNAMED:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def axis_name(name: str, axis: int) -> str:
    """How a nameless unknown axis of graph input ``name`` is named: ``x[0]``."""
    return f"{name}[{axis}]"


def nameless_axes(model: onnx.ModelProto) -> set[str]:
    """The axis names (``x[0]``) of the graph inputs' nameless unknown dims."""
    return {
        axis_name(vi.name, axis)
        for vi in model.graph.input
        for axis, d in enumerate(vi.type.tensor_type.shape.dim)
        if unknown_nameless(d)
    }


def unknown_nameless(d: onnx.TensorShapeProto.Dimension) -> bool:
    """An unknown dim without a symbolic name: neither value nor name (or an empty name,
    or ``?``), or a negative value (``-1``)."""
    which = d.WhichOneof("value")
    if which == "dim_value":
        return d.dim_value < 0
    return which is None or d.dim_param in UNNAMED


def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int]) -> None:
    """Substitute bound symbolic dims everywhere a value type is declared, and bound
    nameless axes (``x[0]``) of the graph inputs."""
    if not dims:
        return
    g = model.graph
    for vi in (*g.input, *g.output, *g.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims and d.dim_param not in UNNAMED:
                d.dim_value = int(dims[d.dim_param])
    for vi in g.input:
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            key = axis_name(vi.name, axis)
            if key in dims and unknown_nameless(d):
                d.dim_value = int(dims[key])


MAX_DIM = (1 << 63) - 1  # ONNX dims are int64


def bind_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], where: str
) -> dict[str, int]:
    """Set whole graph-input shapes (``--input-shape NAME:d0,d1,...``, ATC's convention).
    A symbolic or unknown dim takes the given size; a static dim must agree with it.
    Returns the symbolic dim names so bound (the same name is the same size elsewhere)."""
    implied: dict[str, int] = {}
    inits = {i.name for i in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, dims in shapes.items():
        spec = f"{name}:{','.join(str(d) for d in dims)}"
        vi = inputs.get(name)
        if vi is None:
            raise fail(
                "shape-input",
                f"input shape {spec}: the model has no graph input {name!r}",
                where,
                f"graph inputs: {', '.join(inputs) or 'none'}",
            )
        declared = _shape_of(vi.type)
        for axis, d in enumerate(dims):
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise fail(
                    "shape-size",
                    f"input shape {spec}: size {d!r} of axis {axis} is not a positive integer",
                    where,
                    "every size is a positive integer, e.g. input_ids:1,128",
                )
            if d > MAX_DIM:
                raise fail(
                    "shape-overflow",
                    f"input shape {spec}: size {d} of axis {axis} does not fit an ONNX dim (int64)",
                    where,
                    f"sizes are at most {MAX_DIM}",
                )
        if declared is not None and len(declared) != len(dims):
            raise fail(
                "shape-rank",
                f"input shape {spec} has {len(dims)} dim(s); input {name!r} has rank "
                f"{len(declared)} ({_show_shape(declared)})",
                where,
                f"give {len(declared)} sizes for {name}",
            )
        for axis, (old, d) in enumerate(zip(declared or (), dims, strict=False)):
            if isinstance(old, int) and old != d:
                raise fail(
                    "shape-conflict",
                    f"input shape {spec}: axis {axis} of input {name!r} is {old} in the "
                    f"model, not {d}",
                    where,
                    "only symbolic or unknown dims can be bound; re-export for other sizes",
                )
        for axis, (old, d) in enumerate(zip(declared or (), dims, strict=False)):
            if isinstance(old, str):
                implied.setdefault(old, int(d))
            elif old is None:
                implied[axis_name(name, axis)] = int(d)
        tt = vi.type.tensor_type
        tt.ClearField("shape")
        for d in dims:
            tt.shape.dim.add().dim_value = int(d)
    return implied


def _show_shape(shape: tuple) -> str:
    """A shape as messages show it: ``[1, ?, 768]``."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def input_axes(
    shapes: Mapping[str, tuple | None], inputs: Sequence[str], dims: Mapping[str, int]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """Graph-input axes whose size is still unknown (``input_ids[1]``), and where each
    symbolic dim name comes from: what a user can bind, named as the user sees it."""
    unbound: list[str] = []
    sources: dict[str, str] = {}
    for name in inputs:
        shape = shapes.get(name)
        for axis, d in enumerate(shape or ()):
            if isinstance(d, int) or (isinstance(d, str) and d in dims):
                continue
            where = f"{name}[{axis}]"
            unbound.append(where)
            if isinstance(d, str):
                sources.setdefault(d, where)
    return tuple(unbound), sources
