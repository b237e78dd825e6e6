"""Shape resolution without weight bytes and without the working directory.

ONNX's own shape inference (C++, no data propagation) gives every tensor a shape, but it
leaves ``unk__N`` wherever a size comes from a *value* computed in the graph: TorchScript
exports build attention masks and Expand targets through Shape -> Gather -> Concat ->
Where chains, dynamo exports compute Reshape targets from Shape. Here those small values
are computed in Python (numpy on vectors of a few elements), the nodes that produce them
are replaced by ``Constant`` nodes in a private copy of the model, and ONNX's inference
runs again; repeated until no new value is found (two or three rounds on real exports).

Only inline initializers of at most ``VALUE_NUMEL`` elements are read (shape vectors,
axes, scalars), and integer tensors of at most ``EXTERNAL_INT_NUMEL`` elements kept in
external data, from the model's own folder; weights are never read, and the working
directory plays no part, so the result is the same from anywhere and with the weight
file absent (as long as shape vectors are not stored in it). See docs/shapes.md for the figures
that chose this over onnx's data propagation and onnxruntime's symbolic inference.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ruleengine.graph import onnxlite, segments
from ruleengine.graph.onnxlite import TensorProto
from ruleengine.graph.segments import NodeFields
from ruleengine.graph.typeread import TypeReader, type_shape
from ruleengine.procs import FORK_FROM_NODES

if TYPE_CHECKING:
    import onnx

# Values of at most this many elements are computed and kept (shape vectors, masks of
# tiny graphs stay out: their shapes come from ONNX once the vectors are known).
VALUE_NUMEL = 4096
MAX_ROUNDS = 8

Value = np.ndarray


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnxlite.attribute_value(a) for a in node.attribute}


def _axis_list(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _np_dtype(elem: int) -> Any:
    return onnxlite.np_dtype(elem)


def _shape_op(x_shape: tuple, attrs: dict[str, Any]) -> Value | None:
    rank = len(x_shape)
    start = int(attrs.get("start", 0))
    end = attrs.get("end")
    start = max(0, min(rank, start + rank if start < 0 else start))
    if end is None:
        stop = rank
    else:
        end = int(end)
        stop = max(0, min(rank, end + rank if end < 0 else end))
    dims = x_shape[start:stop]
    if not all(isinstance(d, int) for d in dims):
        return None
    return np.array(dims, dtype=np.int64)


def _slice(x: Value, starts: Value, ends: Value, axes: Value | None, steps: Value | None):
    axes_l = _axis_list(axes) if axes is not None else list(range(len(_axis_list(starts))))
    steps_l = _axis_list(steps) if steps is not None else [1] * len(axes_l)
    idx = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes_l, _axis_list(starts), _axis_list(ends), steps_l, strict=False):
        big = np.iinfo(np.int64)
        e = None if (st > 0 and e >= big.max // 2) or (st < 0 and e <= big.min // 2) else e
        idx[a % x.ndim] = slice(s, e, st)
    return x[tuple(idx)]


def _reshape(x: Value, shape: Value, allowzero: int) -> Value:
    target = _axis_list(shape)
    if not allowzero:
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return x.reshape(target)


def _unsqueeze(x: Value, axes: list[int]) -> Value:
    rank = x.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        x = np.expand_dims(x, a)
    return x


def _binary(fn: Callable[[Value, Value], Value]) -> Callable[..., Value]:
    return lambda ins, attrs: fn(ins[0], ins[1])


def _div(a: Value, b: Value) -> Value:
    if np.issubdtype(a.dtype, np.integer):
        q = np.trunc(a / b)  # ONNX integer Div truncates (C semantics)
        return q.astype(a.dtype)
    return (a / b).astype(a.dtype)


def _mod(ins: list[Value], attrs: dict[str, Any]) -> Value:
    if attrs.get("fmod", 0):
        return np.fmod(ins[0], ins[1])
    return np.mod(ins[0], ins[1])


def _cast(ins: list[Value], attrs: dict[str, Any]) -> Value:
    return ins[0].astype(_np_dtype(int(attrs["to"])))


def _gather(ins: list[Value], attrs: dict[str, Any]) -> Value:
    return np.take(ins[0], ins[1].astype(np.int64), axis=int(attrs.get("axis", 0)))


def _concat(ins: list[Value], attrs: dict[str, Any]) -> Value:
    return np.concatenate(ins, axis=int(attrs.get("axis", 0)))


def _squeeze(ins: list[Value], attrs: dict[str, Any], opset: int) -> Value:
    axes = attrs.get("axes") if opset < 13 else (ins[1] if len(ins) > 1 else None)
    if axes is None:
        return np.squeeze(ins[0])
    return np.squeeze(ins[0], axis=tuple(a % ins[0].ndim for a in _axis_list(axes)))


def _unsq(ins: list[Value], attrs: dict[str, Any], opset: int) -> Value:
    axes = attrs.get("axes") if opset < 13 else ins[1]
    return _unsqueeze(ins[0], _axis_list(axes))


def _range(ins: list[Value], attrs: dict[str, Any]) -> Value:
    start, limit, delta = (x.reshape(()).item() for x in ins[:3])
    return np.arange(start, limit, delta).astype(ins[0].dtype)


def _const_of_shape(ins: list[Value], attrs: dict[str, Any]) -> Value:
    fill = attrs.get("value")
    arr = onnxlite.to_array(fill).reshape(-1) if fill is not None else np.zeros(1, np.float32)
    return np.full(_axis_list(ins[0]), arr[0], dtype=arr.dtype)


def _expand(ins: list[Value], attrs: dict[str, Any]) -> Value:
    shape = _axis_list(ins[1])
    out = np.broadcast_shapes(ins[0].shape, tuple(shape))
    return np.broadcast_to(ins[0], out).copy()


def _trilu(ins: list[Value], attrs: dict[str, Any]) -> Value:
    k = int(ins[1].reshape(()).item()) if len(ins) > 1 and ins[1] is not None else 0
    return np.triu(ins[0], k) if attrs.get("upper", 1) else np.tril(ins[0], k)


def _reduce(fn: Callable[..., Value]) -> Callable[..., Value]:
    def run(ins: list[Value], attrs: dict[str, Any], opset: int) -> Value:
        axes = attrs.get("axes")
        if len(ins) > 1 and ins[1] is not None:
            axes = ins[1]
        keep = bool(attrs.get("keepdims", 1))
        if axes is None or len(_axis_list(axes)) == 0:
            if attrs.get("noop_with_empty_axes", 0) and axes is not None:
                return ins[0]
            return fn(ins[0], axis=None, keepdims=keep)
        return fn(ins[0], axis=tuple(_axis_list(axes)), keepdims=keep)

    return run


_SIMPLE: dict[str, Callable[[list[Value], dict[str, Any]], Value]] = {
    "Identity": lambda ins, a: ins[0],
    "Add": _binary(lambda a, b: (a + b).astype(a.dtype)),
    "Sub": _binary(lambda a, b: (a - b).astype(a.dtype)),
    "Mul": _binary(lambda a, b: (a * b).astype(a.dtype)),
    "Div": _binary(_div),
    "Mod": _mod,
    "Max": lambda ins, a: np.maximum.reduce(np.broadcast_arrays(*ins)).astype(ins[0].dtype),
    "Min": lambda ins, a: np.minimum.reduce(np.broadcast_arrays(*ins)).astype(ins[0].dtype),
    "Neg": lambda ins, a: -ins[0],
    "Abs": lambda ins, a: np.abs(ins[0]),
    "Sqrt": lambda ins, a: np.sqrt(ins[0]).astype(ins[0].dtype),
    "Reciprocal": lambda ins, a: (1 / ins[0]).astype(ins[0].dtype),
    "Floor": lambda ins, a: np.floor(ins[0]),
    "Ceil": lambda ins, a: np.ceil(ins[0]),
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "LessOrEqual": _binary(np.less_equal),
    "Greater": _binary(np.greater),
    "GreaterOrEqual": _binary(np.greater_equal),
    "Not": lambda ins, a: np.logical_not(ins[0]),
    "And": _binary(np.logical_and),
    "Or": _binary(np.logical_or),
    "Where": lambda ins, a: np.where(ins[0], ins[1], ins[2]).astype(ins[1].dtype),
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "Range": _range,
    "ConstantOfShape": _const_of_shape,
    "Expand": _expand,
    "Trilu": _trilu,
    "Tile": lambda ins, a: np.tile(ins[0], _axis_list(ins[1])),
    "Transpose": lambda ins, a: np.transpose(ins[0], a.get("perm")),
    "Reshape": lambda ins, a: _reshape(ins[0], ins[1], int(a.get("allowzero", 0))),
    "Flatten": lambda ins, a: ins[0].reshape(
        int(np.prod(ins[0].shape[: int(a.get("axis", 1))])), -1
    ),
}
_OPSET: dict[str, Callable[[list[Value], dict[str, Any], int], Value]] = {
    "Squeeze": _squeeze,
    "Unsqueeze": _unsq,
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
}
_SLICE_ATTRS = ("starts", "ends", "axes", "steps")


def _eval(
    node: onnx.NodeProto, ins: list[Value | None], attrs: dict[str, Any], opset: int
) -> Value | None:
    op = node.op_type
    if op == "Slice":
        if opset < 10:
            args = [attrs.get(k) for k in _SLICE_ATTRS[:3]]
            return _slice(ins[0], *(np.asarray(a) if a is not None else None for a in args), None)
        ins = ins + [None] * (5 - len(ins))
        return _slice(ins[0], ins[1], ins[2], ins[3], ins[4])
    if any(v is None for v in ins[:1]):
        return None
    if op in _SIMPLE:
        return _SIMPLE[op](ins, attrs)  # type: ignore[arg-type]
    if op in _OPSET:
        return _OPSET[op](ins, attrs, opset)  # type: ignore[arg-type]
    return None


EVALUATED = frozenset({*_SIMPLE, *_OPSET, "Slice", "Shape", "Size", "Constant"})


# Externally stored integer tensors of at most this many elements (shape vectors, axes,
# never weights) are read from the model's own folder when the file is there.
EXTERNAL_INT_NUMEL = 64
_INT_TYPES = frozenset({TensorProto.INT64, TensorProto.INT32})


def _external_int_value(t: TensorProto, folder: Path | None) -> Value | None:
    """A small integer tensor kept in external data, read at its offset from a file in
    the model's folder (never the working directory); None if absent or malformed."""
    numel = math.prod(t.dims)  # (exact: an int product, no overflow)
    if folder is None or t.data_type not in _INT_TYPES or numel > EXTERNAL_INT_NUMEL:
        return None
    info = {e.key: e.value for e in t.external_data}
    dtype = np.dtype(np.int64 if t.data_type == TensorProto.INT64 else np.int32)
    try:
        path = (folder / info["location"]).resolve()
        if not path.is_relative_to(folder.resolve()) or not path.is_file():
            return None
        offset = int(info.get("offset", 0))
        length = int(info.get("length", numel * dtype.itemsize))
        if length != numel * dtype.itemsize:
            return None
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(length)
    except (KeyError, ValueError, OSError):
        return None
    if len(raw) != length:
        return None
    return np.frombuffer(raw, dtype="<" + dtype.str[1:]).reshape(tuple(t.dims)).copy()


