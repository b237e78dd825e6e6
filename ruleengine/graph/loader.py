"""ONNX -> the immutable ``Graph`` view. The only module that reads ONNX files.

Weights are never loaded: ``load_external_data=False`` and initializer shapes/dtypes come
from the TensorProto header fields, so a model whose external weight file is missing is
still analysable. Shape inference runs on the model (without data); symbolic dimensions
can be bound first (``dims``), the rest are reported in ``Graph.unbound_dims``.
"""

from __future__ import annotations

import functools
import heapq
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import GraphLoadError
from ruleengine.graph import onnxlite, segments
from ruleengine.graph.forked import cores
from ruleengine.graph.model import Graph, Node, Tensor, record_maker
from ruleengine.graph.onnxlite import AttributeProto, GraphProto, ModelProto, TensorProto
from ruleengine.graph.propagate import PendingShapes, TypeReader
from ruleengine.graph.segments import NodeFields
from ruleengine.runtime import paused_gc, release_memory

if TYPE_CHECKING:
    import onnx

# Constant tensors with at most this many elements keep their values (for param checks).
SMALL_CONST_NUMEL = 64

# Domains whose ops we understand; any other domain makes a node opaque.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
CONTROL_FLOW = ("If", "Loop", "Scan")

# Stable diagnostic codes of graph loading (AF5xx).
CODES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "unreadable": ("AF501", "unreadable-model"),
        "cycle": ("AF502", "cyclic-graph"),
        "two-producers": ("AF503", "tensor-with-two-producers"),
        "dangling": ("AF504", "dangling-input"),
        "duplicate-node": ("AF505", "duplicate-node-name"),
        "shape-inference": ("AF506", "shape-inference-failed"),
        "bad-dim": ("AF507", "unknown-dim-name"),
        "no-graph": ("AF508", "empty-model"),
        "shape-input": ("AF510", "unknown-input-name"),
        "shape-rank": ("AF511", "input-shape-rank"),
        "shape-size": ("AF512", "input-shape-not-positive"),
        "shape-overflow": ("AF513", "input-shape-overflow"),
        "shape-conflict": ("AF514", "input-shape-conflict"),
    }
)


_TEXT_SUFFIXES = (".json", ".txtpb", ".textproto", ".onnxtxt")


def _diag(
    key: str, message: str, where: str, hint: str | None, severity: Severity = Severity.ERROR
) -> Diagnostic:
    code, name = CODES[key]
    return Diagnostic(code, name, severity, message, Location(where), hint)


def _fail(key: str, message: str, where: str, hint: str | None = None) -> GraphLoadError:
    return GraphLoadError(message, (_diag(key, message, where, hint),))


@functools.cache
def _dtype_name(elem_type: int) -> str | None:
    if not elem_type:
        return None
    try:
        return onnxlite.np_dtype(elem_type).name
    except Exception:  # noqa: BLE001 - exotic types (float8, int4) have no numpy dtype
        name = TensorProto.DataType.Name(elem_type).lower()
        return {"float8e4m3fn": "float8e4m3fn"}.get(name, name)


def _shape_of(tp: onnx.TypeProto) -> tuple[int | str | None, ...] | None:
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


def read_model(path: Path) -> onnx.ModelProto:
    """The model's protobuf without its external weights (refused with a code when the
    path is not a readable regular file). ONNX models are binary protobuf whatever their
    name: ``onnx.load`` alone would take a ``*.json`` name for its JSON format."""
    from ruleengine.paths import check_input_file

    where = str(path)
    check_input_file(path, "model", GraphLoadError)
    try:
        try:
            model = onnxlite.parse_model(path.read_bytes())
        except Exception:  # noqa: BLE001 - not binary: a text format named by its suffix?
            if path.suffix.lower() not in _TEXT_SUFFIXES:
                raise
            model = onnxlite.full().load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises many kinds
        raise _fail(
            "unreadable",
            f"{where} is not a readable ONNX model ({type(exc).__name__}: {exc})",
            where,
            "pass an .onnx file written by an ONNX exporter",
        ) from None
    if not model.HasField("graph") or (
        not model.graph.node and not model.graph.input and not model.graph.output
    ):
        raise _fail(
            "unreadable" if not model.ByteSize() else "no-graph",
            f"{where} holds no ONNX graph",
            where,
            "pass an .onnx file written by an ONNX exporter",
        )
    return model


