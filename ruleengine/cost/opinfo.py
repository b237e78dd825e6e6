"""What the cost model needs to know about op types: view, cube, reduce; flops; axes.

Class membership is data (``ops/classes.yaml`` via ``ruleengine.ops.classes``); the
fallback sets below only keep the cost model usable while that table is absent.
"""

from __future__ import annotations

import math
from functools import cache

from ruleengine.graph.model import DTYPE_SIZES, Graph, Node

# ---------------------------------------------------------------- tensor sizes, cached

# tensor -> (static shape or None, element size or None, bytes or None); one pass per graph.
_Entry = tuple[tuple[int, ...] | None, int | None, int | None]
_SIZES: dict[int, tuple[Graph, dict[str, _Entry]]] = {}
_FLOPS: dict[int, tuple[Graph, dict[str, int]]] = {}


def size_table(graph: Graph) -> dict[str, _Entry]:
    """Per tensor: (static shape or None, element size or None, bytes or None), cached."""
    hit = _SIZES.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    table: dict[str, _Entry] = {}
    # tensors of one shape and dtype share their entry (the 10^5 tensors of a stack
    # have a few hundred): computed once per (shape, dtype, dim types)
    known: dict[tuple, _Entry] = {}
    for name, t in graph.tensors.items():
        shape = t.shape
        try:
            key = (shape, t.dtype, None if shape is None else tuple(map(type, shape)))
            entry = known.get(key)
        except TypeError:  # an unhashable shape
            key, entry = None, None
        if entry is None:
            static = None
            if shape is not None and all(isinstance(d, int) for d in shape):
                static = tuple(int(d) for d in shape)  # type: ignore[arg-type]
            item = DTYPE_SIZES.get(t.dtype or "")
            size = math.prod(static) * item if static is not None and item is not None else None
            entry = (static, item, size)
            if key is not None:
                known[key] = entry
        table[name] = entry
    if len(_SIZES) > 8:
        _SIZES.clear()
    _SIZES[id(graph)] = (graph, table)
    return table


def static_shape(graph: Graph, tensor: str) -> tuple[int, ...] | None:
    """The tensor's shape when every dim is a known int, else None."""
    entry = size_table(graph).get(tensor) if tensor else None
    return entry[0] if entry is not None else None


def itemsize(graph: Graph, tensor: str) -> int | None:
    entry = size_table(graph).get(tensor) if tensor else None
    return entry[1] if entry is not None else None


def nbytes(graph: Graph, tensor: str) -> int | None:
    """bytes(T) = prod(shape) * dtype size, or None when either is unknown."""
    entry = size_table(graph).get(tensor) if tensor else None
    return entry[2] if entry is not None else None


_FALLBACK = {
    "@view": frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"}),
    "@cube": frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger"}),
    "@reduce": frozenset(
        {
            "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
            "ArgMin", "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization",
            "GroupNormalization", "InstanceNormalization", "RMSNormalization",
            "LpNormalization", "MeanVarianceNormalization", "GlobalAveragePool",
            "GlobalMaxPool",
        }
    ),
}  # fmt: skip


@cache
def op_class(name: str) -> frozenset[str]:
    """ONNX op types of an op class such as ``@view`` (from ops/classes.yaml)."""
    try:
        from ruleengine.ops.classes import op_classes

        classes = op_classes()
        if name in classes:
            return frozenset(classes[name])
    except (ImportError, OSError, ValueError):  # table absent or being edited: use fallback
        pass
    return _FALLBACK.get(name, frozenset())


VIEW, CUBE, REDUCE = 1, 2, 4  # bits of ``node_kinds``
_KINDS: dict[int, tuple[Graph, dict[str, int]]] = {}


def node_kinds(graph: Graph) -> dict[str, int]:
    """Node name -> VIEW | CUBE | REDUCE bits, computed once per graph.

    The cost model asks these questions of every node of every candidate (tens of
    thousands on a big decoder); one dict lookup replaces three class lookups.
    """
    hit = _KINDS.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    by_op: dict[tuple[str, str], int] = {}  # the bits depend on domain and op type only
    kinds: dict[str, int] = {}
    for n in graph.nodes:
        op = (n.domain, n.op_type)
        bits = by_op.get(op)
        if bits is None:
            bits = by_op[op] = (
                (VIEW if is_view(n) else 0)
                | (CUBE if is_cube(n) else 0)
                | (REDUCE if is_reduce(n) else 0)
            )
        kinds[n.name] = bits
    if len(_KINDS) > 8:
        _KINDS.clear()
    _KINDS[id(graph)] = (graph, kinds)
    return kinds


def flops_table(graph: Graph) -> dict[str, int]:
    """The per-graph cache ``node_flops`` fills (node name -> flops)."""
    hit = _FLOPS.get(id(graph))
    if hit is None or hit[0] is not graph:
        if len(_FLOPS) > 8:
            _FLOPS.clear()
        hit = _FLOPS[id(graph)] = (graph, {})
    return hit[1]