def _inline_value(t: TensorProto) -> Value | None:
    numel = math.prod(t.dims)  # (exact: an int product, no overflow)
    if numel > VALUE_NUMEL or t.data_location == TensorProto.EXTERNAL:
        return None
    try:
        return onnxlite.to_array(t)
    except Exception:  # exotic dtypes: no value
        return None


def _constant_value(node: onnx.NodeProto) -> Value | None:
    for a in node.attribute:
        if a.name == "value":
            return _inline_value(a.t)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
    return None


def _static(shape: tuple | None) -> bool:
    return shape is not None and all(type(d) is int for d in shape)


def _known_dims(shape: tuple | None) -> int:
    return -1 if shape is None else sum(type(d) is int for d in shape)


def _node_value(
    node: onnx.NodeProto,
    values: Mapping[str, Value],
    shapes: Mapping[str, tuple | None],
    opset: int,
) -> Value | None:
    """The node's (single) output value, when it is small and computable."""
    op = node.op_type
    try:
        if op == "Constant":
            return _constant_value(node)
        if op in ("Shape", "Size"):
            shape = shapes.get(node.input[0]) if node.input else None
            if not _static(shape):
                return None
            if op == "Size":
                return np.array(int(np.prod(shape)), dtype=np.int64)
            return _shape_op(shape, _attrs(node))  # type: ignore[arg-type]
        if op not in EVALUATED or len(node.output) != 1:
            return None
        ins = [values.get(t) if t else None for t in node.input]
        if op == "Slice":
            required = ins[:3]
        else:
            required = [v for t, v in zip(node.input, ins, strict=True) if t]
        if not all(v is not None for v in required):
            return None
        out = _eval(node, ins, _attrs(node), opset)
    except Exception:  # a value we cannot compute stays unknown
        return None
    if out is None or np.size(out) > VALUE_NUMEL:
        return None
    return np.asarray(out)