def _bind_dims(model: onnx.ModelProto, dims: Mapping[str, int]) -> None:
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


def _bind_input_shapes(
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
            raise _fail(
                "shape-input",
                f"input shape {spec}: the model has no graph input {name!r}",
                where,
                f"graph inputs: {', '.join(inputs) or 'none'}",
            )
        declared = _shape_of(vi.type)
        for axis, d in enumerate(dims):
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise _fail(
                    "shape-size",
                    f"input shape {spec}: size {d!r} of axis {axis} is not a positive integer",
                    where,
                    "every size is a positive integer, e.g. input_ids:1,128",
                )
            if d > MAX_DIM:
                raise _fail(
                    "shape-overflow",
                    f"input shape {spec}: size {d} of axis {axis} does not fit an ONNX dim (int64)",
                    where,
                    f"sizes are at most {MAX_DIM}",
                )
        if declared is not None and len(declared) != len(dims):
            raise _fail(
                "shape-rank",
                f"input shape {spec} has {len(dims)} dim(s); input {name!r} has rank "
                f"{len(declared)} ({_show_shape(declared)})",
                where,
                f"give {len(declared)} sizes for {name}",
            )
        for axis, (old, d) in enumerate(zip(declared or (), dims, strict=False)):
            if isinstance(old, int) and old != d:
                raise _fail(
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
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


_serialized = AttributeProto.SerializeToString


def _node_fields(g: onnx.GraphProto, segmented: bool = False) -> NodeFields:
    """Every node's fields the loader reads, in one pass (protobuf field access is slow;
    a slice of a repeated field is a list made in C: 1.5x faster than iterating it).
    No message wrapper outlives its node's turn: attributes are kept serialized (one
    conversion per distinct attribute, ``_AttrInfo``), and each wrapper protobuf makes
    for a node or an attribute is dropped at once rather than held to the end (10^5
    held wrappers: 10% more CPU for this pass at 2048 layers, docs/speed.md).
    ``segmented``: only what the segments are cut from (read before the shape child is
    forked, so the less the sooner it starts); ``_node_names`` reads the rest after."""
    if segmented:
        cut = [(tuple(n.input[:]), tuple(n.output[:]), n.op_type, n.domain) for n in g.node]
        if not cut:
            return NodeFields(g.node, (), (), (), ())
        ins, outs, ops, doms = zip(*cut, strict=True)
        del cut
        return NodeFields(g.node, ins, outs, ops, doms)
    rows = [
        (
            tuple(n.input[:]),
            tuple(n.output[:]),
            n.op_type,
            n.domain,
            n.name,
            tuple(map(_serialized, n.attribute)),
        )
        for n in g.node
    ]
    if not rows:
        return NodeFields(g.node, (), (), (), (), (), ())
    ins, outs, ops, doms, names, attrs = zip(*rows, strict=True)
    del rows
    return NodeFields(g.node, ins, outs, ops, doms, names, attrs)


def _node_names(g: onnx.GraphProto) -> tuple[Sequence[str], Sequence[tuple[bytes, ...]]]:
    """The names and serialized attributes of the nodes (``_node_fields``)."""
    rows = [(n.name, tuple(map(_serialized, n.attribute))) for n in g.node]
    if not rows:
        return (), ()
    names, attrs = zip(*rows, strict=True)
    return names, attrs


class _AttrInfo:
    """Name, type and value (``_attr_value``) of serialized AttributeProtos, each
    distinct one parsed and converted once (a stack of layers repeats a few hundred
    attributes 10^5 times)."""

    def __init__(self) -> None:
        self._seen: dict[bytes, tuple[str, int, Any]] = {}

    def __call__(self, key: bytes) -> tuple[str, int, Any]:
        got = self._seen.get(key)
        if got is None:
            a = AttributeProto.FromString(key)
            got = self._seen[key] = (a.name, a.type, _attr_value(a))
        return got

    @staticmethod
    def bodies(key: bytes) -> list[onnx.GraphProto]:
        """The subgraphs of a GRAPH or GRAPHS attribute."""
        a = AttributeProto.FromString(key)
        return [*([a.g] if a.type == AttributeProto.GRAPH else []), *a.graphs]


def _start_infer(
    model: onnx.ModelProto,
    opset: int,
    folder: Path | None,
    reader: TypeReader,
    jobs: int,
    fields: NodeFields | None,
) -> PendingShapes | Exception:
    """``propagate.resolve_shapes`` begun (with ``jobs`` > 1, ONNX's inference runs in a
    forked child while the nodes are read), or why it could not begin (``_infer``
    reports it)."""
    try:
        return PendingShapes(model, opset, folder, reader, jobs, fields)
    except Exception as exc:  # noqa: BLE001 - reported by _infer
        return exc


def _infer(
    pending: PendingShapes | Exception, where: str
) -> tuple[dict[str, tuple[int, tuple | None]], tuple[Diagnostic, ...]]:
    """Shapes of every tensor (``propagate.resolve_shapes``, begun by ``_start_infer``);
    the model's declared value_info has been taken out (exporters often leave ``unk__``
    symbols there) and is merged back in ``graph_from_model``. On failure, keep what is
    declared."""
    try:
        if isinstance(pending, Exception):
            raise pending
        return pending.result(), ()
    except Exception as exc:  # noqa: BLE001 - keep what the model declares
        last = exc
    msg = (
        f"ONNX shape inference failed ({type(last).__name__}: {last}); "
        "using the shapes the model declares"
    )
    hint = "export the model with shapes, or bind symbolic dims with --dim"
    return {}, (_diag("shape-inference", msg, where, hint, Severity.WARNING),)


def _better(a: tuple | None, b: tuple | None) -> tuple | None:
    """The more informative of two shapes (more static dims wins; ``a`` on ties)."""
    if a is None:
        return b
    if b is None or a == b:  # equal: a tie (declared inputs are mostly inferred alike)
        return a

    def static(s: tuple) -> int:
        return sum(isinstance(d, int) for d in s)

    return b if static(b) > static(a) else a


def _py(value: Any) -> Any:
    """Attribute/const values as plain, hashable Python values (lists become tuples)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1).tolist()
        if value.dtype.kind in "biufc":  # tolist() gave plain Python numbers already
            return tuple(flat)
        return tuple(_py(v) for v in flat)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_py(v) for v in value)
    if isinstance(value, TensorProto):
        arr = _small_array(value)
        if arr is not None:
            return tuple(arr.reshape(-1).tolist())
        return f"<tensor {_dtype_name(value.data_type)} {tuple(value.dims)}>"
    if isinstance(value, GraphProto):
        return f"<graph {value.name}>"
    return value


def _small_array(t: TensorProto) -> np.ndarray | None:
    numel = math.prod(t.dims)
    if numel > SMALL_CONST_NUMEL or t.data_location == TensorProto.EXTERNAL:
        return None
    try:
        return onnxlite.to_array(t)
    except Exception:  # noqa: BLE001 - exotic dtypes: no value, still a tensor
        return None


def _attr_value(a: AttributeProto) -> Any:
    try:
        return _py(onnxlite.attribute_value(a))
    except Exception:  # noqa: BLE001
        return None


def _schema_defaults(op_type: str, domain: str, opset: int) -> dict[str, Any]:
    return dict(_schema_defaults_cached(op_type, domain, opset))


@functools.cache
def _schema_defaults_cached(op_type: str, domain: str, opset: int) -> dict[str, Any]:
    try:
        schema = onnxlite.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - unknown op: no defaults
        return {}
    out: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        dv = onnxlite.attribute_default(attr)
        if dv.type != AttributeProto.UNDEFINED:
            out[name] = _attr_value(dv)
    return out


TypeEntry = tuple[str | None, tuple | None]  # (dtype name, shape)


class _MergedTypes(Mapping[str, TypeEntry]):
    """Every tensor's (dtype name, shape) as the loader merges them, read where asked
    instead of merged first into one dict of 2 x 10^5 entries (at 2048 layers that
    merge cost 5-6x what it costs at 512: docs/speed.md): an initializer's own (the
    truth), else the inferred type (ONNX's element type named) with the declared one
    (value_info, outputs, inputs, a small Constant's value) where that knows more
    (``_better``), else the declared one."""

    def __init__(
        self,
        declared: Mapping[str, TypeEntry],
        inferred: Mapping[str, tuple[int, tuple | None]],
        inits: Mapping[str, TypeEntry],
    ) -> None:
        self._declared, self._inferred, self._inits = declared, inferred, inits

    def merged(self, name: str, default: Any = None) -> Any:
        """``get`` of a name that is no initializer's."""
        inferred = self._inferred.get(name)
        old = self._declared.get(name)
        if inferred is None:
            return default if old is None else old
        elem, shape = inferred
        if old is None:
            return (_dtype_name(elem), shape)
        return (_dtype_name(elem) or old[0], _better(shape, old[1]))

    def get(self, name: str, default: Any = None) -> Any:  # noqa: D102 - Mapping's
        got = self._inits.get(name)
        return got if got is not None else self.merged(name, default)

    def __getitem__(self, name: str) -> TypeEntry:
        got = self.get(name)
        if got is None:
            raise KeyError(name)
        return got

    def __contains__(self, name: object) -> bool:
        return name in self._inits or name in self._inferred or name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(chain(self._declared, self._inferred, self._inits)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _ShapeView(Mapping[str, "tuple | None"]):
    """The shapes of ``types`` (name -> (dtype, shape)), read where they are asked for:
    two helpers below read a few (Conv weights, Shape's input) of 10^5 tensors."""

    def __init__(self, types: Mapping[str, tuple[str | None, tuple | None]]) -> None:
        self._types = types

    def __getitem__(self, name: str) -> tuple | None:
        return self._types[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)


_CONV_LIKE = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "QLinearConv")


def _spatial_defaults(
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


def _outer_refs(g: onnx.GraphProto) -> set[str]:
    """Names a control-flow body reads from the enclosing scope (hidden consumers)."""
    local = {i.name for i in g.input} | {i.name for i in g.initializer}
    refs: set[str] = set()
    for n in g.node:
        for t in n.input:
            if t and t not in local:
                refs.add(t)
        for a in n.attribute:
            for sub in (*([a.g] if a.type == AttributeProto.GRAPH else []), *a.graphs):
                refs |= _outer_refs(sub) - local
        local.update(n.output)
    return refs


def _toposort(names: list[str], edges: dict[int, set[int]], indeg: list[int]) -> list[int]:
    """Kahn's algorithm; ties keep the file order, so the order is stable."""
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j in sorted(edges.get(i, ())):
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    return order


def _edges(
    ins_l: Sequence[tuple[str, ...]],
    hidden: Mapping[int, Sequence[str]],
    get_id: Callable[[str], int | None],
    prod_node: Sequence[int],
) -> tuple[dict[int, set[int]], list[int]]:
    """Successors of each node and each node's in-degree (one per producer it reads),
    for a graph whose file order is not a topological one."""
    edges: dict[int, set[int]] = {}
    indeg = [0] * len(ins_l)
    for i, ins in enumerate(ins_l):
        for t in (*(t for t in ins if t), *hidden.get(i, ())):
            k = get_id(t)
            if k is None or prod_node[k] < 0:
                continue
            succ = edges.setdefault(prod_node[k], set())
            if i not in succ:
                succ.add(i)
                indeg[i] += 1
    return edges, indeg


def _unique_names(
    src_names: Sequence[str], op_types: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Unnamed nodes get ``<op_type>_<index>``; a repeated name gets ``__<k>`` appended."""
    taken = set(src_names)
    taken.discard("")
    if len(taken) == len(src_names):  # every node named, no name twice: all kept
        return list(src_names), []
    seen: set[str] = set()
    names: list[str] = []
    renamed: list[tuple[str, str]] = []
    for i, src in enumerate(src_names):
        base = src or f"{op_types[i]}_{i}"
        name, k = base, 1
        if name in seen or (not src and name in taken):
            while name in seen or name in taken:
                k += 1
                name = f"{base}__{k}"
        if src and name != src:
            renamed.append((src, name))
        seen.add(name)
        names.append(name)
    return names, renamed


# Ops whose output is not a function of their inputs: never folded.
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
     "Bernoulli", "Dropout"}
)  # fmt: skip
# Ops that read only the shape of their input: foldable when that shape is static.
_SHAPE_READERS = frozenset({"Shape", "Size"})


def _const_foldable(
    nodes: list[Node], constants: set[str], shapes: Mapping[str, tuple | None]
) -> set[str]:
    """Tensors a compiler can compute before run time (constant folding), in one
    topological pass: constants, Shape/Size of a static tensor, and outputs of a
    deterministic, non-opaque node whose inputs are all foldable."""
    folded = set(constants)
    all_folded = folded.issuperset
    for n in nodes:  # topological order
        if n.opaque or n.domain not in ("", "ai.onnx") or n.op_type in _NONDETERMINISTIC:
            continue
        ins = n.inputs
        if "" in ins:
            ins = tuple(t for t in ins if t)
        if not ins:
            continue
        if n.op_type in _SHAPE_READERS:
            shape = shapes.get(ins[0])
            ok = shape is not None and all(isinstance(d, int) for d in shape)
        else:
            ok = all_folded(ins)
        if ok:
            folded.update(t for t in n.outputs if t)
    return folded


def _input_axes(
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


_tensor_name = operator.attrgetter("name")


def load_graph(
    path: str | Path,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    jobs: int | None = None,
) -> Graph:
    """Read an ONNX model into an immutable ``Graph`` (raises ``GraphLoadError``).

    ``dims`` binds symbolic dims by name; ``input_shapes`` sets whole graph-input shapes
    (``{"input_ids": (1, 128)}``). ``jobs`` > 1 (default: the cores) lets ONNX's shape
    inference of a large graph run in a forked child beside the reading of its nodes."""
    path = Path(path)
    where = str(path)
    dims = dict(dims or {})
    with paused_gc():  # ~10^6 long-lived objects, no cycles: full collections only cost
        model = read_model(path)
        # the model is ours alone: bound and inferred in place, no copy
        return _build(model, dims, where, input_shapes, owned=True, jobs=jobs)


def graph_from_model(
    model: onnx.ModelProto,
    dims: Mapping[str, int] | None = None,
    where: str = "<model>",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    jobs: int | None = None,
) -> Graph:
    """Build the ``Graph`` of an in-memory model (tests and the bench use this directly);
    ``model`` is not modified. ``jobs``: as in ``load_graph``."""
    return _build(model, dims, where, input_shapes, owned=False, jobs=jobs)


def _build(
    model: onnx.ModelProto,
    dims: Mapping[str, int] | None,
    where: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    owned: bool,
    jobs: int | None = None,
) -> Graph:
    """``graph_from_model``; an ``owned`` model (nobody else holds it) is bound, stripped
    of value_info and inferred in place instead of in a copy."""
    dims = dict(dims or {})
    user_dims = dict(dims)
    # symbolic dim names as the model declares them (before any binding below)
    declared = (
        {
            d.dim_param
            for vi in (*model.graph.input, *model.graph.output, *model.graph.value_info)
            for d in vi.type.tensor_type.shape.dim
            if d.HasField("dim_param")
        }
        if user_dims
        else set()
    )
    opsets = {o.domain or "": int(o.version) for o in model.opset_import}
    if owned:
        model_copy = model
    else:
        model_copy = ModelProto()
        model_copy.CopyFrom(model)
    del model  # from here on, only the (bound, stripped) copy
    implied = _bind_input_shapes(model_copy, dict(input_shapes or {}), where)
    dims = {**implied, **dims}
    _bind_dims(model_copy, dims)
    pre_warn = tuple(
        _diag(
            "bad-dim",
            f"--dim {name}={dims[name]} binds no symbolic dimension of the model",
            where,
            f"symbolic dims: {', '.join(sorted(declared)) or 'none'}",
            Severity.WARNING,
        )
        for name in sorted(user_dims)
        if name not in declared
    )
    if "ai.onnx" in opsets and "" not in opsets:
        opsets[""] = opsets["ai.onnx"]
    opset = opsets.get("", 0)
    g = model_copy.graph
    reader = TypeReader()  # each distinct TypeProto converted once
    # Declared types: value_info, then outputs/inputs, then initializers (the truth).
    types: dict[str, tuple[str | None, tuple | None]] = {}
    for vi in (*g.value_info, *g.output):
        got = reader.read(vi.type)
        if got is not None:
            types[vi.name] = (_dtype_name(got[0]), got[1])
    declared_inputs: dict[str, tuple | None] = {}
    for vi in g.input:  # each read once (an LLM export has ~10^4 weight inputs)
        got = reader.read(vi.type)
        if got is None:
            declared_inputs[vi.name] = None
        else:
            declared_inputs[vi.name] = got[1]
            types[vi.name] = (_dtype_name(got[0]), got[1])
    del g.value_info[:]  # inferred afresh; merged back below where they know more
    folder = None if where.startswith("<") else Path(where).resolve().parent
    # ONNX's inference runs beside the reading of the nodes below (in a forked child:
    # ``PendingShapes``); its types are merged (then the initializers', the truth) once
    # the nodes are read
    # A graph long enough to be inferred in segments (``segments.SEGMENT_FROM_NODES``)
    # has its nodes' inputs, outputs, op types and domains read before the inference
    # begins: the segments are cut from them. A shorter one has them read after it
    # began, beside it (read before, their pages would be shared with the forked child,
    # and the reading below, which writes them, would copy them: page faults for nothing).
    fields = _node_fields(g, True) if len(g.node) >= segments.SEGMENT_FROM_NODES else None
    pending = _start_infer(
        model_copy, opset, folder, reader, cores() if jobs is None else jobs, fields
    )
    init_names: set[str] = set()
    init_types: dict[str, tuple[str | None, tuple]] = {}
    const_values: dict[str, tuple] = {}
    for init in g.initializer:
        name = init.name
        init_names.add(name)
        init_dims = tuple(init.dims)
        init_types[name] = (_dtype_name(init.data_type), init_dims)
        if math.prod(init_dims) <= SMALL_CONST_NUMEL:  # else _small_array is None
            arr = _small_array(init)
            if arr is not None:
                const_values[name] = tuple(_py(arr))
    for sp in g.sparse_initializer:
        init_names.add(sp.values.name)
        init_types[sp.values.name] = (
            _dtype_name(sp.values.data_type),
            tuple(int(d) for d in sp.dims),
        )
    graph_inputs = tuple(i.name for i in g.input if i.name not in init_names)
    graph_outputs = tuple(o.name for o in g.output)

    _, ins_l, outs_l, ops_l, dom_l, src_names, attr_l = fields or _node_fields(g)
    if fields is not None and ops_l:  # read before the fork: the rest now
        src_names, attr_l = _node_names(g)
    del fields
    attr_info = _AttrInfo()
    names, renamed = _unique_names(src_names, ops_l)
    # Nodes sharing a name are never fused: the plan and the fused model name nodes by
    # their name in the model, and a made-up one (name__2) would point at nothing.
    shared = {old for old, _ in renamed}
    renamed_warnings: tuple[Diagnostic, ...] = ()
    for old, new in renamed:
        renamed_warnings += (
            _diag(
                "duplicate-node",
                f"node name {old!r} is used by more than one node (the later one is "
                f"{new!r} in reports); none of them is fused",
                where,
                "give every node a unique name in the exporter",
                Severity.WARNING,
            ),
        )

    # Every tensor a graph input, an initializer or a node defines gets an integer id,
    # in that order (graph inputs [0, n_in), initializers [n_in, n_def), node outputs
    # after): producers, consumers and flags are then lists indexed by id, one hash per
    # read of a name. At 2048 layers (2 x 10^5 tensors, 3 x 10^5 reads) each dict or set
    # lookup costs 2x what it costs at 512 (the tables outgrow the caches: docs/speed.md).
    tid: dict[str, int] = {}
    for t in graph_inputs:
        tid.setdefault(t, len(tid))
    n_in = len(tid)
    for t in init_types:  # (no graph input is an initializer: graph_inputs above)
        tid.setdefault(t, len(tid))
    n_def = len(tid)
    tnames = list(tid)  # id -> name
    prod_node = [-1] * n_def  # id -> index of its producer node (-1: none)
    prod_port = [-1] * n_def
    for i, outs in enumerate(outs_l):
        for port, t in enumerate(outs):
            if not t:
                continue
            k = tid.setdefault(t, len(tnames))
            if k != len(tnames):
                j = prod_node[k]
                first = (
                    f"node {names[j]!r}"
                    if j >= 0
                    else ("an initializer" if k >= n_in else "a graph input")
                )
                raise _fail(
                    "two-producers",
                    f"tensor {t!r} is produced by node {names[i]!r} and also by {first}",
                    where,
                    "every tensor must have exactly one producer (SSA form)",
                )
            tnames.append(t)
            prod_node.append(i)
            prod_port.append(port)
    # Consumers, and hidden consumers of control-flow bodies.
    users_of: list[list[tuple[str, int]] | None] = [None] * len(tnames)
    hidden: dict[int, list[str]] = {}  # node -> outer names its bodies read
    forward = True  # every edge from an earlier node to a later one: the file's order
    opaque: list[bool] = []
    graph_attrs = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    get_id = tid.get
    for i in range(len(ops_l)):
        sub_refs: set[str] = set()
        has_body = False
        for key in attr_l[i]:
            if attr_info(key)[1] in graph_attrs:
                for sub in attr_info.bodies(key):
                    has_body = True
                    sub_refs |= _outer_refs(sub)
        opaque.append(
            has_body
            or ops_l[i] in CONTROL_FLOW
            or dom_l[i] not in KNOWN_DOMAINS
            or src_names[i] in shared
        )
        name_i = names[i]
        reads = [(t, port) for port, t in enumerate(ins_l[i]) if t]
        if sub_refs:  # hidden consumers: what a body reads from the enclosing scope
            hidden[i] = sorted(sub_refs - set(ins_l[i]))
            reads += [(t, -1) for t in hidden[i]]
        for t, port in reads:
            k = get_id(t)
            if k is None:
                if port == -1:  # a body reads an outer name nothing defines: not our problem
                    continue
                raise _fail(
                    "dangling",
                    f"input {port} of node {names[i]!r} ({ops_l[i]}) reads tensor {t!r}, "
                    "which no node, initializer or graph input produces",
                    where,
                    "the model is truncated or was edited by hand; re-export it",
                )
            users = users_of[k]
            if users is None:
                users_of[k] = [(name_i, port)]
            else:
                users.append((name_i, port))
            j = prod_node[k]
            if j == i:
                raise _fail(
                    "cycle",
                    f"node {names[i]!r} reads its own output {t!r}",
                    where,
                    "ONNX graphs must be acyclic",
                )
            if j > i:
                forward = False
    if forward:  # Kahn's algorithm picking the lowest index would give the file's order
        order = list(range(len(ops_l)))
        topo = order
    else:
        order = _toposort(names, *_edges(ins_l, hidden, get_id, prod_node))
        if len(order) != len(ops_l):
            stuck = sorted(set(range(len(ops_l))) - set(order))
            listed = ", ".join(repr(names[i]) for i in stuck[:6])
            raise _fail(
                "cycle",
                f"the graph has a cycle through {len(stuck)} node(s), e.g. {listed}",
                where,
                "ONNX graphs must be acyclic; re-export the model",
            )
        topo = [0] * len(order)  # node -> its place in the order
        for k, i in enumerate(order):
            topo[i] = k

    inferred, infer_warnings = _infer(pending, where)
    del pending
    release_memory()  # the inferred copy and ONNX's C++ model are gone: return their pages
    warnings = pre_warn + infer_warnings + renamed_warnings
    typed = _MergedTypes(types, inferred, init_types)  # (merged where read)
    del inferred

    # Constant node outputs are constants too (with small values kept).
    const_nodes: set[str] = set()
    for i, op in enumerate(ops_l):
        if op == "Constant" and dom_l[i] in ("", "ai.onnx") and outs_l[i]:
            n = g.node[i]
            const_nodes.add(n.output[0])
            for a in n.attribute:
                val = _attr_value(a)
                if a.name == "value" and isinstance(val, tuple):
                    const_values[n.output[0]] = val
                    if n.output[0] not in typed:
                        types[n.output[0]] = (_dtype_name(a.t.data_type), tuple(a.t.dims))
                elif a.name in ("value_float", "value_int"):
                    const_values[n.output[0]] = (val,)
                elif a.name in ("value_floats", "value_ints") and isinstance(val, tuple):
                    if len(val) <= SMALL_CONST_NUMEL:
                        const_values[n.output[0]] = val

    shapes = _ShapeView(typed)  # (a copy of 2 x 10^5 entries for a few reads: a view)
    nodes: list[Node] = []
    make_node = record_maker(Node)
    for i in order:
        domain = dom_l[i]
        dom_opset = opsets.get(domain, opsets.get("ai.onnx" if domain == "" else domain, opset))
        attrs = _schema_defaults(ops_l[i], domain, dom_opset) if not opaque[i] else {}
        for key in attr_l[i]:
            name, _, val = attr_info(key)
            attrs[name] = val
        _spatial_defaults(ops_l[i], attrs, ins_l[i], shapes)
        nodes.append(
            make_node(  # the fields of Node, in order
                names[i],  # name
                ops_l[i],  # op_type
                domain,
                ins_l[i],  # inputs
                outs_l[i],  # outputs
                MappingProxyType(attrs),  # attributes
                topo[i],  # index
                opaque[i],
                i,  # source_index
                src_names[i],  # source_name
                False,  # compile_time
            )
        )

    graph_name = g.name or Path(where).stem
    # Nothing more is read from the protobuf: let it go before the tensors are built (a
    # model read by ``load_graph`` has no other holder), with the loop variables that
    # reference its sub-messages.
    del model_copy, g, attr_l, attr_info
    vi = init = sp = n = a = sub = None  # noqa: F841
    release_memory()

    foldable = _const_foldable(nodes, init_names | const_nodes, shapes)
    compile_time = tuple(
        n.name
        for n in nodes
        if n.outputs and all(t in foldable for t in n.outputs if t) and any(t for t in n.outputs)
    )
    if compile_time:
        ct = set(compile_time)
        nodes = [replace(n, compile_time=True) if n.name in ct else n for n in nodes]
    unbound_axes, dim_sources = _input_axes(declared_inputs, graph_inputs, dims)
    # Every tensor a node, an initializer or a graph input defines (a node reads no
    # other: that is raised above), by id: in the order the dicts above were filled, so
    # ``types`` is read one entry after the other, not at random. The records are then
    # sorted by name, the tensors' order.
    made: list[Tensor] = []
    outputs_set = set(graph_outputs)
    make_tensor = record_maker(Tensor)
    no_type = (None, None)
    merged = typed.merged
    for k, t in enumerate(tnames):
        # (an initializer's type is its own; no other tensor is an initializer)
        dtype, shape = init_types[t] if n_in <= k < n_def else merged(t, no_type)
        if dims and shape is not None and any(isinstance(d, str) for d in shape):
            shape = tuple(dims.get(d, d) if isinstance(d, str) else d for d in shape)
        j = prod_node[k]
        users = users_of[k]
        is_init = n_in <= k < n_def
        is_const = is_init or (k >= n_def and t in const_nodes)
        made.append(
            make_tensor(  # the fields of Tensor, in order
                t,  # name
                dtype,
                shape,
                names[j] if j >= 0 else None,  # producer
                prod_port[k] if j >= 0 else None,  # producer_port
                tuple(users) if users else (),  # consumers
                is_init,  # is_initializer
                is_const,  # is_constant
                k < n_in,  # is_graph_input
                t in outputs_set,  # is_graph_output
                const_values.get(t) if is_const else None,  # const_value
                t in foldable,  # const_foldable
            )
        )
    del tnames, users_of, tid
    made.sort(key=_tensor_name)
    tensors = {r.name: r for r in made}
    del made
    node_index = {n.name: n for n in nodes}
    return Graph(
        name=graph_name,
        nodes=tuple(nodes),
        tensors=MappingProxyType(tensors),
        inputs=graph_inputs,
        outputs=graph_outputs,
        opset=opset,
        model_path=None if where.startswith("<") else where,
        bound_dims=MappingProxyType(dict(dims)),
        unbound_dims=unbound_axes,
        dim_sources=MappingProxyType(dim_sources),
        compile_time_nodes=compile_time,
        opaque_nodes=tuple(n.name for n in nodes if n.opaque),
        warnings=warnings,
        opsets=MappingProxyType(opsets),
        _node_index=MappingProxyType(node_index),
    )
