"""Node signatures: what the matcher reads about a node and its neighbours, interned.

Two nodes whose neighbourhoods have equal signatures node by node (at equal index
offsets) are matched alike; ``match.classes`` groups them, ``match.memo`` uses that.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ruleengine.graph.model import Graph, Node
from ruleengine.match.facts import match_type
from ruleengine.match.tensors import CONST_PASSTHROUGH, is_const_like, through_value_key

# A tensor read by more than this many nodes is a hub: its readers are not neighbours of
# each other or of its producer (a mask read by 2,048 layers would make every layer one
# neighbourhood); it is referred to by identity instead.
HUB = 8


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


@dataclass
class Structure:
    """Per node (by position in ``graph.nodes``): signature id and neighbours."""

    sig: np.ndarray  # int64, one interned signature per node
    nbrs: list[tuple[int, ...]]  # nodes one hop away (producers, readers, co-readers)
    hubs: frozenset[str]  # tensors with more than HUB readers
    pos: dict[str, int]


def structure(graph: Graph) -> Structure:
    """Every node's signature (interned to an int) and its neighbours.

    Tensor labels and the op-local part of a node (type, attributes, ...) are interned
    to ints first, so a node's key is a small tuple of ints and offsets: one pass over
    the nodes, linear in the graph."""
    nodes = graph.nodes
    pos = {n.name: i for i, n in enumerate(nodes)}
    hubs = frozenset(name for name, t in graph.tensors.items() if len(t.consumers) > HUB)
    get = _tensor_entries(graph, pos, hubs).get
    locals_: dict[tuple, int] = {}
    intern: dict[tuple, int] = {}
    sig = np.empty(len(nodes), dtype=np.int64)
    nbrs: list[tuple[int, ...]] = []
    for i, node in enumerate(nodes):
        near: set[int] = set()
        key = _node_key(i, node, get, near, locals_)
        sig[i] = intern.setdefault(key, len(intern))
        near.discard(i)
        nbrs.append(tuple(sorted(near)))
    return Structure(sig, nbrs, hubs, pos)


def _tensor_entries(graph: Graph, pos: Mapping[str, int], hubs: frozenset[str]) -> dict[str, tuple]:
    """Tensor -> (label id, producer position or -1, producer port, readers as
    ((position, port), ...), hub, reader positions, the producer's output entry)."""
    passthrough = {n.name for n in graph.nodes if n.op_type in CONST_PASSTHROUGH}
    labels: dict[tuple, int] = {}
    tinfo: dict[str, tuple] = {}
    for name, T in graph.tensors.items():
        const_like = T.is_constant or (T.producer in passthrough and is_const_like(graph, name))
        value = T.const_value
        if value is None and const_like and not T.is_constant:
            # the value behind Identity/Cast (rules check it: ``value: 3.0``), so layers
            # whose constants differ there are not matched alike
            value = through_value_key(graph, name)
        if value is not None:
            try:
                hash(value)
            except TypeError:
                value = _freeze(value)
        lab = (
            T.dtype,
            T.shape,
            T.is_initializer,
            T.is_constant,
            T.is_graph_input,
            T.is_graph_output,
            value,
            T.const_foldable,
            const_like,
            T.producer is not None,
            len(T.consumers),
        )
        lid = labels.setdefault(lab, len(labels))
        prod = T.producer
        j = -1 if prod is None else pos[prod]
        readers = tuple([(pos[c], cp) for c, cp in T.consumers])
        tinfo[name] = (
            lid,
            j,
            T.producer_port,
            readers,
            name in hubs,
            tuple([p for p, _ in readers]),
            # the producer's output entry: readers as offsets from it
            (tuple([(p - j, cp) for p, cp in readers]), lid),
        )
    return tinfo


_MISSING = ("?",)


def _node_key(
    i: int, node: Node, get: Callable[[str], tuple | None], near: set[int], locals_: dict
) -> tuple:
    """Node ``i``'s signature key: its op-local id, then its inputs and outputs as index
    offsets and tensor labels. ``near`` gets its neighbours (a hub's readers are not)."""
    ins: list[Any] = []
    for t in node.inputs:
        if not t:
            ins.append(None)
            continue
        info = get(t)
        if info is None:
            ins.append(_MISSING)
            continue
        lid, j, port, readers, hub, rpos, _out = info
        if hub:
            ins.append(("a", j, port, lid) if j >= 0 else ("A", t, lid))
            continue
        near.update(rpos)
        if j >= 0:
            near.add(j)
            ins.append((j - i, port, lid))
        else:
            ins.append(("f", tuple([(p - i, cp) for p, cp in readers]), lid))
    outs: list[Any] = []
    for t in node.outputs:
        if not t:
            outs.append(None)
            continue
        info = get(t)
        if info is None:
            outs.append(_MISSING)
            continue
        if info[4]:
            outs.append(("h", i, info[0]))  # a hub's producer is one of a kind
        else:
            near.update(info[5])
            outs.append(info[6])
    return (_local_id(node, locals_), tuple(ins), tuple(outs))


def _local_id(node: Node, locals_: dict[tuple, int]) -> int:
    """The interned op-local part of a node: match type, op type, domain, flags, attributes."""
    attrs = tuple(node.attributes.items())
    try:
        local = (
            match_type(node),
            node.op_type,
            node.domain,
            node.opaque,
            node.compile_time,
            attrs,
        )
        return locals_.setdefault(local, len(locals_))
    except TypeError:
        local = local[:5] + (_freeze(node.attributes),)
        return locals_.setdefault(local, len(locals_))


class PendingStructure:
    """``structure(graph)`` computed in a forked child (``procs``), when one may
    be forked; else here, on ``result``. The child sends back the signatures, the
    neighbours and the hubs (pickled); the name -> position map is rebuilt here (cheaper
    than its transfer)."""

    def __init__(self, graph: Graph) -> None:
        from ruleengine.procs import Forked, forkable

        self._graph = graph
        self._child = Forked(_structure_bytes, graph) if forkable(2) else None

    def result(self) -> Structure:
        if self._child is None:
            return structure(self._graph)
        sig, nbrs, hubs = pickle.loads(self._child.result())
        self._child = None
        return Structure(sig, nbrs, hubs, {n.name: i for i, n in enumerate(self._graph.nodes)})


def _structure_bytes(graph: Graph) -> bytes:
    st = structure(graph)
    return pickle.dumps((st.sig, st.nbrs, st.hubs), protocol=pickle.HIGHEST_PROTOCOL)