def _symbolic_inputs(model: onnx.ModelProto, reader: TypeReader | None = None) -> bool:
    """A graph input (not an initializer) of tensor type whose shape is not static; each
    distinct input type is read once (``reader``: an LLM export has ~10^4 weight inputs
    of a few types)."""
    reader = reader or TypeReader()
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        got = reader.read(vi.type)
        if got is None or not _static(got[1]):
            return True
    return False


def _external_ints(model: onnx.ModelProto, folder: Path | None) -> dict[int, Value]:
    """Small integer initializers kept in external data, by position, read from the
    model's folder (``_external_int_value``)."""
    out: dict[int, Value] = {}
    if folder is None:
        return out
    for k, init in enumerate(model.graph.initializer):
        if init.data_location == TensorProto.EXTERNAL and init.data_type in _INT_TYPES:
            v = _external_int_value(init, folder)
            if v is not None:
                out[k] = v
    return out


def _serialized_with_values(model: onnx.ModelProto, inline: Mapping[int, Value]) -> bytes:
    """The model's bytes with the ``inline`` initializers' values written into them
    (``model`` is left as it was), so ONNX's whole-graph inference reads shape vectors
    kept in external data itself instead of leaving every tensor after the first
    Reshape to the per-node pass."""
    if not inline:
        return model.SerializeToString()
    inits = model.graph.initializer
    saved: dict[int, TensorProto] = {}
    try:
        for k, v in inline.items():
            saved[k] = TensorProto()
            saved[k].CopyFrom(inits[k])
            inits[k].CopyFrom(onnxlite.from_array(np.asarray(v), inits[k].name))
        return model.SerializeToString()
    finally:
        for k, tp in saved.items():
            inits[k].CopyFrom(tp)


