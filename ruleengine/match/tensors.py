"""What the checks read about a graph's tensors: who reads them, which are constant.

``readers`` is cached per graph and filled on first read of each tensor (the memo reads
few of a deep stack's tensors); ``subgraph_io`` is a node group's inputs and outputs.
"""

from __future__ import annotations

from ruleengine.graph.model import Graph, Node

_READERS: dict[int, tuple[Graph, dict[str, frozenset[str] | None]]] = {}
_NOT_A_TENSOR = object()


class ReaderTable(dict):
    """Tensor -> the names of the nodes reading it (None: a graph output), made on first
    read of each tensor: with the memo only the window's and the representatives'
    tensors are read, not the 10^5 of a deep stack."""

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        self.tensors = graph.tensors
        self.folded = frozenset(graph.compile_time_nodes)

    def __missing__(self, name: str) -> frozenset[str] | None:
        t = self.tensors[name]  # KeyError: not a tensor of the graph
        folded = self.folded
        got = None if t.is_graph_output else frozenset(c for c, _ in t.consumers if c not in folded)
        self[name] = got
        return got

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default


def readers(graph: Graph) -> ReaderTable:
    """Tensor -> the names of the nodes reading it; None for a graph output (it always
    leaves the subgraph). Compile-time readers (a Shape of a static tensor) are folded,
    not kernels, so they do not make a tensor leave. Cached per graph, each tensor's
    entry made on first read."""
    hit = _READERS.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    table = ReaderTable(graph)
    if len(_READERS) > 8:
        _READERS.clear()
    _READERS[id(graph)] = (graph, table)
    return table


def subgraph_io(graph: Graph, nodes: list[Node]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tensors a node group reads from outside it (in node order), and those it
    produces that are read outside it or are graph outputs."""
    inside = {n.name for n in nodes}
    produced: set[str] = {t for n in nodes for t in n.outputs if t}
    inputs: dict[str, None] = {}
    outputs: list[str] = []
    table = readers(graph)
    missing = _NOT_A_TENSOR
    for n in sorted(nodes, key=lambda n: n.index):
        for t in n.inputs:
            if t and t not in produced:
                inputs[t] = None
        for t in n.outputs:
            if not t:
                continue
            who = table.get(t, missing)
            if who is missing:
                continue  # not a tensor of the graph
            if who is None or not who <= inside:
                outputs.append(t)
    return tuple(inputs), tuple(outputs)


# Ops that hand a constant on as a constant (TorchScript wraps biases in Identity,
# mixed-precision exports Cast them, a tied LM head multiplies by Transpose of the
# embedding table): their output is as constant as their input.
CONST_PASSTHROUGH = frozenset({"Identity", "Cast", "CastLike", "Transpose"})


def is_const_like(graph: Graph, name: str) -> bool:
    """A constant (initializer or Constant output), or Identity/Cast/Transpose of one."""
    for _ in range(16):
        tensor = graph.tensors.get(name)
        if tensor is None:
            return False
        if tensor.is_constant:
            return True
        producer = graph.node(tensor.producer) if tensor.producer else None
        if producer is None or producer.op_type not in CONST_PASSTHROUGH:
            return False
        if not producer.inputs or not producer.inputs[0]:
            return False
        name = producer.inputs[0]  # (CastLike's second input only gives the dtype)
    return False


def const_source(graph: Graph, name: str) -> tuple[str, tuple[Node, ...]] | None:
    """The constant behind tensor ``name`` (an initializer or Constant output, as
    ``is_const_like`` follows it through Identity/Cast/CastLike/Transpose) and the
    pass-through nodes from it to ``name``, in data-flow order; None when ``name`` is no
    constant seen that way."""
    chain: list[Node] = []
    for _ in range(16):
        tensor = graph.tensors.get(name)
        if tensor is None:
            return None
        if tensor.is_constant:
            return name, tuple(reversed(chain))
        producer = graph.node(tensor.producer) if tensor.producer else None
        if producer is None or producer.op_type not in CONST_PASSTHROUGH:
            return None
        if not producer.inputs or not producer.inputs[0]:
            return None
        chain.append(producer)
        name = producer.inputs[0]
    return None


def through_value_key(graph: Graph, name: str) -> tuple | None:
    """A hashable key of the value a pass-through node's output holds (the constant's
    stored values, dtype and shape, and each pass-through op with its attributes): two
    tensors with equal keys hold equal values. None when there is no stored value. The
    repeated-structure memo puts it in a tensor's signature, so layers whose constants
    differ in value behind an Identity/Cast are never matched alike."""
    src = const_source(graph, name)
    if src is None or not src[1]:
        return None
    tensor = graph.tensors[src[0]]
    if tensor.const_value is None:
        return None
    steps = tuple(
        (n.op_type, tuple(sorted((k, repr(v)) for k, v in n.attributes.items()))) for n in src[1]
    )
    return (tensor.const_value, tensor.dtype, tensor.shape, steps)
