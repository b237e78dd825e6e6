"""Graph -> the Datalog facts a compiled program needs (and nothing more).

pyDatalog costs ~50-75 us per asserted fact, so only typed edges between type sets some
pattern connects, node facts for unconnected single ops, and the ``tin``/``cin`` inputs of
composite node types are produced. Facts are plain tuples; ``backend.py`` asserts them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

from ruleengine.graph.model import Graph, Node
from ruleengine.match.compile import Program
from ruleengine.match.values import const_values
from ruleengine.ops.classes import OPAQUE_MARKER
from ruleengine.ops.composites import const_rtol

Fact = tuple[str, tuple]


# The type of a compile-time node (shape arithmetic, a Transpose of a weight): no pattern
# names it, so a node a compiler folds is never part of a candidate.
COMPILE_TIME_MARKER = "<compile-time>"


def match_type(node: Node) -> str:
    """The type a node matches as: its op type, the opaque marker (only ``@opaque``), or
    the compile-time marker (nothing)."""
    if node.compile_time:
        return COMPILE_TIME_MARKER
    return OPAQUE_MARKER if node.opaque else node.op_type


def build_facts(graph: Graph, prog: Program, only: set[str] | None = None) -> list[Fact]:
    """Every fact of ``prog``'s predicates for ``graph``, in a deterministic order.

    ``only``: the facts whose nodes are all in this set (the memo's window); a shared
    input still counts every reader in the graph."""
    return list(_iter_facts(graph, prog, only))


def _iter_facts(graph: Graph, prog: Program, only: set[str] | None = None) -> Iterator[Fact]:
    nodes = graph.nodes if only is None else [n for n in graph.nodes if n.name in only]
    ntype: dict[str, str]
    if only is None:
        ntype = {n.name: match_type(n) for n in graph.nodes}
    else:
        ntype = _LazyTypes(graph)
    yield from _edge_facts(graph, prog, nodes, ntype, only)
    for pred, types in sorted(prog.node_preds.items()):
        for node in nodes:
            if ntype[node.name] in types:
                yield (pred, (node.name,))
    if prog.tin_types:
        yield from _tin_facts(graph, prog, nodes, ntype, only)
    if prog.cin_types and prog.const_keys:
        yield from _cin_facts(graph, prog, nodes, ntype)


def _edge_facts(
    graph: Graph,
    prog: Program,
    nodes: Sequence[Node],
    ntype: Mapping[str, str],
    only: set[str] | None,
) -> Iterator[Fact]:
    """Typed edges, in topological order of the producer."""
    # opaque nodes also match sets naming their real op type only via @opaque
    by_src: dict[str, list[tuple[str, frozenset[str]]]] = defaultdict(list)
    for pred, (src, dst) in sorted(prog.edge_preds.items()):
        for t in src:
            by_src[t].append((pred, dst))
    if not by_src:
        return
    for node in nodes:
        preds = by_src.get(ntype[node.name])
        if not preds:
            continue
        for out in node.outputs:
            if not out:
                continue
            tensor = graph.tensors.get(out)
            if tensor is None:
                continue
            for consumer, port in tensor.consumers:
                if port < 0 or (only is not None and consumer not in only):
                    continue
                ctype = ntype[consumer]
                for pred, dst in preds:
                    if ctype in dst:
                        yield (pred, (node.name, consumer, port))


def _tin_facts(
    graph: Graph,
    prog: Program,
    nodes: Sequence[Node],
    ntype: Mapping[str, str],
    only: set[str] | None,
) -> Iterator[Fact]:
    """Shared inputs: a tensor read by two or more nodes of the types that share one."""
    names = (
        sorted(graph.tensors)
        if only is None
        else sorted({t for n in nodes for t in n.inputs if t in graph.tensors})
    )
    for name in names:
        tensor = graph.tensors[name]
        if tensor.is_constant:
            continue  # a composite's shared input is an activation, never a weight
        readers = [(c, p) for c, p in tensor.consumers if p >= 0 and ntype[c] in prog.tin_types]
        if len(readers) >= 2:
            for c, p in readers:
                if only is None or c in only:
                    yield ("tin", (c, p, name))


def _cin_facts(
    graph: Graph, prog: Program, nodes: Sequence[Node], ntype: Mapping[str, str]
) -> Iterator[Fact]:
    """Scalar constant operands equal (within the tolerance) to a constant the rules name,
    also read through Identity/Cast (a mixed-precision export casts GELU's 0.5)."""
    rtol = const_rtol()
    for node in nodes:
        if ntype[node.name] not in prog.cin_types:
            continue
        for port, t in enumerate(node.inputs):
            tensor = graph.tensors.get(t) if t else None
            if tensor is None:
                continue
            held = tensor.const_value
            if held is None and tensor.producer is not None and not tensor.is_constant:
                through = const_values(graph, t)  # None unless a pass-through of a constant
                held = tuple(through[0]) if through is not None else None
            if held is None or len(held) != 1:
                continue
            value = held[0]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            for key, want in prog.const_keys.items():
                if abs(value - want) <= rtol * max(abs(value), abs(want)):
                    yield ("cin", (node.name, port, key))


class _LazyTypes(dict):
    """node name -> match type, computed on first use (the window reads few nodes)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        self._graph = graph

    def __missing__(self, name: str) -> str:
        value = self[name] = match_type(self._graph.node(name))
        return value