class PendingShapes:
    """``resolve_shapes`` begun: with ``jobs`` > 1 and a large graph, a forked child
    (``procs.Forked``: ONNX's C++ inference holds the GIL, so a thread would not overlap
    it) runs ONNX's whole-graph inference on the model's bytes and reads its result
    (``_resolved``) while the caller reads the graph's nodes; only the types come back,
    pickled. Otherwise ``result`` does it all in process."""

    def __init__(
        self,
        model: onnx.ModelProto,
        opset: int,
        folder: Path | None = None,
        reader: TypeReader | None = None,
        jobs: int = 1,
        fields: NodeFields | None = None,
    ) -> None:
        from ruleengine.procs import Forked, forkable

        reader = reader or TypeReader()
        self._work: tuple | None = None
        self._child: Forked | None = None
        if len(model.graph.node) >= FORK_FROM_NODES and forkable(jobs):
            # the child serializes the model it sees copy-on-write: none of it here
            self._child = Forked(_pickled_model_types, model, opset, folder, reader, fields)
        else:
            self._work = _work(model, opset, folder, reader, fields)

    def result(self, stats: dict[str, Any] | None = None) -> dict[str, tuple[int, tuple | None]]:
        """What ``resolve_shapes`` returns (raises what the inference raised)."""
        if self._child is not None:
            got, self._child = self._child.result(), None
            out, counts = pickle.loads(got)
            if stats is not None:
                stats.update(counts)
            return out
        assert self._work is not None
        work, self._work = self._work, None
        if isinstance(work[0], bytes):
            return _types(*work, stats)
        return _segmented(*work, stats)


def _work(
    model: onnx.ModelProto,
    opset: int,
    folder: Path | None,
    reader: TypeReader,
    fields: NodeFields | None = None,
) -> tuple:
    """``_types``'s arguments for ``model``: its bytes, with small external integers
    written in, and whether to propagate data; or, for a long graph that can be inferred
    in segments (``segments.segmentable``), ``_segmented``'s arguments."""
    inline = _external_ints(model, folder)
    if fields is not None and segments.segmentable(model, fields):
        # (a symbolic graph input is found in the segments' own pass over the inputs)
        return (model, fields, inline, opset, folder, reader)
    # Data propagation (symbolic dims carried through Shape -> Gather -> Concat) only
    # when a graph input has a symbolic dim: the value pass of ``_resolved`` covers
    # static inputs, and data propagation peaks at several times the graph's memory
    # on LLM-size models (docs/shapes.md).
    data_prop = _symbolic_inputs(model, reader)
    data = _serialized_with_values(model, inline)
    return (data, data_prop, list(model.opset_import), opset, folder, reader)


