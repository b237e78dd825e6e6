"""ONNX -> the immutable ``Graph`` view. The only module that reads ONNX files.

Weights are never loaded: ``load_external_data=False`` and initializer shapes/dtypes come
from the TensorProto header fields, so a model whose external weight file is missing is
still analysable. Shape inference runs on the model (without data); symbolic dimensions
can be bound first (``dims``), the rest are reported in ``Graph.unbound_dims``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ruleengine.diagnostics.model import Diagnostic, Severity
from ruleengine.errors import GraphLoadError
from ruleengine.graph import onnxlite, segments
from ruleengine.graph.binding import (
    UNNAMED,
    bind_dims,
    bind_input_shapes,
    input_axes,
    nameless_axes,
)
from ruleengine.graph.folding import const_foldable
from ruleengine.graph.model import Graph, Node, Tensor, record_maker
from ruleengine.graph.onnxlite import AttributeProto, ModelProto
from ruleengine.graph.problems import duplicate_names, fail, problem
from ruleengine.graph.propagate import PendingShapes
from ruleengine.graph.segments import NodeFields
from ruleengine.graph.typemerge import MergedTypes, ShapeView, TypeEntry
from ruleengine.graph.typeread import TypeReader
from ruleengine.graph.values import (
    SMALL_CONST_NUMEL,
    AttrInfo,
    attribute_value,
    dtype_name,
    plain_value,
    schema_defaults,
    small_array,
    spatial_defaults,
)
from ruleengine.graph.wiring import Wiring, node_order, number_tensors, read_consumers, unique_names
from ruleengine.procs import cores
from ruleengine.runtime import paused_gc, release_memory

if TYPE_CHECKING:
    import onnx


_TEXT_SUFFIXES = (".json", ".txtpb", ".textproto", ".onnxtxt")


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
        except Exception:  # not binary: a text format named by its suffix?
            if path.suffix.lower() not in _TEXT_SUFFIXES:
                raise
            model = onnxlite.full().load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises many kinds
        raise fail(
            "unreadable",
            f"{where} is not a readable ONNX model ({type(exc).__name__}: {exc})",
            where,
            "pass an .onnx file written by an ONNX exporter",
        ) from None
    if not model.HasField("graph") or (
        not model.graph.node and not model.graph.input and not model.graph.output
    ):
        raise fail(
            "unreadable" if not model.ByteSize() else "no-graph",
            f"{where} holds no ONNX graph",
            where,
            "pass an .onnx file written by an ONNX exporter",
        )
    return model


_serialized = AttributeProto.SerializeToString


def _node_fields(g: onnx.GraphProto, segmented: bool = False) -> NodeFields:
    """Every node's fields the loader reads, in one pass (protobuf field access is slow;
    a slice of a repeated field is a list made in C: 1.5x faster than iterating it).
    No message wrapper outlives its node's turn: attributes are kept serialized (one
    conversion per distinct attribute, ``AttrInfo``), and each wrapper protobuf makes
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
    except Exception as exc:  # reported by _infer
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
    except Exception as exc:  # keep what the model declares
        last = exc
    msg = (
        f"ONNX shape inference failed ({type(last).__name__}: {last}); "
        "using the shapes the model declares"
    )
    hint = "export the model with shapes, or bind symbolic dims with --dim"
    return {}, (problem("shape-inference", msg, where, hint, Severity.WARNING),)


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
    of value_info and inferred in place instead of in a copy. ONNX's shape inference
    runs (in a forked child with ``jobs`` > 1) while the initializers and the nodes are
    read, the tensors numbered and the nodes ordered; then the records are made."""
    bound = _bind(model, dims, where, input_shapes, owned)
    del model  # from here on, only the (bound, stripped) copy
    g = bound.model.graph
    reader = TypeReader()  # each distinct TypeProto converted once
    types, declared_inputs = _declared_types(g, reader)
    del g.value_info[:]  # inferred afresh; merged back below where they know more
    folder = None if where.startswith("<") else Path(where).resolve().parent
    # A graph long enough to be inferred in segments (``segments.SEGMENT_FROM_NODES``)
    # has its nodes' inputs, outputs, op types and domains read before the inference
    # begins: the segments are cut from them. A shorter one has them read after it
    # began, beside it (read before, their pages would be shared with the forked child,
    # and the reading below, which writes them, would copy them: page faults for nothing).
    fields = _node_fields(g, True) if len(g.node) >= segments.SEGMENT_FROM_NODES else None
    pending = _start_infer(
        bound.model, bound.opset, folder, reader, cores() if jobs is None else jobs, fields
    )
    inits = _Initializers.read(g)
    graph_inputs = tuple(i.name for i in g.input if i.name not in inits.names)
    graph_outputs = tuple(o.name for o in g.output)
    rows = _NodeRows.read(g, fields)
    del fields
    wiring = number_tensors(graph_inputs, inits.types, rows.outs, rows.names, where)
    nodes_read = (rows.ins, rows.ops, rows.doms)
    unfused = (rows.src_names, rows.shared)
    reads = read_consumers(
        wiring, nodes_read, rows.attrs, rows.attr_info, rows.names, unfused, where
    )
    order, topo = node_order(wiring, reads, rows.ins, rows.names, where)
    inferred, infer_warnings = _infer(pending, where)
    del pending
    release_memory()  # the inferred copy and ONNX's C++ model are gone: return their pages
    warnings = bound.warnings + infer_warnings + rows.warnings(where)
    typed = MergedTypes(types, inferred, inits.types)  # (merged where read)
    del inferred
    const_nodes = _constant_nodes(g, (rows.ops, rows.doms, rows.outs), inits.values, (types, typed))
    shapes = ShapeView(typed)  # (a copy of 2 x 10^5 entries for a few reads: a view)
    nodes = _make_nodes(rows, order, topo, reads.opaque, bound, shapes)
    graph_name = g.name or Path(where).stem
    node_names = rows.names
    # Nothing more is read from the protobuf: let it go before the tensors are built (a
    # model read by ``load_graph`` has no other holder).
    bound.model = None
    del g, rows
    release_memory()
    foldable = const_foldable(nodes, inits.names | const_nodes, shapes)
    nodes, compile_time = _mark_compile_time(nodes, foldable)
    unbound_axes, dim_sources = input_axes(declared_inputs, graph_inputs, bound.dims)
    tensors = _make_tensors(
        wiring, node_names, typed, inits, (const_nodes, foldable, set(graph_outputs)), bound.dims
    )
    del wiring
    return Graph(
        name=graph_name,
        nodes=tuple(nodes),
        tensors=MappingProxyType(tensors),
        inputs=graph_inputs,
        outputs=graph_outputs,
        opset=bound.opset,
        model_path=None if where.startswith("<") else where,
        bound_dims=MappingProxyType(dict(bound.dims)),
        unbound_dims=unbound_axes,
        dim_sources=MappingProxyType(dim_sources),
        compile_time_nodes=compile_time,
        opaque_nodes=tuple(n.name for n in nodes if n.opaque),
        warnings=warnings,
        opsets=MappingProxyType(bound.opsets),
        _node_index=MappingProxyType({n.name: n for n in nodes}),
    )


@dataclass
class _Bound:
    """The model with the user's dims and shapes bound (a copy unless it was ``owned``),
    with its opsets and the warnings the binding gave."""

    model: Any  # onnx.ModelProto (deleted once the nodes are read)
    dims: dict[str, int]  # every bound symbolic dim: the user's and those shapes implied
    opsets: dict[str, int]  # domain -> version ("" also for a model naming "ai.onnx")
    opset: int  # of the default domain (0: none)
    warnings: tuple[Diagnostic, ...]


def _bind(
    model: onnx.ModelProto,
    dims: Mapping[str, int] | None,
    where: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    owned: bool,
) -> _Bound:
    """Bind ``input_shapes`` then ``dims`` into the model (or a copy of it), warning of
    each user dim the model does not declare."""
    user_dims = dict(dims or {})
    # symbolic dim names as the model declares them (before any binding below)
    declared = (
        {
            d.dim_param
            for vi in (*model.graph.input, *model.graph.output, *model.graph.value_info)
            for d in vi.type.tensor_type.shape.dim
            if d.HasField("dim_param") and d.dim_param not in UNNAMED
        }
        if user_dims
        else set()
    )
    axes = nameless_axes(model) if user_dims else set()  # x[0]: a -1 or empty input dim
    opsets = {o.domain or "": int(o.version) for o in model.opset_import}
    if owned:
        model_copy = model
    else:
        model_copy = ModelProto()
        model_copy.CopyFrom(model)
    del model
    implied = bind_input_shapes(model_copy, dict(input_shapes or {}), where)
    bound = {**implied, **user_dims}
    bind_dims(model_copy, bound)
    pre_warn = tuple(
        problem(
            "bad-dim",
            f"--dim {name}={bound[name]} binds no symbolic dimension of the model",
            where,
            f"symbolic dims: {', '.join(sorted(declared)) or 'none'}",
            Severity.WARNING,
        )
        for name in sorted(user_dims)
        if name not in declared and name not in axes
    )
    if "ai.onnx" in opsets and "" not in opsets:
        opsets[""] = opsets["ai.onnx"]
    return _Bound(model_copy, bound, opsets, opsets.get("", 0), pre_warn)


def _declared_types(
    g: onnx.GraphProto, reader: TypeReader
) -> tuple[dict[str, TypeEntry], dict[str, tuple | None]]:
    """The types the model declares (value_info, then outputs, then inputs), and each
    graph input's declared shape."""
    types: dict[str, TypeEntry] = {}
    for vi in (*g.value_info, *g.output):
        got = reader.read(vi.type)
        if got is not None:
            types[vi.name] = (dtype_name(got[0]), got[1])
    declared_inputs: dict[str, tuple | None] = {}
    for vi in g.input:  # each read once (an LLM export has ~10^4 weight inputs)
        got = reader.read(vi.type)
        if got is None:
            declared_inputs[vi.name] = None
        else:
            declared_inputs[vi.name] = got[1]
            types[vi.name] = (dtype_name(got[0]), got[1])
    return types, declared_inputs


