"""The wiring of a graph: every tensor numbered with its producer and consumers, which
nodes are opaque, and an order of the nodes in which each comes after its producers.

Every tensor a graph input, an initializer or a node defines gets an integer id, in that
order (graph inputs [0, n_in), initializers [n_in, n_def), node outputs after):
producers, consumers and flags are then lists indexed by id, one hash per read of a
name. At 2048 layers (2 x 10^5 tensors, 3 x 10^5 reads) each dict or set lookup costs 2x
what it costs at 512 (the tables outgrow the caches: docs/speed.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ruleengine.graph.onnxlite import AttributeProto
from ruleengine.graph.problems import fail

if TYPE_CHECKING:
    import onnx

    from ruleengine.graph.values import AttrInfo

# Domains whose ops we understand; any other domain makes a node opaque.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
CONTROL_FLOW = ("If", "Loop", "Scan")


@dataclass
class Wiring:
    """The tensors of a graph by id (see the module's docstring) and who reads them."""

    ids: dict[str, int]  # name -> id
    names: list[str]  # id -> name
    n_in: int  # ids below: graph inputs
    n_def: int  # ids below (from n_in): initializers; from here on: node outputs
    producer: list[int]  # id -> index of its producer node (-1: none)
    port: list[int]  # id -> output index of that node (-1: none)
    # id -> (node name, input index; -1 for a read by a control-flow body), or None
    consumers: list[list[tuple[str, int]] | None]


@dataclass(frozen=True)
class Reads:
    """What ``read_consumers`` learns about the nodes beside the consumers."""

    hidden: dict[int, list[str]]  # node -> outer names its bodies read
    forward: bool  # every edge from an earlier node to a later one: the file's order
    opaque: list[bool]  # node -> never fused (a body, control flow, unknown domain, ...)


def number_tensors(
    graph_inputs: Iterable[str],
    initializers: Iterable[str],
    outs_l: Sequence[tuple[str, ...]],
    names: Sequence[str],
    where: str,
) -> Wiring:
    """Ids for the graph inputs, the initializers (no graph input is one) and every node
    output, with the producer of each; a tensor with two producers is refused."""
    tid: dict[str, int] = {}
    for t in graph_inputs:
        tid.setdefault(t, len(tid))
    n_in = len(tid)
    for t in initializers:
        tid.setdefault(t, len(tid))
    n_def = len(tid)
    tnames = list(tid)  # id -> name
    prod_node = [-1] * n_def
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
                raise fail(
                    "two-producers",
                    f"tensor {t!r} is produced by node {names[i]!r} and also by {first}",
                    where,
                    "every tensor must have exactly one producer (SSA form)",
                )
            tnames.append(t)
            prod_node.append(i)
            prod_port.append(port)
    return Wiring(tid, tnames, n_in, n_def, prod_node, prod_port, [None] * len(tnames))


def read_consumers(
    wiring: Wiring,
    nodes: tuple[Sequence[tuple[str, ...]], Sequence[str], Sequence[str]],
    attr_l: Sequence[tuple[bytes, ...]],
    attr_info: AttrInfo,
    names: Sequence[str],
    unfused: tuple[Sequence[str], set[str]],
    where: str,
) -> Reads:
    """Fill ``wiring.consumers`` (with the hidden consumers of control-flow bodies) from
    the nodes' (inputs, op types, domains); refuse a dangling input or a node reading its
    own output. ``unfused``: the nodes' names in the model and those that are shared."""
    ins_l, ops_l, dom_l = nodes
    src_names, shared = unfused
    users_of = wiring.consumers
    prod_node = wiring.producer
    hidden: dict[int, list[str]] = {}
    forward = True
    opaque: list[bool] = []
    graph_attrs = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    get_id = wiring.ids.get
    for i in range(len(ops_l)):
        sub_refs: set[str] = set()
        has_body = False
        for key in attr_l[i]:
            if attr_info(key)[1] in graph_attrs:
                for sub in attr_info.bodies(key):
                    has_body = True
                    sub_refs |= outer_refs(sub)
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
                raise fail(
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
                raise fail(
                    "cycle",
                    f"node {names[i]!r} reads its own output {t!r}",
                    where,
                    "ONNX graphs must be acyclic",
                )
            if j > i:
                forward = False
    return Reads(hidden, forward, opaque)


def node_order(
    wiring: Wiring,
    reads: Reads,
    ins_l: Sequence[tuple[str, ...]],
    names: list[str],
    where: str,
) -> tuple[list[int], list[int]]:
    """The nodes in topological order (the file's when it is one) and each node's place
    in it; a cycle is refused."""
    n = len(ins_l)
    if reads.forward:  # Kahn's algorithm picking the lowest index would give the file's order
        order = list(range(n))
        return order, order
    order = toposort(names, *edges_of(ins_l, reads.hidden, wiring.ids.get, wiring.producer))
    if len(order) != n:
        stuck = sorted(set(range(n)) - set(order))
        listed = ", ".join(repr(names[i]) for i in stuck[:6])
        raise fail(
            "cycle",
            f"the graph has a cycle through {len(stuck)} node(s), e.g. {listed}",
            where,
            "ONNX graphs must be acyclic; re-export the model",
        )
    topo = [0] * len(order)  # node -> its place in the order
    for k, i in enumerate(order):
        topo[i] = k
    return order, topo


def outer_refs(g: onnx.GraphProto) -> set[str]:
    """Names a control-flow body reads from the enclosing scope (hidden consumers)."""
    local = {i.name for i in g.input} | {i.name for i in g.initializer}
    refs: set[str] = set()
    for n in g.node:
        for t in n.input:
            if t and t not in local:
                refs.add(t)
        for a in n.attribute:
            for sub in (*([a.g] if a.type == AttributeProto.GRAPH else []), *a.graphs):
                refs |= outer_refs(sub) - local
        local.update(n.output)
    return refs


def toposort(names: list[str], edges: dict[int, set[int]], indeg: list[int]) -> list[int]:
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


def edges_of(
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


def unique_names(
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