def _segmented(
    model: onnx.ModelProto,
    fields: NodeFields,
    inline: Mapping[int, Value],
    opset: int,
    folder: Path | None,
    reader: TypeReader,
    stats: dict[str, Any] | None,
) -> dict[str, tuple[int, tuple | None]]:
    """``_types`` of a long graph: ONNX's inference run in segments
    (``segments.segmented_types``: the same types as one whole call), else (segmenting
    could differ) the one whole call."""
    imports = list(model.opset_import)
    entries = segments.segmented_types(model, fields, inline, reader)
    if entries is None:
        data = _serialized_with_values(model, inline)
        data_prop = _symbolic_inputs(model, reader)
        return _types(data, data_prop, imports, opset, folder, reader, stats)
    return _completed(entries, None, model.graph, imports, opset, stats, folder)


def _types(
    data: bytes,
    data_prop: bool,
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
    folder: Path | None,
    reader: TypeReader,
    stats: dict[str, Any] | None,
) -> dict[str, tuple[int, tuple | None]]:
    """ONNX's inference of the model's bytes ``data``, read by ``_resolved``."""
    inferred = onnxlite.parse_model(onnxlite.infer_shapes_bytes(data, data_prop))
    del data
    return _resolved(inferred, imports, opset, stats, folder, reader)


def _pickled_model_types(
    model: onnx.ModelProto,
    opset: int,
    folder: Path | None,
    reader: TypeReader,
    fields: NodeFields | None = None,
) -> bytes:
    """The forked child's work: ``_types`` (or ``_segmented``) of ``model`` and its
    counts, pickled."""
    stats: dict[str, Any] = {}
    work = _work(model, opset, folder, reader, fields)
    out = _types(*work, stats) if isinstance(work[0], bytes) else _segmented(*work, stats)
    return pickle.dumps((out, stats), protocol=pickle.HIGHEST_PROTOCOL)


def resolve_shapes(
    model: onnx.ModelProto,
    opset: int,
    stats: dict[str, Any] | None = None,
    folder: Path | None = None,
    reader: TypeReader | None = None,
) -> dict[str, tuple[int, tuple | None]]:
    """Every tensor's type: ONNX's whole-graph inference, then, only where a shape is
    still not static, one topological pass that computes small values (shape vectors)
    and re-infers each such node with ONNX's per-node inference given those values.
    ``model`` has no value_info and is not modified. Returns name -> (ONNX element type,
    shape as ``type_shape`` gives it)."""
    return PendingShapes(model, opset, folder, reader).result(stats)


def _resolved(
    inferred: onnx.ModelProto,
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
    stats: dict[str, Any] | None,
    folder: Path | None,
    reader: TypeReader,
) -> dict[str, tuple[int, tuple | None]]:
    """``resolve_shapes`` after ONNX's whole-graph inference gave ``inferred``."""
    g = inferred.graph
    # (each wrapper made and dropped in turn, not a tuple of 10^5 of them held: 7% less
    # CPU for this loop at 512 and 2048 layers)
    out: dict[str, tuple[int, tuple | None]] = {}
    for vi in chain(g.input, g.value_info, g.output):
        got = reader.read(vi.type)
        if got is not None:
            out[vi.name] = got
    return _completed(out, (g, reader), g, imports, opset, stats, folder)