@dataclass(frozen=True)
class _Initializers:
    """The initializers (dense and sparse): their names, types (the truth) and the
    values of the small ones."""

    names: set[str]
    types: dict[str, tuple[str | None, tuple]]
    values: dict[str, tuple]  # also filled with the small Constant nodes' values

    @classmethod
    def read(cls, g: onnx.GraphProto) -> _Initializers:
        """Read from the graph's header fields (weights are never loaded)."""
        init_names: set[str] = set()
        init_types: dict[str, tuple[str | None, tuple]] = {}
        const_values: dict[str, tuple] = {}
        for init in g.initializer:
            name = init.name
            init_names.add(name)
            init_dims = tuple(init.dims)
            init_types[name] = (dtype_name(init.data_type), init_dims)
            if math.prod(init_dims) <= SMALL_CONST_NUMEL:  # else small_array is None
                arr = small_array(init)
                if arr is not None:
                    const_values[name] = tuple(plain_value(arr))
        for sp in g.sparse_initializer:
            init_names.add(sp.values.name)
            init_types[sp.values.name] = (
                dtype_name(sp.values.data_type),
                tuple(int(d) for d in sp.dims),
            )
        return cls(init_names, init_types, const_values)


@dataclass(frozen=True)
class _NodeRows:
    """Every node's fields in file order (``_node_fields``), with the unique names the
    graph gives them and the names shared by several nodes (never fused: the plan and
    the fused model name nodes by their name in the model, and a made-up one, name__2,
    would point at nothing)."""

    ins: Sequence[tuple[str, ...]]
    outs: Sequence[tuple[str, ...]]
    ops: Sequence[str]
    doms: Sequence[str]
    src_names: Sequence[str]  # as in the model
    attrs: Sequence[tuple[bytes, ...]]  # serialized AttributeProtos
    names: list[str]  # unique
    renamed: list[tuple[str, str]]  # (shared name, the name a later node got)
    shared: set[str]
    attr_info: AttrInfo

    @classmethod
    def read(cls, g: onnx.GraphProto, fields: NodeFields | None) -> _NodeRows:
        """The rows, the part in ``fields`` (read before the fork) not read again."""
        _, ins_l, outs_l, ops_l, dom_l, src_names, attr_l = fields or _node_fields(g)
        if fields is not None and ops_l:  # read before the fork: the rest now
            src_names, attr_l = _node_names(g)
        names, renamed = unique_names(src_names, ops_l)
        shared = {old for old, _ in renamed}
        return cls(
            ins_l, outs_l, ops_l, dom_l, src_names, attr_l, names, renamed, shared,
            AttrInfo(),
        )  # fmt: skip

    def warnings(self, where: str) -> tuple[Diagnostic, ...]:
        """One warning for the node names several nodes share, with counts."""
        return duplicate_names(self.renamed, where)