def is_view(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in op_class("@view")


def is_cube(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in op_class("@cube")


def is_reduce(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in op_class("@reduce")


# Inputs of cube ops that travel HBM -> L1 -> L0A/L0B, never through the UB.
CUBE_MATRIX_PORTS = {
    "MatMul": (0, 1),
    "MatMulInteger": (0, 1),
    "Gemm": (0, 1),
    "Conv": (0, 1),
    "ConvTranspose": (0, 1),
    "QLinearMatMul": (0, 3),
    "QLinearConv": (0, 3),
    "ConvInteger": (0, 1),
}

# Elementwise ops that cost several vector instructions per element.
_TRANSCENDENTAL = frozenset(
    {"Exp", "Log", "Erf", "Tanh", "Sigmoid", "Sqrt", "Pow", "Reciprocal", "Softplus",
     "Gelu", "Swish", "HardSwish", "Mish", "Elu", "Selu", "Celu", "Sin", "Cos"}
)  # fmt: skip
_PER_ELEMENT = {
    "Softmax": 5,
    "LogSoftmax": 5,
    "LayerNormalization": 8,
    "RMSNormalization": 6,
    "GroupNormalization": 8,
    "InstanceNormalization": 8,
    "BatchNormalization": 2,
}


def _numel(graph: Graph, tensor: str) -> int:
    shape = static_shape(graph, tensor)
    return 0 if shape is None else math.prod(shape)


def _shape(graph: Graph, tensor: str) -> tuple[int, ...]:
    return static_shape(graph, tensor) or ()


def node_flops(graph: Graph, node: Node) -> int:
    """Flops of one node (cached per graph; see ``_node_flops``)."""
    cache = flops_table(graph)
    if node.name not in cache:
        cache[node.name] = _node_flops(graph, node)
    return cache[node.name]


def _node_flops(graph: Graph, node: Node) -> int:
    """A deliberately rough flop estimate; only the overhead term reads it.

    MatMul/Gemm 2*M*N*K (+ M*N bias), Conv 2*out*Cin/group*prod(kernel), reductions one
    per input element, normalisations and softmax a few per element, transcendental
    elementwise ops 4 per element, other elementwise ops 1 per output element, views 0.
    """
    if is_view(node):
        return 0
    out = _numel(graph, node.outputs[0]) if node.outputs else 0
    op = node.op_type
    if op in ("MatMul", "MatMulInteger", "Gemm"):
        a = _shape(graph, node.inputs[0]) if node.inputs else ()
        k = a[-1] if a else 1
        if op == "Gemm" and node.attributes.get("transA", 0) and len(a) >= 2:
            k = a[-2]
        bias = out if op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else 0
        return 2 * out * k + bias
    if op in ("Conv", "ConvTranspose", "ConvInteger"):
        w = _shape(graph, node.inputs[1]) if len(node.inputs) > 1 else ()
        if len(w) < 3:
            return 2 * out
        if op == "ConvTranspose":
            x = _numel(graph, node.inputs[0])
            return 2 * x * w[1] * math.prod(w[2:])
        return 2 * out * w[1] * math.prod(w[2:])
    if is_reduce(node) and op not in _PER_ELEMENT:
        return max(_numel(graph, node.inputs[0]) if node.inputs else 0, out)
    if op in _PER_ELEMENT:
        return _PER_ELEMENT[op] * max(out, _numel(graph, node.inputs[0]) if node.inputs else 0)
    if op in _TRANSCENDENTAL:
        return 4 * out
    return out


def reduced_axes(graph: Graph, node: Node) -> tuple[int, ...]:
    """Axes of input 0 that a reduction must see whole (normalised to be non-negative)."""
    shape = _shape(graph, node.inputs[0]) if node.inputs else ()
    rank = len(shape)
    if rank == 0:
        return ()
    op = node.op_type
    attrs = node.attributes

    def norm(axes: object) -> tuple[int, ...]:
        try:
            vals = [int(a) for a in axes]  # type: ignore[union-attr]
        except TypeError:
            vals = [int(axes)]  # type: ignore[call-overload]
        return tuple(sorted({a % rank for a in vals}))

    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        axis = int(attrs.get("axis", -1 if graph.opset >= 13 else 1)) % rank
        return (axis,) if graph.opset >= 13 else tuple(range(axis, rank))
    if op in ("LayerNormalization", "RMSNormalization"):
        axis = int(attrs.get("axis", -1)) % rank
        return tuple(range(axis, rank))
    if op in ("InstanceNormalization", "GlobalAveragePool", "GlobalMaxPool"):
        return tuple(range(2, rank))
    if op == "GroupNormalization":
        return tuple(range(1, rank))
    if op in ("ArgMax", "ArgMin", "LpNormalization"):
        return norm(attrs.get("axis", 0 if op != "LpNormalization" else -1))
    if op == "MeanVarianceNormalization":
        return norm(attrs.get("axes", (0, 2, 3)))
    axes = attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        t = graph.tensors.get(node.inputs[1])
        if t is not None and t.const_value is not None:
            axes = t.const_value
    if axes is None or (hasattr(axes, "__len__") and len(axes) == 0):  # type: ignore[arg-type]
        if attrs.get("noop_with_empty_axes", 0):
            return ()
        return tuple(range(rank))
    return norm(axes)
