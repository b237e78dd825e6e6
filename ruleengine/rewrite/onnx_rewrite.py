"""Write the fused ONNX model: each group becomes one node backed by a model-local function.

The function body is the group's original subgraph with its tensors renamed (inputs
``x<i>``, outputs ``y<i>``, intermediates ``t<i>``), so identical groups share one function
and onnxruntime (which inlines local functions) computes exactly what the original did.
Rule, group id and kernel name go into the node's ``metadata_props``; ``rewrite.attributes``
are kept there too (as JSON), never as node attributes, which the function does not declare.

The rewriter only ever works on a copy of the model it is given.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ruleengine.errors import AutofusionError
from ruleengine.graph import onnxlite
from ruleengine.graph.model import Graph
from ruleengine.kernels.model import FUSED_DOMAIN
from ruleengine.kernels.opset_down import as_model_function
from ruleengine.rewrite.model import FusedGroup
from ruleengine.rewrite.static_shapes import fold_static_shapes
from ruleengine.version import __version__

if TYPE_CHECKING:
    import onnx

MIN_IR_VERSION = 10  # function overloads and node metadata_props need IR 10
_FLOAT_TYPES = {
    onnxlite.TensorProto.FLOAT,
    onnxlite.TensorProto.FLOAT16,
    onnxlite.TensorProto.BFLOAT16,
    onnxlite.TensorProto.DOUBLE,
}


class RewriteError(AutofusionError):
    """A chosen group cannot be written as a function call (should not happen after resolve)."""


def node_index(model: onnx.ModelProto, graph: Graph) -> dict[str, int]:
    """Map each graph-record node name to the position of its NodeProto in ``model``.

    The graph loader records each node's position in the file (``source_index``) and may
    generate names for unnamed nodes; without a position, nodes are matched by their output
    tensors (unique in SSA form) and by name only as a fallback.
    """
    return _node_index(model, graph)[0]


def _node_index(
    model: onnx.ModelProto, graph: Graph
) -> tuple[dict[str, int], list[tuple[str, ...]]]:
    """``node_index``, and every NodeProto's outputs by position (read once here)."""
    protos = model.graph.node
    # protobuf fields read once per node (a slice is a list made in C: faster than
    # iterating the field)
    outs = [tuple(n.output[:]) for n in protos]
    count = len(outs)
    index: dict[str, int] = {}
    unplaced = []
    for node in graph.nodes:
        src = node.source_index
        if 0 <= src < count and outs[src] == tuple(node.outputs):
            index[node.name] = src
        else:
            unplaced.append(node)
    if not unplaced:
        return index, outs
    by_output: dict[str, int] = {}
    by_name: dict[str, int] = {}
    for i, n in enumerate(protos):
        for out in outs[i]:
            if out:
                by_output[out] = i
        if n.name:
            by_name.setdefault(n.name, i)
    for node in unplaced:
        pos = next((by_output[o] for o in node.outputs if o in by_output), None)
        if pos is None:
            pos = by_name.get(node.name)
        if pos is not None:
            index[node.name] = pos
    return index, outs


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(
        a.type in (onnxlite.AttributeProto.GRAPH, onnxlite.AttributeProto.GRAPHS)
        for a in node.attribute
    )


def _meta(node: onnx.NodeProto, key: str, value: str) -> None:
    node.metadata_props.add(key=key, value=value)