def _completed(
    out: dict[str, tuple[int, tuple | None]],
    inferred: tuple[onnx.GraphProto, TypeReader] | None,
    g: onnx.GraphProto,
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
    stats: dict[str, Any] | None,
    folder: Path | None,
) -> dict[str, tuple[int, tuple | None]]:
    """``_resolved`` once ``out`` holds the inferred types of the graph's inputs, inferred
    tensors and outputs: the initializers' types, then the per-node pass where a shape
    is not static. ``inferred``: the inferred graph whose TypeProtos the per-node pass
    starts from, or None to build them from ``out`` (segmented inference); ``g``: the
    graph whose nodes and initializers are read."""
    for init in g.initializer:
        out[init.name] = (init.data_type, tuple(init.dims))
    reinferred = improved = 0
    # (distinct shapes: a stack of layers has a few hundred for 10^5 tensors)
    if not all(_static(s) for s in set(map(itemgetter(1), out.values()))):
        types = _start_types(out, inferred)
        init_types: dict[str, tuple[int, tuple[int, ...]]] = {}
        for init in g.initializer:
            init_types[init.name] = (init.data_type, tuple(init.dims))
            types.pop(init.name, None)
        shapes = {name: s for name, (_, s) in out.items()}
        values = _initializer_values(g, folder)
        reinferred, improved = _per_node(g, (types, init_types, shapes, values), imports, opset)
        for name, s in shapes.items():  # improved ones (and new ones, in pass order)
            old = out.get(name)
            if old is None or s is not old[1]:
                out[name] = (types[name].tensor_type.elem_type, s)
    if stats is not None:
        stats["reinferred"] = reinferred
        stats["improved"] = improved
    return out


def _start_types(
    out: Mapping[str, tuple[int, tuple | None]],
    inferred: tuple[onnx.GraphProto, TypeReader] | None,
) -> dict[str, onnx.TypeProto]:
    """name -> TypeProto for the per-node pass (``_completed``): the inferred graph's,
    or built from ``out``; initializers' are built only when read."""
    types: dict[str, onnx.TypeProto] = {}
    if inferred is not None:
        ig, reader = inferred
        for vi in chain(ig.input, ig.value_info, ig.output):
            if reader.read(vi.type) is not None:
                types[vi.name] = vi.type
    else:
        built: dict[tuple, onnx.TypeProto] = {}
        for name, got in out.items():
            tp = built.get(got)
            if tp is None:
                tp = built[got] = segments.type_proto(*got)
            types[name] = tp
    return types


def _initializer_values(g: onnx.GraphProto, folder: Path | None) -> dict[str, Value]:
    """The values of the initializers the per-node pass may read (small inline ones,
    small integer ones kept in external data)."""
    values: dict[str, Value] = {}
    for init in g.initializer:
        v = _inline_value(init)
        if v is None and init.data_location == TensorProto.EXTERNAL:
            v = _external_int_value(init, folder)
        if v is not None:
            values[init.name] = v
    return values


def _per_node(
    g: onnx.GraphProto,
    tables: tuple[
        dict[str, onnx.TypeProto],
        dict[str, tuple[int, tuple[int, ...]]],
        dict[str, tuple | None],
        dict[str, Value],
    ],
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
) -> tuple[int, int]:
    """Each node of the default domain with a non-static output inferred again (the
    types, shapes and values of ``tables`` updated in place: types, initializers'
    types, shapes, values); how many nodes were, and how many shapes improved."""
    types, init_types, shapes, values = tables
    reinferred = improved = 0
    protos: dict[str, TensorProto] = {}
    # a repeated layer's node asks what its twin in the layer before asked (``_asked``)
    asked: dict[tuple, tuple | None] = {}
    static: dict[tuple | None, bool] = {}  # (a stack has a few hundred distinct shapes)
    computed: dict[tuple, Value | None] = {}
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if not _all_static(node.output, shapes, static):
            reinferred += 1
            for t in node.input:
                if t in init_types and t not in types:
                    elem, dims = init_types[t]
                    types[t] = onnxlite.tensor_type_proto(elem, list(dims))
            improved += _reinfer(node, types, shapes, values, protos, imports, opset, asked)
        if len(node.output) == 1:
            v = _value_once(node, values, shapes, opset, computed)
            if v is not None:
                values[node.output[0]] = v
    return reinferred, improved


def _value_once(
    node: onnx.NodeProto,
    values: Mapping[str, Value],
    shapes: Mapping[str, tuple | None],
    opset: int,
    computed: dict[tuple, Value | None],
) -> Value | None:
    """``_node_value``, computed once per distinct evaluated node (``computed``: by op,
    attributes, and per input its value, or its shape for Shape/Size). The values are
    never written to (every evaluation makes a new array or reads one), so one array
    may stand for the output of many nodes."""
    op = node.op_type
    if op not in EVALUATED or op == "Constant":
        return _node_value(node, values, shapes, opset)
    by_shape = op in ("Shape", "Size")
    ins = []
    for t in node.input:
        v = values.get(t) if t else None
        if v is not None:
            ins.append(_value_key(v))
        else:
            ins.append((bool(t), shapes.get(t) if by_shape and t else None))
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    key = (op, node.domain, attrs, tuple(ins))
    if key in computed:
        return computed[key]
    got = computed[key] = _node_value(node, values, shapes, opset)
    return got


