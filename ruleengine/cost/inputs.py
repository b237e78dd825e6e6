"""Which external inputs of a group become inputs of the fused kernel (``max_fused_inputs``
counts them): constants folded into attributes or immediates, aliases of one constant and
a BatchNormalization folded into its Conv take no slot."""

from __future__ import annotations

from collections.abc import Sequence

from ruleengine.cost.traffic import GroupIO
from ruleengine.graph.model import Graph, Node

_INDEX_DTYPES = frozenset({"int64", "int32"})


def kernel_inputs(graph: Graph, io: GroupIO) -> tuple[str, ...]:
    """External inputs that become inputs of the fused kernel.

    Constant scalars (an epsilon, the 0.5 of GELU) become immediates of the kernel and
    constant integer tensors (axes, shapes; also those computed from constants and static
    shapes, which the compiler folds) become attributes; neither takes an input slot.
    Activations and weights do; aliases of one constant (``constant_root``) take one.
    An inference BatchNormalization folded into the Conv before it (``folded_bn_inputs``)
    takes none, or one for the bias where the Conv has none.
    """
    out = []
    roots: set[str] = set()
    folded = folded_bn_inputs(graph, io.nodes)
    for t in io.inputs:
        if t in folded:
            continue
        tensor = graph.tensors.get(t)
        if tensor is not None and (
            tensor.is_constant or tensor.is_initializer or tensor.const_foldable
        ):
            if (tensor.numel or 0) <= 1 or tensor.dtype in _INDEX_DTYPES:
                continue
            root = constant_root(graph, t)
            if root in roots:  # another alias of a constant already read: one buffer
                continue
            roots.add(root)
        out.append(t)
    return tuple(out)


def folded_bn_inputs(graph: Graph, nodes: Sequence[Node]) -> frozenset[str]:
    """Constant inputs of the group's inference BatchNormalizations that a compiler folds
    into the Conv before them: scale, mean and variance (and the bias, where the Conv has
    one) become the Conv's weight and bias, one buffer each, as when the exporter folds
    them (TorchScript's keepbn export keeps them). Only where the BatchNormalization
    reads a Conv of the group that nothing else reads, has one output (inference) and
    constant statistics."""
    inside = {n.name for n in nodes}
    out: set[str] = set()
    for n in nodes:
        if n.op_type != "BatchNormalization" or len(n.inputs) < 5 or len(n.outputs) != 1:
            continue
        x = graph.tensors.get(n.inputs[0])
        if x is None or x.producer not in inside or x.is_graph_output:
            continue
        conv = graph.node(x.producer)
        if conv.op_type != "Conv" or [c for c, _ in x.consumers] != [n.name]:
            continue
        stats = n.inputs[1:5]
        if not all(
            (s := graph.tensors.get(t)) is not None
            and (s.is_constant or s.is_initializer or s.const_foldable)
            for t in stats
        ):
            continue
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        out.update(stats if has_bias else (stats[0], stats[2], stats[3]))
    return frozenset(out)


def constant_root(graph: Graph, t: str) -> str:
    """The constant that ``t`` aliases through Identity nodes, else ``t`` itself.

    Exporters write an Identity per tied or repeated parameter (TorchScript: one per
    module reading a shared weight, or a value equal to another's), where others read
    the one initializer directly. The Identity is folded at compile time and every alias
    is the same buffer, so a kernel reading two aliases reads one input: counted once,
    the group fits ``max_fused_inputs`` whichever way the exporter spelled it."""
    while True:
        tensor = graph.tensors.get(t)
        if tensor is None or tensor.producer is None:
            return t
        node = graph.node(tensor.producer)
        if node.op_type != "Identity" or not node.inputs or not node.inputs[0]:
            return t
        src = graph.tensors.get(node.inputs[0])
        if src is None or not (src.is_constant or src.is_initializer or src.const_foldable):
            return t
        t = node.inputs[0]