def _float_outputs(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor whose type the model records."""
    types: dict[str, int] = {}
    g = model.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _is_float(graph: Graph, types: Mapping[str, int], name: str) -> bool:
    tensor = graph.tensors.get(name)
    if tensor is not None and tensor.dtype is not None:
        return tensor.dtype in ("float32", "float16", "bfloat16", "float64")
    return types.get(name) in _FLOAT_TYPES


def _build_body(
    protos: Sequence[onnx.NodeProto],
    inputs: Sequence[str],
    outputs: Sequence[str],
    corrupt_output: str | None,
) -> list[onnx.NodeProto]:
    """Copy the group's nodes with consistently renamed tensors (and optional corruption)."""
    rename: dict[str, str] = {"": ""}
    rename.update({t: f"x{i}" for i, t in enumerate(inputs)})
    rename.update({t: f"y{i}" for i, t in enumerate(outputs)})
    body: list[onnx.NodeProto] = []
    internal = 0
    for k, proto in enumerate(protos):
        node = onnxlite.NodeProto()
        node.CopyFrom(proto)
        node.name = f"n{k}"
        node.doc_string = ""
        del node.metadata_props[:]
        for i, t in enumerate(node.input):
            node.input[i] = rename[t]
        for i, t in enumerate(node.output):
            if t not in rename:
                rename[t] = f"t{internal}"
                internal += 1
            node.output[i] = rename[t]
        body.append(node)
    if corrupt_output is not None:
        # Test-only hook (see docs/fuse.md): negate one output so verification must fail.
        target = rename[corrupt_output]
        for node in body:
            for i, t in enumerate(node.output):
                if t == target:
                    node.output[i] = f"{target}_uncorrupted"
        body.append(onnxlite.make_node("Neg", [f"{target}_uncorrupted"], [target], name="corrupt"))
    return body


# NodeProto fields a function body sets afresh: the rest (op, domain, overload,
# attributes, any field this onnx does not know) is copied as it is.
_RENAMED = ("input", "output", "name", "doc_string", "metadata_props")


def _body_key(
    protos: Sequence[onnx.NodeProto],
    inputs: Sequence[str],
    outputs: Sequence[str],
    node_outputs: Sequence[Sequence[str]] | None = None,
) -> tuple | None:
    """What ``_build_body`` and the function around it make of a group, as a key: two
    groups with equal keys get byte-identical functions. Per node: its tensors renamed as
    ``_build_body`` renames them, and the bytes of every other field, read by clearing
    the renamed ones *in place*: the caller's nodes are leaving the model. None (nothing
    cleared) when a name does not resolve: the plain path then raises as before.
    ``node_outputs``: each proto's outputs, when the caller has read them."""
    rename: dict[str, str] = {"": ""}
    rename.update({t: f"x{i}" for i, t in enumerate(inputs)})
    rename.update({t: f"y{i}" for i, t in enumerate(outputs)})
    renamed: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    internal = 0
    if node_outputs is None:
        node_outputs = [p.output for p in protos]
    for proto, made in zip(protos, node_outputs, strict=True):
        try:
            ins = tuple([rename[t] for t in proto.input[:]])
        except KeyError:
            return None
        outs = []
        for t in made:
            got = rename.get(t)
            if got is None:
                got = rename[t] = f"t{internal}"
                internal += 1
            outs.append(got)
        renamed.append((ins, tuple(outs)))
    parts: list[tuple] = [(len(inputs), len(outputs))]
    for proto, (ins, outs) in zip(protos, renamed, strict=True):
        clear = proto.ClearField
        for f in _RENAMED:
            clear(f)
        parts.append((proto.SerializeToString(), ins, outs))
    return tuple(parts)


def _body_from_key(key: tuple) -> list[onnx.NodeProto]:
    """``_build_body`` (no corruption) of the group ``_body_key`` made ``key`` from:
    the same nodes, field for field."""
    body = []
    for k, (rest, ins, outs) in enumerate(key[1:]):
        node = onnxlite.NodeProto()
        node.ParseFromString(rest)
        node.input.extend(ins)
        node.output.extend(outs)
        node.name = f"n{k}"
        node.doc_string = ""  # set, as _build_body sets it (proto2: present, empty)
        body.append(node)
    return body


# The name a fused model's graph gets when the input's graph has none.
UNNAMED_GRAPH = "main_graph"


def rewrite_model(
    model: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    *,
    domain: str = FUSED_DOMAIN,
    corrupt_rules: Collection[str] = (),
    calls: Mapping[int, Any] | None = None,
    in_place: bool = False,
) -> onnx.ModelProto:
    """Return a copy of ``model`` with each group replaced by one function-call node
    (``in_place``: ``model`` itself is rewritten, for a caller that reads it no more, so
    that the model and its rewritten copy are never both in memory; what is returned is
    then a compact copy of it, made once the rewrite's working set is gone).

    ``calls`` (group id -> kernels.bind.Call) makes those groups call their catalog
    kernel: ports as inputs, the kernel's attributes, its reference semantics as the body.
    ``corrupt_rules`` is a test-only hook: groups of those rules get a function body that
    negates one float output, to prove that verification and ``--safe`` catch a bad fusion.
    """
    out = _rewrite(model, graph, groups, domain, corrupt_rules, calls, in_place)
    # the rewrite's own working set is gone when its frame is: the copy comes after
    return _compacted(out) if in_place and groups else out


def _rewrite(
    model: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    domain: str,
    corrupt_rules: Collection[str],
    calls: Mapping[int, Any] | None,
    in_place: bool,
) -> onnx.ModelProto:
    if in_place:
        out = model
    else:
        out = onnxlite.ModelProto()
        out.CopyFrom(model)
    if not out.graph.name:  # onnx.checker requires one; onnxruntime and exporters do not
        out.graph.name = UNNAMED_GRAPH
    if not groups:
        return out
    rewriter = _Rewriter(model, out, graph, groups, domain)
    for group in groups:
        rewriter.fuse(group, group.rule in corrupt_rules, (calls or {}).get(group.id))
    rewriter.finish(len(groups))
    return out


class _Rewriter:
    """One rewrite in progress: the groups fused so far (their nodes, the functions they
    call) and what the next one must not collide with."""

    def __init__(
        self,
        model: onnx.ModelProto,
        out: onnx.ModelProto,
        graph: Graph,
        groups: Sequence[FusedGroup],
        domain: str,
    ) -> None:
        self.model, self.out, self.graph, self.domain = model, out, graph, domain
        g = self.g = out.graph
        self.positions, self.outs = _node_index(model, graph)
        # a Shape of a static tensor made inside a group would close a cycle: fold it
        fold_static_shapes(g, graph, (group.nodes for group in groups), self.positions)
        self.opsets = {o.domain: o.version for o in model.opset_import}
        # A model fused before already has the domain and some functions: keep them, and
        # give new functions overloads that do not collide with the existing ones.
        self.existing = {(f.domain, f.name, f.overload) for f in model.functions}
        self.types: dict[str, int] | None = None  # element types, read for corrupt_rules only
        self.taken: dict[int, int] = {}  # proto position -> group id
        self.fused_nodes: list[tuple[int, onnx.NodeProto]] = []
        self.functions: dict[tuple[str, bytes], onnx.FunctionProto] = {}
        # The repeated-layer memo: a group whose body (or kernel form) is one made before
        # gets that function's key without building and serializing the function again.
        self.made: dict[tuple, tuple[str, bytes]] = {}
        self.variants: dict[str, int] = {}
        self.used_names = {n.name for n in g.node if n.name}
        # every node with a subgraph is opaque in the records: only those are looked at
        self.opaque = {n.name for n in graph.nodes if n.opaque}
        self.removed_tensors: set[str] = set()

    def fuse(self, group: FusedGroup, corrupted: bool, call: Any) -> None:
        """Replace ``group`` by one node calling its function (``call``: the catalog
        kernel it binds, or None: its own nodes as the body); ``corrupted``: its rule is
        one of the test-only ``corrupt_rules``."""
        pos = self._claim(group)
        outs = self.outs
        produced = {t for p in pos for t in outs[p]}
        corrupt = None
        if corrupted:
            types = self.types = _float_outputs(self.model) if self.types is None else self.types
            corrupt = next((o for o in group.outputs if _is_float(self.graph, types, o)), None)
        if call is not None:
            key, key_fn = self._kernel_key(group, call, corrupt)
            # an output that does not leave the group still gets a (fresh) name: onnx's
            # function shape inference wants every output of the function on the node
            node_inputs = _trim(call.inputs)
            node_outputs = [
                t or f"{group.target_op}_g{group.id}_{port}"
                for t, port in zip(call.outputs, call.form.outputs, strict=True)
            ]
            node_attrs = dict(call.attributes)
            doc = (
                f"autofusion {__version__}: kernel {call.entry.name} v{call.entry.version}, "
                f"form {call.form.name}: the catalog's reference semantics"
            )
        else:
            key, key_fn = self._body_key(group, pos, corrupt)
            node_inputs, node_outputs, node_attrs = list(group.inputs), list(group.outputs), {}
            doc = (
                f"autofusion {__version__}: rule {group.rule}, kernel "
                f"{group.kernel.kernel_name}; body = the original subgraph of group {group.id}"
            )
        fn = self._function(group.target_op, key, key_fn, doc)
        node = self._node(group, node_inputs, node_outputs, node_attrs, fn)
        if call is not None:
            _meta(node, "autofusion.contract", f"{call.entry.name}@{call.entry.version}")
        if group.tensor_layout:
            _meta(node, "autofusion.tensor_layout", group.tensor_layout)
        if group.kernel_config:
            _meta(node, "autofusion.kernel_config", json.dumps(group.kernel_config, sort_keys=True))
        self.fused_nodes.append((min(pos), node))
        self.removed_tensors |= produced - set(group.outputs)

    def _claim(self, group: FusedGroup) -> list[int]:
        """The positions of the group's nodes, each claimed by no other group."""
        positions, g, taken = self.positions, self.g, self.taken
        missing = [n for n in group.nodes if n not in positions]
        if missing:
            raise RewriteError(
                f"group {group.id} ({group.rule}): nodes not in the model: {missing}"
            )
        pos = [positions[n] for n in group.nodes]
        for p in pos:
            if p in taken:
                raise RewriteError(
                    f"node {g.node[p].name or p} is in groups {taken[p]} and {group.id}"
                )
            taken[p] = group.id
        opaque = self.opaque
        if any(_has_subgraph(g.node[positions[n]]) for n in group.nodes if n in opaque):
            raise RewriteError(f"group {group.id} ({group.rule}) contains a control-flow node")
        return pos

    def _kernel_key(
        self, group: FusedGroup, call: Any, corrupt: str | None
    ) -> tuple[tuple[str, bytes], onnx.FunctionProto | None]:
        """The key of the function calling the catalog kernel, and the function when it
        was not made before (None: ``made`` knew its key)."""
        key_fn = None
        seen = (group.target_op, call.form.function, call.float_type)
        key = self.made.get(seen) if corrupt is None else None
        if key is None:
            key_fn = _kernel_function(call, self.opsets, self.domain, corrupt)
            key = (group.target_op, key_fn.SerializeToString(deterministic=True))
            if corrupt is None:
                self.made[seen] = key
        return key, key_fn

    def _body_key(
        self, group: FusedGroup, pos: list[int], corrupt: str | None
    ) -> tuple[tuple[str, bytes], onnx.FunctionProto | None]:
        """As ``_kernel_key``, for a function whose body is the group's own nodes (they
        leave the model: their keys are taken from them in place)."""
        key_fn = None
        order = sorted(pos)
        protos = [self.g.node[p] for p in order]
        outs = self.outs
        seen = (
            _body_key(protos, group.inputs, group.outputs, [outs[p] for p in order])
            if corrupt is None
            else None
        )
        key = self.made.get((group.target_op, seen)) if seen is not None else None
        if key is None:
            if seen is None:
                body = _build_body(protos, group.inputs, group.outputs, corrupt)
            else:
                body = _body_from_key(seen)
            body_domains = sorted({n.domain for n in body})
            body_opsets = [onnxlite.make_opsetid(d, self.opsets.get(d, 1)) for d in body_domains]
            key_fn = onnxlite.make_function(
                self.domain,
                group.target_op,
                [f"x{i}" for i in range(len(group.inputs))],
                [f"y{i}" for i in range(len(group.outputs))],
                body,
                body_opsets,
            )
            key = (group.target_op, key_fn.SerializeToString(deterministic=True))
            if seen is not None:
                self.made[(group.target_op, seen)] = key
        return key, key_fn

    def _function(
        self,
        target_op: str,
        key: tuple[str, bytes],
        key_fn: onnx.FunctionProto | None,
        doc: str,
    ) -> onnx.FunctionProto:
        """The function of ``key``, added with an overload of its own when it is new."""
        functions = self.functions
        if key not in functions:
            assert key_fn is not None  # a remembered key names a function made before
            count = self.variants.get(target_op, 0) + 1
            overload = key_fn.overload or ("" if count == 1 else f"v{count}")
            while (self.domain, target_op, overload) in self.existing or any(
                f.overload == overload and f.name == target_op for f in functions.values()
            ):
                count += 1
                overload = f"v{count}"
            self.variants[target_op] = count
            key_fn.overload = overload
            key_fn.doc_string = doc
            functions[key] = key_fn
        return functions[key]

    def _node(
        self,
        group: FusedGroup,
        node_inputs: list[str],
        node_outputs: list[str],
        node_attrs: dict[str, Any],
        fn: onnx.FunctionProto,
    ) -> onnx.NodeProto:
        """The fused node calling ``fn``, named uniquely, with the group's metadata."""
        name = f"{group.target_op}_g{group.id}"
        while name in self.used_names:
            name += "_"
        self.used_names.add(name)
        node = onnxlite.make_node(
            group.target_op, node_inputs, node_outputs, name=name, domain=self.domain, **node_attrs
        )
        node.overload = fn.overload
        node.doc_string = (
            f"autofusion group {group.id}: rule {group.rule}, kernel {group.kernel.kernel_name}, "
            f"fuses {', '.join(group.nodes)}"
        )
        _meta(node, "autofusion.rule", group.rule)
        _meta(node, "autofusion.group_id", str(group.id))
        _meta(node, "autofusion.kernel_name", group.kernel.kernel_name)
        _meta(node, "autofusion.nodes", json.dumps(list(group.nodes)))
        if group.attributes:
            _meta(node, "autofusion.attributes", json.dumps(group.attributes, sort_keys=True))
        return node

    def finish(self, n_groups: int) -> None:
        """Put the fused nodes among the kept ones in a topological order (refusing a
        tensor a group hides that is still read), and add the functions and metadata."""
        g, outs, out, domain = self.g, self.outs, self.out, self.domain
        taken, fused_nodes, removed_tensors = self.taken, self.fused_nodes, self.removed_tensors
        kept = [(i, g.node[i]) for i in range(len(outs)) if i not in taken]
        reads = [_reads(n) for _, n in kept]
        still_read = set().union(*reads) | {o.name for o in g.output}
        leaked = sorted(removed_tensors & still_read)
        if leaked:
            raise RewriteError(
                f"fused groups hide tensors still read outside them: {', '.join(leaked[:5])}"
            )
        available = {i.name for i in g.input} | {t.name for t in g.initializer}
        ordered = _toposort(
            kept + fused_nodes,
            available,
            reads + [_reads(n) for _, n in fused_nodes],
            [outs[i] for i, _ in kept] + [tuple(n.output) for _, n in fused_nodes],
        )
        del g.node[:]
        g.node.extend(ordered)
        survivors = [vi for vi in g.value_info if vi.name not in removed_tensors]
        del g.value_info[:]
        g.value_info.extend(survivors)
        out.functions.extend(self.functions.values())
        if domain not in self.opsets:
            out.opset_import.append(onnxlite.make_opsetid(domain, 1))
        out.ir_version = max(out.ir_version, MIN_IR_VERSION)
        _set_model_meta(out, "autofusion.version", __version__)
        _set_model_meta(out, "autofusion.groups", str(n_groups))


# Protobuf's parser (upb) refuses a message over 2 GiB with a DecodeError ("Error parsing
# message with type 'onnx.ModelProto'", measured at 2**31 + 5 bytes; 2**31 parses) while
# its serializer writes one (upb has no size limit on encoding). A model that large is
# kept as it is rather than parsed back: the size is tested, no exception is caught.
_PARSE_LIMIT_BYTES = 2**31


def _compacted(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model in a new message of its own. Protobuf (upb) keeps every part of a
    message in one arena until the whole message is freed: a model rewritten in place
    still holds each node it lost (2048 layers: 45 MiB for the input's 88k nodes, the
    fused model alone 23 MiB). Its copy lets the input's memory go once the caller drops
    it, before the check and the rendering of the outputs (where ``fuse`` peaks).

    A model of 2 GiB or more is returned as it is (emit moves its weights out); any
    error of the serializer or the parser is a bug and propagates."""
    data = model.SerializeToString()
    if len(data) >= _PARSE_LIMIT_BYTES:
        return model
    out = onnxlite.ModelProto()
    out.ParseFromString(data)
    return out


def _trim(names: Sequence[str]) -> list[str]:
    """Drop trailing absent optional inputs of a call."""
    out = list(names)
    while out and not out[-1]:
        out.pop()
    return out


def _kernel_function(
    call: Any, opsets: Mapping[str, int], domain: str, corrupt: str | None
) -> onnx.FunctionProto:
    """The catalog form as this model's function: its opsets, and (test hook) corrupted."""
    version = max(opsets.get("", opsets.get("ai.onnx", 17)), 1)
    fn = as_model_function(call.form.function, version, domain, getattr(call, "float_type", None))
    if corrupt is not None and corrupt in call.outputs:
        target = fn.output[list(call.outputs).index(corrupt)]
        for n in fn.node:
            for i, t in enumerate(n.output):
                if t == target:
                    n.output[i] = f"{target}_uncorrupted"
        fn.node.append(
            onnxlite.make_node("Neg", [f"{target}_uncorrupted"], [target], name="corrupt")
        )
    return fn


def _set_model_meta(model: onnx.ModelProto, key: str, value: str) -> None:
    for entry in model.metadata_props:
        if entry.key == key:
            entry.value = value
            return
    entry = model.metadata_props.add()
    entry.key = key
    entry.value = value


def _toposort(
    items: Sequence[tuple[int, onnx.NodeProto]],
    available: set[str],
    reads: Sequence[set[str]] | None = None,
    outputs: Sequence[Sequence[str]] | None = None,
) -> list[onnx.NodeProto]:
    """Stable topological order: among ready nodes, the one first in the original order.
    ``reads`` and ``outputs``: each item's ``_reads`` and outputs, when the caller has them.

    When the items sorted by their original positions are an order already (every node
    reads only what earlier ones make: the common case, fused nodes sit where their
    group began), that order is the answer, found in one pass; the heap otherwise."""
    if outputs is None:
        outputs = [node.output for _, node in items]
    producer: dict[str, int] = {}
    for k, outs in enumerate(outputs):
        for t in outs:
            if t:
                producer[t] = k
    if reads is None:
        reads = [_reads(node) for _, node in items]
    ranks = sorted(range(len(items)), key=lambda k: items[k][0])
    rank = [0] * len(items)
    for r, k in enumerate(ranks):
        rank[k] = r
    if len({items[k][0] for k in ranks}) == len(items) and all(
        rank[producer[t]] < rank[k]
        for k in range(len(items))
        for t in reads[k]
        if t in producer and t not in available
    ):
        return [items[k][1] for k in ranks]
    waiting: list[int] = [0] * len(items)
    users: dict[int, list[int]] = {}
    for k in range(len(items)):
        deps = {producer[t] for t in reads[k] if t in producer and t not in available}
        deps.discard(k)
        waiting[k] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(k)
    heap = [(items[k][0], k) for k in range(len(items)) if waiting[k] == 0]
    heapq.heapify(heap)
    order: list[onnx.NodeProto] = []
    while heap:
        _, k = heapq.heappop(heap)
        order.append(items[k][1])
        for u in users.get(k, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(heap, (items[u][0], u))
    if len(order) != len(items):
        raise RewriteError(
            "the fused graph has a cycle: a chosen group is not convex "
            "(a path leaves the group and re-enters it)"
        )
    return order


def _reads(node: onnx.NodeProto) -> set[str]:
    """Tensors a node reads, including names its subgraphs capture from the outer scope."""
    names = {t for t in node.input if t}
    for attr in node.attribute:
        subgraphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for sg in subgraphs:
            names |= _captured(sg)
    return names


def _captured(graph: onnx.GraphProto) -> set[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local |= {t for n in graph.node for t in n.output}
    used: set[str] = set()
    for n in graph.node:
        used |= _reads(n)
    return used - local


def function_summary(model: onnx.ModelProto) -> Mapping[str, int]:
    """Number of fused nodes per function name (for tests and the report)."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        if n.domain == FUSED_DOMAIN:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def fused_nodes(model: onnx.ModelProto) -> dict[int, tuple[str, str]]:
    """Group id -> (fused node name, function overload), read back from node metadata."""
    found: dict[int, tuple[str, str]] = {}
    for n in model.graph.node:
        if n.domain != FUSED_DOMAIN:
            continue
        gid = next((e.value for e in n.metadata_props if e.key == "autofusion.group_id"), None)
        if gid is not None and gid.isdigit():
            found[int(gid)] = (n.name, n.overload)
    return found