def _all_static(
    names: Sequence[str], shapes: Mapping[str, tuple | None], static: dict[tuple | None, bool]
) -> bool:
    """Whether every named tensor's shape is static (``static``: per distinct shape)."""
    for t in names:
        if t:
            s = shapes.get(t)
            ok = static.get(s)
            if ok is None:
                ok = static[s] = _static(s)
            if not ok:
                return False
    return True


_SUBGRAPH_ATTRS = (onnxlite.AttributeProto.GRAPH, onnxlite.AttributeProto.GRAPHS)


def _asked(
    node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], values: Mapping[str, Value]
) -> tuple | None:
    """What ONNX's per-node inference of ``node`` reads, without its names: its op, its
    attributes, and per input its presence, type and known value (None: a node with a
    subgraph, inferred every time). Two nodes with one key infer the same output types
    at the same output positions."""
    attrs = []
    for a in node.attribute:
        if a.type in _SUBGRAPH_ATTRS:
            return None
        attrs.append(a.SerializeToString())
    ins: list[tuple | None] = []
    for t in node.input:
        if not t:
            ins.append(None)
            continue
        tp = types.get(t)
        v = values.get(t)
        ins.append(
            (
                None if tp is None else tp.SerializeToString(),
                None if v is None else _value_key(v),
            )
        )
    outs = tuple(bool(t) for t in node.output)
    return (node.op_type, node.domain, tuple(attrs), tuple(ins), outs)


def _reinfer(
    node: onnx.NodeProto,
    types: dict[str, onnx.TypeProto],
    shapes: dict[str, tuple | None],
    values: Mapping[str, Value],
    protos: dict[str, TensorProto],
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
    asked: dict[tuple, tuple | None] | None = None,
) -> int:
    """ONNX's inference of one node, given its inputs' current types and known values;
    keeps an output's new type when it knows more dims. Returns how many improved.
    ``asked``: the inferred types by ``_asked`` key (one inference per distinct node)."""
    key = _asked(node, types, values) if asked is not None else None
    if key is None or asked is None:
        got = _inferred(node, types, values, protos, imports, opset)
    elif key in asked:
        got = asked[key]
    else:
        got = asked[key] = _inferred(node, types, values, protos, imports, opset)
    if got is None:
        return 0
    n = 0
    for i, tp, new in got:
        name = node.output[i]
        if _known_dims(new) > _known_dims(shapes.get(name)):
            types[name] = tp
            shapes[name] = new
            n += 1
    return n


def _inferred(
    node: onnx.NodeProto,
    types: Mapping[str, onnx.TypeProto],
    values: Mapping[str, Value],
    protos: dict[str, TensorProto],
    imports: list[onnx.OperatorSetIdProto],
    opset: int,
) -> tuple[tuple[int, onnx.TypeProto, tuple | None], ...] | None:
    """ONNX's output types of ``node`` by output position, with their shapes (None: no
    schema, or its inference refused the inputs)."""
    try:
        schema = onnxlite.get_schema(node.op_type, opset, node.domain)
    except Exception:  # unknown op (or a model-local function)
        return None
    in_types = {t: types[t] for t in node.input if t and t in types}
    data: dict[str, TensorProto] = {}
    for t in node.input:
        if t and t in values:
            tp = protos.get(t)
            if tp is None:
                tp = protos[t] = onnxlite.from_array(np.array(values[t], order="C"), t)
            data[t] = tp
    try:
        out = onnxlite.infer_node_outputs(schema, node, in_types, data, imports)
    except Exception:  # inconsistent inputs: keep what we have
        return None
    position = {t: i for i, t in enumerate(node.output) if t}
    return tuple((position[t], tp, type_shape(tp)) for t, tp in out.items() if t in position)


def _value_key(v: Value) -> tuple:
    """A value as a dict key (an object array by its items: its bytes are addresses)."""
    a = np.asarray(v)
    if a.dtype == object:
        return (a.dtype.str, a.shape, repr(a.tolist()))
    return (a.dtype.str, a.shape, a.tobytes())
