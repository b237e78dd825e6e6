"""Coverage: how much of a model's fusable intermediate traffic a set of groups captures.

Defined once here; the coverage bench (bench/coverage.py) and ``autofusion suggest``
both read it.

- An *edge* is a (producer node, consumer node, tensor) triple where the tensor is
  computed at run time: it depends on a graph input and is not compile-time (weights,
  constants and everything a compiler folds from them and from static shapes are not
  intermediates). View ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity) move no data,
  so an edge is traced through them to the node that really produced the storage, and
  edges into view ops are not counted on their own.
- An edge is *fusable* unless both ends are cube ops (MatMul, Gemm, Conv, ...) or either
  end is opaque (control flow and the other ``@opaque`` ops, Shape-like ops whose output
  is metadata, ops of unknown domains).
- Its bytes are the tensor's size; it is *captured* when both ends are in the same group.
  Coverage = captured bytes / fusable bytes.

Ceilings of the traffic reduction (1 - HBM after / HBM before), by the cost model:
- *fuse-everything*: every fusable edge internal to a group (the components of the
  fusable edges, with the views they pass through, each fused as one group);
- *epilogue-only*: the same without the edges into a cube op (what conv/matmul kernels
  with fused epilogues and vector-only kernels can reach).
Neither ceiling looks at UB or convexity: they bound what any rule set can reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ruleengine.graph.model import Graph, Node

# Ops whose output is metadata about a tensor (or a constant), never streamed data.
SHAPE_LIKE = frozenset({"Shape", "Size", "ConstantOfShape", "Constant", "Range", "EyeLike"})

OPAQUE, CUBE, VIEW, VECTOR = "opaque", "cube", "view", "vector"


@dataclass(frozen=True)
class Edge:
    """One fusable producer -> consumer edge; ``via`` are the views it passes through."""

    producer: str
    consumer: str
    tensor: str
    nbytes: int
    via: tuple[str, ...] = ()


@dataclass(frozen=True)
class FusableEdges:
    """Every fusable edge of a graph, and how many edges were skipped for unknown size."""

    edges: tuple[Edge, ...]
    unknown: int

    @property
    def fusable_bytes(self) -> int:
        return sum(e.nbytes for e in self.edges)


@dataclass(frozen=True)
class CoverageFigures:
    """The coverage of one set of groups on one graph (bytes are fusable-edge bytes)."""

    fusable_bytes: int
    captured_bytes: int
    unknown_edges: int

    @property
    def coverage(self) -> float:
        return self.captured_bytes / self.fusable_bytes if self.fusable_bytes else 1.0


def node_kind(node: Node, classes: Mapping[str, frozenset[str]] | None = None) -> str:
    """opaque, cube, view or vector, as the metric sees a node."""
    if classes is None:
        from ruleengine.ops.classes import op_classes

        classes = op_classes()
    if (
        node.opaque
        or node.domain not in ("", "ai.onnx")
        or node.op_type in classes.get("@opaque", frozenset())
        or node.op_type in SHAPE_LIKE
    ):
        return OPAQUE
    if node.op_type in classes.get("@cube", frozenset()):
        return CUBE
    if node.op_type in classes.get("@view", frozenset()):
        return VIEW
    return VECTOR


def node_kinds(graph: Graph) -> dict[str, str]:
    """Node name -> its kind (see ``node_kind``)."""
    from ruleengine.ops.classes import op_classes

    classes = op_classes()
    return {n.name: node_kind(n, classes) for n in graph.nodes}


def runtime_tensors(graph: Graph) -> set[str]:
    """Tensors computed at run time: they depend on a graph input and no compiler can
    fold them (a Shape of a static tensor, shape arithmetic, a Cast of a weight fold).
    A control-flow node also depends on what its bodies read from the enclosing graph
    (consumer port -1): an If whose condition folds still computes from run-time data."""
    live = {t for t in graph.inputs if not graph.tensor(t).is_initializer}
    body_reads: dict[str, list[str]] = {}
    for name, tensor in graph.tensors.items():
        for consumer, port in tensor.consumers:
            if port < 0:
                body_reads.setdefault(consumer, []).append(name)
    for node in graph.nodes:  # topological order
        reads = body_reads.get(node.name, ())
        if any(t in live for t in node.inputs if t) or any(t in live for t in reads):
            live.update(t for t in node.outputs if t and not graph.tensor(t).const_foldable)
    return live


def compile_time_nodes(graph: Graph) -> frozenset[str]:
    """Nodes none of whose outputs is a run-time tensor: they are folded, never kernels."""
    live = runtime_tensors(graph)
    return frozenset(n.name for n in graph.nodes if not any(t in live for t in n.outputs if t))


def fusable_edges(graph: Graph) -> FusableEdges:
    """Every fusable producer -> consumer edge of ``graph`` (see the module docstring)."""
    kinds = node_kinds(graph)
    live = runtime_tensors(graph)
    nodes = {n.name: n for n in graph.nodes}

    def root_producer(tensor: str) -> tuple[str | None, tuple[str, ...]]:
        """The non-view node whose output storage ``tensor`` is, and the views between."""
        views: list[str] = []
        while True:
            producer = graph.tensor(tensor).producer
            if producer is None:
                return None, ()
            node = nodes[producer]
            if kinds[producer] != VIEW or not node.inputs or not node.inputs[0] or len(views) > 64:
                return producer, tuple(reversed(views))
            views.append(producer)
            tensor = node.inputs[0]

    edges: list[Edge] = []
    unknown = 0
    for node in graph.nodes:
        ck = kinds[node.name]
        if ck in (VIEW, OPAQUE):
            continue
        for t in dict.fromkeys(x for x in node.inputs if x):
            if t not in live:
                continue
            p, via = root_producer(t)
            if p is None:
                continue
            pk = kinds[p]
            if pk == OPAQUE or pk == ck == CUBE:
                continue
            size = graph.tensor(t).nbytes
            if size is None:
                unknown += 1
                continue
            edges.append(Edge(p, node.name, t, size, via))
    return FusableEdges(tuple(edges), unknown)


def measure(graph: Graph, groups: Iterable[Iterable[str]], edges: FusableEdges | None = None):
    """Coverage of ``groups`` (node-name sets, disjoint) on ``graph``."""
    edges = fusable_edges(graph) if edges is None else edges
    group_of = {n: i for i, g in enumerate(groups) for n in g}
    captured = sum(
        e.nbytes
        for e in edges.edges
        if e.producer in group_of and group_of.get(e.consumer) == group_of[e.producer]
    )
    return CoverageFigures(edges.fusable_bytes, captured, edges.unknown)


def hbm_bytes(graph: Graph) -> int:
    """The cost model's HBM traffic of the unfused graph (every run-time node its own
    kernel; compile-time nodes are folded and move nothing)."""
    from ruleengine.cost.traffic import group_io, traffic

    folded = compile_time_nodes(graph)
    kernels = (n.name for n in graph.nodes if n.name not in folded)
    return traffic(graph, group_io(graph, kernels)).bytes_before


def _components(nodes: Sequence[str], links: Iterable[tuple[str, ...]]) -> list[list[str]]:
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for link in links:
        first = find(link[0])
        for other in link[1:]:
            r = find(other)
            if r != first:
                parent[r] = first
    out: dict[str, list[str]] = {}
    for n in nodes:
        out.setdefault(find(n), []).append(n)
    return [g for g in out.values() if len(g) > 1]


def ceiling_saved(graph: Graph, edges: FusableEdges, *, epilogue_only: bool = False) -> int:
    """HBM bytes saved when every fusable edge (or every one not into a cube op) is made
    internal: its connected components, with the views on their edges, as groups."""
    from ruleengine.cost.traffic import group_io, traffic

    kinds = node_kinds(graph)
    links = [
        (e.producer, *e.via, e.consumer)
        for e in edges.edges
        if not (epilogue_only and kinds[e.consumer] == CUBE)
    ]
    saved = 0
    for group in _components([n.name for n in graph.nodes], links):
        t = traffic(graph, group_io(graph, group))
        saved += t.bytes_before - t.bytes_after
    return saved


@dataclass(frozen=True)
class Ceilings:
    """Traffic-reduction ceilings of a graph (fractions of the unfused HBM traffic)."""

    hbm_before: int
    fuse_everything: float
    epilogue_only: float


def ceilings(graph: Graph, edges: FusableEdges | None = None) -> Ceilings:
    """Both traffic-reduction ceilings of ``graph`` (see the module docstring)."""
    edges = fusable_edges(graph) if edges is None else edges
    before = hbm_bytes(graph)

    def frac(saved: int) -> float:
        return saved / before if before else 0.0

    return Ceilings(
        before,
        frac(ceiling_saved(graph, edges)),
        frac(ceiling_saved(graph, edges, epilogue_only=True)),
    )
