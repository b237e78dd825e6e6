"""Binding what the user fixes on the command line into the model before it is read:
whole graph-input shapes (``--input-shape``) and symbolic dims (``--dim``), and which
input axes stay unknown afterwards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ruleengine.graph.problems import fail

if TYPE_CHECKING:
    import onnx


def _shape_of(tp: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
    """A value type's declared shape (None when it declares none)."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tp.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def bind_dims(model: onnx.ModelProto, dims: Mapping[str, int]) -> None:
    """Substitute bound symbolic dims everywhere a value type is declared."""
    if not dims:
        return
    g = model.graph
    for vi in (*g.input, *g.output, *g.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])


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
        for old, d in zip(declared or (), dims, strict=False):
            if isinstance(old, str):
                implied.setdefault(old, int(d))
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