def _make_nodes(
    rows: _NodeRows,
    order: Sequence[int],
    topo: Sequence[int],
    opaque: Sequence[bool],
    bound: _Bound,
    shapes: Mapping[str, tuple | None],
) -> list[Node]:
    """The ``Node`` records in topological order, with their attributes' schema defaults
    (none for an opaque node) and the spatial ones ONNX implies."""
    nodes: list[Node] = []
    make_node = record_maker(Node)
    opsets, opset = bound.opsets, bound.opset
    attr_info = rows.attr_info
    names, ops_l, dom_l, ins_l, outs_l = rows.names, rows.ops, rows.doms, rows.ins, rows.outs
    attr_l, src_names = rows.attrs, rows.src_names
    for i in order:
        domain = dom_l[i]
        dom_opset = opsets.get(domain, opsets.get("ai.onnx" if domain == "" else domain, opset))
        attrs = schema_defaults(ops_l[i], domain, dom_opset) if not opaque[i] else {}
        for key in attr_l[i]:
            name, _, val = attr_info(key)
            attrs[name] = val
        spatial_defaults(ops_l[i], attrs, ins_l[i], shapes)
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
    return nodes


def _mark_compile_time(nodes: list[Node], foldable: set[str]) -> tuple[list[Node], tuple[str, ...]]:
    """The nodes with ``compile_time`` set where every output is foldable, and their names."""
    compile_time = tuple(
        n.name
        for n in nodes
        if n.outputs and all(t in foldable for t in n.outputs if t) and any(t for t in n.outputs)
    )
    if compile_time:
        ct = set(compile_time)
        nodes = [replace(n, compile_time=True) if n.name in ct else n for n in nodes]
    return nodes, compile_time


def _make_tensors(
    wiring: Wiring,
    names: Sequence[str],
    typed: MergedTypes,
    inits: _Initializers,
    sets: tuple[set[str], set[str], set[str]],
    dims: Mapping[str, int],
) -> dict[str, Tensor]:
    """Every tensor a node, an initializer or a graph input defines (a node reads no
    other: ``read_consumers`` refuses it), made by id: in the order the tables were
    filled, so the types are read one entry after the other, not at random. The records
    are then sorted by name, the tensors' order. ``names``: the nodes'; ``sets``: the
    Constant nodes' outputs, the foldable tensors and the graph outputs."""
    const_nodes, foldable, outputs_set = sets
    n_in, n_def = wiring.n_in, wiring.n_def
    prod_node, prod_port, users_of = wiring.producer, wiring.port, wiring.consumers
    init_types, const_values = inits.types, inits.values
    made: list[Tensor] = []
    make_tensor = record_maker(Tensor)
    no_type = (None, None)
    merged = typed.merged
    for k, t in enumerate(wiring.names):
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
    made.sort(key=_tensor_name)
    return {r.name: r for r in made}


def _constant_nodes(
    g: onnx.GraphProto,
    rows: tuple[Sequence[str], Sequence[str], Sequence[tuple[str, ...]]],
    const_values: dict[str, tuple],
    types: tuple[dict[str, TypeEntry], MergedTypes],
) -> set[str]:
    """The outputs of the Constant nodes (constants too), with their small values put in
    ``const_values`` and the type of a value no other source types put in the declared
    types. ``rows``: the nodes' op types, domains and outputs; ``types``: the declared
    and the merged types."""
    ops_l, dom_l, outs_l = rows
    declared, typed = types
    const_nodes: set[str] = set()
    for i, op in enumerate(ops_l):
        if op == "Constant" and dom_l[i] in ("", "ai.onnx") and outs_l[i]:
            n = g.node[i]
            const_nodes.add(n.output[0])
            for a in n.attribute:
                val = attribute_value(a)
                if a.name == "value" and isinstance(val, tuple):
                    const_values[n.output[0]] = val
                    if n.output[0] not in typed:
                        declared[n.output[0]] = (dtype_name(a.t.data_type), tuple(a.t.dims))
                elif a.name in ("value_float", "value_int"):
                    const_values[n.output[0]] = (val,)
                elif a.name in ("value_floats", "value_ints") and isinstance(val, tuple):
                    if len(val) <= SMALL_CONST_NUMEL:
                        const_values[n.output[0]] = val
    return const_nodes
