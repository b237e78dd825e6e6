"""Matching once per repeated structure: the repeated-layer memo.

A decoder stack repeats one layer hundreds of times; matching every copy finds the same
bindings under other names. Here every node gets a *signature*: its op type, domain,
attributes, match type, and for each input and output tensor its dtype, shape, constness
(also through Identity/Cast), const value, graph input/output flags, consumer count and
*where its neighbours are*, as index offsets (the producer of an input is 7 nodes
before, the readers of an output are 2 and 9 nodes after). Two nodes ``r`` and
``v = r + d`` whose neighbourhoods of radius ``R`` have equal signatures node by node
(node ``x`` near ``r`` and node ``x + d`` near ``v``) have isomorphic neighbourhoods
under the translation ``x -> x + d``, everything the matcher reads included. Each
clause anchors its bindings at one of its nodes, a *centre* of the clause (the node
with the least farthest distance to the others, over the links its facts state; not a
fan-out sibling, whose place in a row follows the node names), and ``R`` is the largest
such farthest distance over the rules' clauses, plus one hop for the Python-side checks
(consumers of outputs, producers of inputs): a chain of 15 ops needs 8 hops from its
middle where it needed 15 from its first op, so fewer layers near the ends of a stack
differ within ``R`` and fewer representatives and a smaller window remain. So every
binding anchored at ``v`` is the translation of a binding anchored at ``r``, with the
same check outcome, and vice versa.

How: a Weisfeiler-Lehman colouring of ``R`` rounds over the signatures groups nodes into
classes (cheap, numpy); within a class, each member's neighbourhood is *verified*
against the representative's (signature equality at every offset of the ball, numpy);
a member that fails becomes a representative of its own. pyDatalog then runs on the
facts of the union of the representatives' balls only, the bindings anchored at each
representative are built and checked in Python as before, and each member's bindings
are the representative's, translated. The merged result is exactly the unmemoised one
(same candidates, same near misses, same order; ``tests/match/test_memo.py``); a near
miss's reason (it names nodes) is computed on first read. Keys are ordered and
de-duplicated as rows of name ranks (numpy), and a record is made for each winner only.

Where the translation cannot be trusted, the memo steps aside rule by rule: a rule whose
clauses have a part not connected to the anchor, or that reads a fact through a *hub*
tensor (more than ``HUB`` readers, e.g. a mask computed once and read by every layer,
whose edges would join far-apart layers in one binding), is matched on the whole graph
as before. A graph with little repetition (more representatives than half the nodes)
is matched the plain way too.
"""

from __future__ import annotations

import pickle
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np

from ruleengine.graph.model import Graph
from ruleengine.match.compile import PAD, Concrete, Program, compile_rule_set
from ruleengine.match.facts import match_type
from ruleengine.match.model import Candidate, MatchResult, NearMiss, TwinMap
from ruleengine.ops.model import OpAlias
from ruleengine.records import LazyTuple
from ruleengine.rules.model import RuleSet

# A tensor read by more than this many nodes is a hub: its readers are not neighbours of
# each other or of its producer (a mask read by 2,048 layers would make every layer one
# neighbourhood); it is referred to by identity instead.
HUB = 8
# Below this many nodes the memo costs more than it saves (classes, verification).
MEMO_FROM_NODES = 3000
# The memo is given up when the representatives' balls cover more than this share of
# the graph (little repetition: plain matching is cheaper).
MAX_COVER = 0.5


# ---------------------------------------------------------------- rule radius


def _clause_links(conc: Concrete) -> tuple[tuple[str, ...], list[list[int]]]:
    """The clause's head variables and, per variable, the variables its facts link it
    to (edges, and composite nodes sharing an input), as indices."""
    head = conc.head_vars()
    at = {v: k for k, v in enumerate(head)}
    adj: list[set[int]] = [set() for _ in head]

    def join(a: str, b: str) -> None:
        i, j = at[a], at[b]
        adj[i].add(j)
        adj[j].add(i)

    for link in conc.links:
        join(conc.slots[link.src].out_var, conc.slots[link.dst].entry_var)
    for slot in conc.slots:
        if slot.form is None:
            continue
        var = dict(zip((n.id for n in slot.form.nodes), slot.node_vars(), strict=True))
        shared: dict[str, list[str]] = {}
        for n in slot.form.nodes:
            for r in n.inputs:
                if r.kind == "node":
                    join(var[r.name], var[n.id])
                elif r.kind == "external":
                    shared.setdefault(r.name, []).append(var[n.id])
        for readers in shared.values():
            for a in readers[1:]:
                join(readers[0], a)
    return head, [sorted(x) for x in adj]


def _distances(adj: Sequence[Sequence[int]], root: int) -> list[int]:
    """Hops from ``root`` to every variable (-1: not connected)."""
    dist = [-1] * len(adj)
    dist[root] = 0
    queue = deque([root])
    while queue:
        v = queue.popleft()
        for w in adj[v]:
            if dist[w] < 0:
                dist[w] = dist[v] + 1
                queue.append(w)
    return dist


def clause_radius(conc: Concrete) -> int | None:
    """Hops from the clause's first head node to its farthest node, over the links the
    clause's facts state (edges, and composite nodes sharing an input); None when some
    node is not connected to it."""
    head, adj = _clause_links(conc)
    if not head:
        return None
    dist = _distances(adj, 0)
    return None if min(dist) < 0 else max(dist)


def clause_anchor(conc: Concrete, avoid: Iterable[int] = ()) -> tuple[int, int] | None:
    """(head position, radius): the head node a binding of this clause is anchored at,
    and the hops from it to the clause's farthest node. The anchor is a centre of the
    clause (least farthest distance; ties: the earliest position), so a chain of 15 ops
    has radius 7, not 14: the memo verifies and windows balls of that radius. ``avoid``:
    positions not to anchor at (fan-out siblings, whose order in a row changes with
    the node names); when the first head node is one, it is the anchor, as before.
    None when some node is not connected to the others."""
    head, adj = _clause_links(conc)
    if not head:
        return None
    shape = (tuple(map(tuple, adj)), frozenset(avoid))
    hit = _ANCHORS.get(shape, _ANCHORS)
    if hit is not _ANCHORS:
        return hit  # type: ignore[return-value]
    ecc = _eccentricities(adj)
    if ecc is None:
        _ANCHORS[shape] = None
        return None
    banned = shape[1]
    best = (ecc[0], 0)
    if 0 not in banned:
        best = min((e, k) for k, e in enumerate(ecc) if k not in banned)
    _ANCHORS[shape] = got = (best[1], best[0])
    return got


def _eccentricities(adj: Sequence[Sequence[int]]) -> list[int] | None:
    """Each variable's farthest hop to another (all at once: after k rounds, ``reach[v]``
    is the bit set of the variables within k hops of v); None when not connected."""
    n = len(adj)
    full = (1 << n) - 1
    reach = [1 << v for v in range(n)]
    ecc = [0] * n
    left = {v for v in range(n) if reach[v] != full}
    level = 0
    while left:
        level += 1
        grown = list(reach)
        for v in left:
            r = reach[v]
            for u in adj[v]:
                r |= reach[u]
            grown[v] = r
        if all(grown[v] == reach[v] for v in left):
            return None  # no longer growing: some variable is not connected
        reach = grown
        for v in [v for v in left if reach[v] == full]:
            ecc[v] = level
            left.discard(v)
    return ecc


# clause shape (links, positions to avoid) -> clause_anchor's answer: the 3,000 clauses of
# the bundled rules have a few hundred shapes
_ANCHORS: dict[tuple, tuple[int, int] | None] = {}


def _rule_preds(prog: Program, rule_name: str) -> set[str]:
    """Every fact predicate a rule's clauses read, through shared forms and cores."""
    out: set[str] = set()
    todo = [lit for _, lits in prog.rule_clauses[rule_name] for lit in lits]
    seen: set[str] = set()
    while todo:
        pred, _args = todo.pop()
        if pred in seen:
            continue
        seen.add(pred)
        if pred.startswith("f_") and pred[2:] in prog.form_calls:
            todo.extend(prog.form_calls[pred[2:]][1])
        elif pred.startswith("k_") and prog.cores.get(pred[2:]) is not None:
            todo.extend(prog.cores[pred[2:]][1])  # type: ignore[index]
        else:
            out.add(pred)
    return out


# ---------------------------------------------------------------- signatures


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
    from ruleengine.match.matcher import _CONST_PASSTHROUGH, is_const_like

    nodes = graph.nodes
    pos = {n.name: i for i, n in enumerate(nodes)}
    tensors = graph.tensors
    hubs = frozenset(name for name, t in tensors.items() if len(t.consumers) > HUB)
    passthrough = {n.name for n in nodes if n.op_type in _CONST_PASSTHROUGH}

    # tensor -> (label id, producer position or -1, producer port, readers as
    # ((position, port), ...), hub)
    labels: dict[tuple, int] = {}
    tinfo: dict[str, tuple] = {}
    for name, T in tensors.items():
        const_like = T.is_constant or (T.producer in passthrough and is_const_like(graph, name))
        value = T.const_value
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

    locals_: dict[tuple, int] = {}
    intern: dict[tuple, int] = {}
    sig = np.empty(len(nodes), dtype=np.int64)
    nbrs: list[tuple[int, ...]] = []
    missing = ("?",)
    get = tinfo.get
    for i, node in enumerate(nodes):
        near: set[int] = set()
        ins: list[Any] = []
        for t in node.inputs:
            if not t:
                ins.append(None)
                continue
            info = get(t)
            if info is None:
                ins.append(missing)
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
                outs.append(missing)
                continue
            if info[4]:
                outs.append(("h", i, info[0]))  # a hub's producer is one of a kind
            else:
                near.update(info[5])
                outs.append(info[6])
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
            lk = locals_.setdefault(local, len(locals_))
        except TypeError:
            local = local[:5] + (_freeze(node.attributes),)
            lk = locals_.setdefault(local, len(locals_))
        key = (lk, tuple(ins), tuple(outs))
        sig[i] = intern.setdefault(key, len(intern))
        near.discard(i)
        nbrs.append(tuple(sorted(near)))
    return Structure(sig, nbrs, hubs, pos)


class _PendingStructure:
    """``structure(graph)`` computed in a forked child (``graph.forked``), when one may
    be forked; else here, on ``result``. The child sends back the signatures, the
    neighbours and the hubs (pickled); the name -> position map is rebuilt here (cheaper
    than its transfer)."""

    def __init__(self, graph: Graph) -> None:
        from ruleengine.graph.forked import Forked, forkable

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


# ---------------------------------------------------------------- classes


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def colours(st: Structure, rounds: int) -> np.ndarray:
    """Weisfeiler-Lehman colours after ``rounds`` rounds (neighbours weighted by their
    index offset, so the colouring respects translations)."""
    n = len(st.nbrs)
    src = np.fromiter((i for i, nb in enumerate(st.nbrs) for _ in nb), dtype=np.int64)
    dst = np.fromiter((j for nb in st.nbrs for j in nb), dtype=np.int64)
    with np.errstate(over="ignore"):
        salt = _mix((dst - src).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
        col = _mix(st.sig.astype(np.uint64) + np.uint64(1))
        has = np.flatnonzero(
            np.diff(np.concatenate(([0], np.bincount(src, minlength=n).cumsum()))) > 0
        )
        starts = np.searchsorted(src, has)
        for _ in range(rounds):
            contrib = _mix(col[dst] + salt)
            acc = np.zeros(n, dtype=np.uint64)
            if len(contrib):
                acc[has] = np.add.reduceat(contrib, starts)
            col = _mix(col * np.uint64(31) + acc)
    return col


def ball(st: Structure, root: int, radius: int) -> list[int]:
    """Nodes within ``radius`` hops of ``root`` (breadth first, sorted)."""
    seen = {root}
    frontier = [root]
    nbrs = st.nbrs
    for _ in range(radius):
        nxt = []
        for v in frontier:
            for w in nbrs[v]:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        if not nxt:
            break
        frontier = nxt
    return sorted(seen)


@dataclass
class Classes:
    """Every node's representative (itself for a representative) and offset to it."""

    rep: np.ndarray  # int64: representative of each node
    reps: np.ndarray  # sorted representatives
    radius: int  # verified ball radius (rows radius + 1)


def classify(st: Structure, radius: int) -> Classes:
    """Group nodes whose radius-``radius`` neighbourhoods are translations of each other
    (verified node by node; a member that fails is its own representative)."""
    n = len(st.nbrs)
    col = colours(st, radius)
    order = np.lexsort((np.arange(n), col))
    sorted_col = col[order]
    bounds = np.flatnonzero(np.diff(sorted_col)) + 1
    rep = np.arange(n, dtype=np.int64)
    sig = st.sig
    for members in np.split(order, bounds):
        if len(members) < 2:
            continue
        r = int(members[0])  # lowest index (lexsort by index within a colour)
        offs = np.asarray(ball(st, r, radius), dtype=np.int64) - r
        others = members[1:].astype(np.int64)
        idx = others[:, None] + offs[None, :]
        inside = ((idx >= 0) & (idx < n)).all(axis=1)
        ok = np.zeros(len(others), dtype=bool)
        good = others[inside]
        if len(good):
            ok[inside] = (sig[idx[inside]] == sig[r + offs][None, :]).all(axis=1)
        rep[others[ok]] = r
    reps = np.flatnonzero(rep == np.arange(n))
    return Classes(rep, reps, radius)


# ---------------------------------------------------------------- near misses


class _MappedNearMiss(NearMiss):
    """A near miss translated from a representative's: the code is known; the reason
    (it names nodes and tensors) is computed on first read by checking the binding."""

    __slots__ = ("_redo", "_text")

    def __init__(self, candidate: Candidate, code: str, redo: tuple) -> None:
        # ``redo``: (graph, rule, clause, aliases, plan), shared by the translations of
        # one outcome; the row's node names are read from the candidate (``_o``, ``_v``)
        put = object.__setattr__
        put(self, "candidate", candidate)
        put(self, "code", code)
        put(self, "_redo", redo)

    @property  # type: ignore[override]
    def reason(self) -> str:
        text = getattr(self, "_text", None)
        if text is None:
            c = self.candidate
            o, v = c._o, c._v  # type: ignore[attr-defined]
            names = o.site[1]
            graph, rule, conc, aliases, plan = self._redo
            text = _recheck(graph, rule, conc, [names[v + k] for k in o.offs], aliases, plan)
            object.__setattr__(self, "_text", text)
        return text


def _recheck(graph, rule, conc, names, aliases, plan) -> str:
    from ruleengine.match.matcher import _build, _check, _nothing_per_op, _Reject

    lean = conc.single_nodes and _nothing_per_op(plan)
    cand, bindings = _build(graph, rule, conc, list(names), lean=lean)
    try:
        _check(graph, rule, conc, cand, bindings, aliases, plan)
    except _Reject as rej:
        return rej.reason
    raise AssertionError(f"memo: {rule.name} binding {names} is no near miss")  # pragma: no cover


# ---------------------------------------------------------------- matching


def _sibling_groups(prog: Program, rule_name: str, conc: Concrete) -> tuple[tuple[int, ...], ...]:
    """Row positions (1 + head position) of fan-out siblings Datalog binds in ascending
    name order, one group per op."""
    from ruleengine.match.compile import _overlapping_slots

    linked = {(link.src, link.dst) for link in conc.links}
    if not any(
        (a, b) not in linked
        for idx in conc.slots_by_op.values()
        for a, b in zip(idx, idx[1:], strict=False)
    ):
        return ()  # every copy of a repeated op reads the one before: no fan-out siblings
    head = conc.head_vars()
    groups: dict[int, set[int]] = {}
    for a, b, test in _overlapping_slots(prog, rule_name, f"x('{conc.combo}')"):
        if test != "<":
            continue
        i, j = head.index(a), head.index(b)
        op = next(s.op for s in conc.slots if s.form is None and s.var == a)
        groups.setdefault(op, set()).update((1 + i, 1 + j))
    return tuple(tuple(sorted(g)) for _, g in sorted(groups.items()))


def _sibling_order(label: np.ndarray, vs: np.ndarray, o: _Outcome, groups: tuple) -> list[bool]:
    """Per translation ``v`` of ``o``: whether its fan-out siblings are in name order."""
    ok = np.ones(len(vs), dtype=bool)
    for g in groups:
        for k in range(len(g) - 1):
            a = label[vs + o.offs[g[k] - 1]]
            b = label[vs + o.offs[g[k + 1] - 1]]
            ok &= (a < b).astype(bool)
    return ok.tolist()


def _undercut(outs: list[_Outcome], sibs: Mapping[str, tuple]) -> list[_Outcome]:
    """``outs`` without the outcomes that lose, at the representative and at every
    member alike, to another outcome of the same representative: two outcomes with the
    same offsets in key order, alternative and kind (candidate or near miss) give the
    same key at every member, and the row that comes first wins there; when their
    clauses (combos) differ, the combo decides, whatever the names. Outcomes with
    fan-out siblings (rows re-ordered per member) are all kept."""
    groups: dict[tuple, list[_Outcome]] = {}
    for o in outs:
        groups.setdefault((o.flat, o.alternative, o.code is None), []).append(o)
    if len(groups) == len(outs):
        return outs
    keep: set[int] = set()
    for group in groups.values():
        combos = [o.combo for o in group]
        if len(group) == 1 or len(set(combos)) < len(combos) or any(sibs[c] for c in combos):
            keep.update(id(o) for o in group)
        else:
            keep.add(id(min(group, key=lambda o: o.combo)))
    return [o for o in outs if id(o) in keep]


class _Translated(Candidate):
    """A representative's candidate translated onto a member: key and nodes are known;
    bindings, inputs and outputs are spelled out on first read (few stages read them).
    ``_o`` is the outcome it translates (which knows the graph and the node names);
    the member it is translated onto (``_v``) follows from its first node's position,
    so no int object is kept per record (10^5-10^6 on a stack)."""

    __slots__ = ("_o", "_spelled")
    # ``nodes`` reads the ``_nodes`` slot (always set here) directly, not through the
    # base class's property: every stage reads it, 10^6 times on a stack
    nodes = Candidate._nodes  # type: ignore[assignment]

    @classmethod
    def make(cls, key: tuple, o: _Outcome) -> _Translated:
        """The translation of ``o`` whose key is ``key`` (made without ``__init__``: one
        per translated record), for an outcome whose ``site`` is set. Its node set is
        made when read, not kept (~1 KB a record); the key tuple is not kept either
        (64 B a record): ``key`` makes it when read."""
        obj = object.__new__(cls)
        put = object.__setattr__
        put(obj, "rule", key[0])
        put(obj, "alternative", key[2])
        put(obj, "_nodes", key[1])
        put(obj, "_o", o)
        return obj

    @classmethod
    def make_nodes(cls, rule: str, nodes: tuple, alternative: int, o: _Outcome) -> _Translated:
        """``make((rule, nodes, alternative), o)`` without the key tuple."""
        obj = object.__new__(cls)
        put = object.__setattr__
        put(obj, "rule", rule)
        put(obj, "alternative", alternative)
        put(obj, "_nodes", nodes)
        put(obj, "_o", o)
        return obj

    @property
    def _v(self) -> int:
        """The member this translates the representative's binding onto."""
        o = self._o
        return o.site[2][self._nodes[0]] - o.flat[0]  # type: ignore[index]

    def _spell(self) -> tuple:
        got = getattr(self, "_spelled", None)
        if got is None:
            o, v = self._o, self._v
            graph, names, _pos = o.site
            nodes = graph.nodes
            got = (
                tuple(tuple(names[v + k] for k in g) for g in o.groups),
                tuple(nodes[v + k].inputs[p] for k, p in o.inputs),
                tuple(nodes[v + k].outputs[q] for k, q in o.outputs),
            )
            object.__setattr__(self, "_spelled", got)
        return got

    @property  # type: ignore[override]
    def bindings(self) -> tuple[tuple[str, ...], ...]:
        return self._spell()[0]

    @property  # type: ignore[override]
    def inputs(self) -> tuple[str, ...]:
        return self._spell()[1]

    @property  # type: ignore[override]
    def outputs(self) -> tuple[str, ...]:
        return self._spell()[2]


def _reorder(row: tuple, groups: tuple[tuple[int, ...], ...]) -> tuple:
    out = list(row)
    for g in groups:
        for k, name in zip(g, sorted(row[k] for k in g), strict=True):
            out[k] = name
    return tuple(out)


@dataclass
class _Outcome:
    """A representative's binding: its row as offsets, and what checking it gave."""

    anchor: int  # the representative
    combo: str
    offs: tuple[int, ...]  # row node positions minus the representative's
    candidate: Candidate  # the representative's own
    code: str | None  # None: a candidate; else the near-miss code
    reason: str | None
    groups: tuple[tuple[int, ...], ...]  # bindings as offsets
    inputs: tuple[tuple[int, int], ...]  # (reader offset, input port)
    outputs: tuple[tuple[int, int], ...]  # (producer offset, output port)
    flat: tuple[int, ...] = ()  # the groups' offsets in a row (the candidate's nodes)
    alternative: int = 0
    # (graph, node names by position, position by name): where its translations spell
    # their names
    site: tuple[Graph, Sequence[str], Mapping[str, int]] | None = None

    def __post_init__(self) -> None:
        self.flat = tuple(k for g in self.groups for k in g)
        self.alternative = self.candidate.alternative


def _outcome(
    graph: Graph,
    pos: Mapping[str, int],
    anchor: int,
    combo: str,
    idx: Sequence[int],
    cand: Candidate,
    code: str | None,
    reason: str | None,
) -> _Outcome:
    """The outcome with every name replaced by where it sits relative to the anchor."""
    node = graph.node
    inside = [node(n) for n in cand.nodes]
    readers: dict[str, tuple[int, int]] = {}
    producers: dict[str, tuple[int, int]] = {}
    for n in inside:
        k = pos[n.name] - anchor
        for p, t in enumerate(n.inputs):
            if t and t not in readers:
                readers[t] = (k, p)
        for q, t in enumerate(n.outputs):
            if t:
                producers[t] = (k, q)
    return _Outcome(
        anchor,
        combo,
        tuple(i - anchor for i in idx),
        cand,
        code,
        reason,
        tuple(tuple(pos[n] - anchor for n in g) for g in cand.bindings),
        tuple(readers[t] for t in cand.inputs),
        tuple(producers[t] for t in cand.outputs),
    )


def memo_applies(graph: Graph) -> bool:
    return len(graph.nodes) >= MEMO_FROM_NODES


def find_memo(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias],
    stats: dict[str, Any] | None = None,
    jobs: int = 1,
) -> MatchResult | None:
    """``find_candidates`` through the memo; None when the memo does not pay here.
    ``jobs`` > 1: the window's Datalog is shared among that many processes."""
    from ruleengine.match.matcher import _find

    t0 = time.perf_counter()
    # the graph's signatures in a forked child while this process compiles the rules
    # (neither reads the other: ~0.7 s CPU each at 2048 layers)
    pending = _PendingStructure(graph) if jobs > 1 else None
    rules = tuple(r for r in rule_set.rules if r.enabled)
    prog = compile_rule_set(rules, aliases, tabled_forms=True)
    # per clause, the head position its bindings are anchored at (a centre of the
    # clause); per rule, the farthest hop from an anchor
    radius_of: dict[str, int | None] = {}
    anchor_of: dict[str, dict[str, int]] = {}
    for rule in rules:
        at: dict[str, int] = {}
        radius: int | None = None
        for combo, conc in prog.rules[rule.name][2].items():
            avoid = {p - 1 for g in _sibling_groups(prog, rule.name, conc) for p in g}
            got = clause_anchor(conc, avoid)
            if got is None:
                radius = None
                break
            at[combo] = got[0]
            radius = max(radius or 0, got[1])
        radius_of[rule.name] = radius
        anchor_of[rule.name] = at
    st = structure(graph) if pending is None else pending.result()
    del pending
    # a hub's edges and shared-input facts: the rules reading them go the plain way
    hub_preds = _hub_predicates(graph, st, prog)
    memo_rules = tuple(
        r
        for r in rules
        if radius_of[r.name] is not None and not (_rule_preds(prog, r.name) & hub_preds)
    )
    if not memo_rules:
        return None
    rows_radius = max(radius_of[r.name] or 0 for r in memo_rules)
    classes = classify(st, rows_radius + 1)
    t1 = time.perf_counter()
    reps = [int(r) for r in classes.reps]
    balls = {r: ball(st, r, rows_radius) for r in reps}
    window: set[int] = set()
    for b in balls.values():
        window.update(b)
    if len(window) > MAX_COVER * len(graph.nodes):
        return None
    plain_rules = tuple(r for r in rules if r not in memo_rules)
    result, redo = _match_window(
        graph,
        replace(rule_set, rules=memo_rules),
        aliases,
        st,
        classes,
        balls,
        window,
        anchor_of,
        stats,
        prog if memo_rules == rules else None,
        jobs,
    )
    parts = [result]
    if redo:
        plain_rules = tuple(r for r in rules if r in plain_rules or r.name in redo)
    if plain_rules:
        parts.append(_find(graph, replace(rule_set, rules=plain_rules), aliases, None, jobs))
    t2 = time.perf_counter()
    if stats is not None:
        stats.update(
            memo_s=t1 - t0,
            classes=float(len(reps)),
            window_nodes=float(len(window)),
            plain_rules=float(len(plain_rules)),
        )
    if len(parts) == 1:
        return replace(result, seconds=t2 - t0)
    return MatchResult(
        candidates=tuple(sorted((c for p in parts for c in p.candidates), key=lambda c: c.key)),
        near_misses=tuple(
            sorted((n for p in parts for n in p.near_misses), key=lambda n: n.candidate.key)
        ),
        seconds=t2 - t0,
        facts=sum(p.facts for p in parts),
    )


def _twins(
    st: Structure,
    index: np.ndarray,
    outs: Sequence[_Outcome],
    which: np.ndarray,
    vs: np.ndarray,
    own: Mapping[int, int],
) -> TwinMap:
    """Candidate index -> (index of the representative's candidate it translates, offset),
    for members whose signatures agree over the whole index span of the representative's
    candidates (costing reads paths inside a group's span: convexity). The translated
    candidates as rows: ``index[k]`` translates outcome ``outs[which[k]]`` onto member
    ``vs[k]``; ``own``: id of a representative's own candidate -> its index."""
    if not len(index):
        return TwinMap((), (), ())
    by = np.argsort(index, kind="stable")  # candidate index ascending
    index, which, vs = index[by], which[by], vs[by]
    # per outcome (a few thousand): its representative, span and own candidate
    spans: dict[int, tuple[int, int]] = {}
    for o in outs:
        lo, hi = spans.get(o.anchor, (0, 0))
        spans[o.anchor] = (min(lo, *o.offs), max(hi, *o.offs))
    n_o = len(index)
    anchors = np.fromiter((o.anchor for o in outs), dtype=np.int64, count=len(outs))
    source = np.fromiter((own.get(id(o.candidate), -1) for o in outs), np.int64, len(outs))
    at = anchors[which]
    sig = st.sig
    n = len(sig)
    alike = np.zeros(n_o, dtype=bool)
    by = np.argsort(at, kind="stable")
    cuts = np.flatnonzero(at[by][1:] != at[by][:-1]) + 1
    for rows in np.split(by, cuts):
        r = int(at[rows[0]])
        lo, hi = spans[r]
        if r + lo < 0 or r + hi >= n:
            continue
        offs = np.arange(lo, hi + 1, dtype=np.int64)
        members, back = np.unique(vs[rows], return_inverse=True)
        idx = members[:, None] + offs[None, :]
        ok = ((idx >= 0) & (idx < n)).all(axis=1)
        good = np.zeros(len(members), dtype=bool)
        if ok.any():
            good[ok] = (sig[idx[ok]] == sig[r + offs][None, :]).all(axis=1)
        alike[rows] = good[back.reshape(-1)]
    src = source[which]
    keep = np.flatnonzero(alike & (src >= 0))
    return TwinMap(index[keep], src[keep], vs[keep] - at[keep])


def _hub_predicates(graph: Graph, st: Structure, prog: Program) -> set[str]:
    """Fact predicates with a fact through a hub tensor (an edge from its producer to a
    reader, or a shared-input fact on it)."""
    out: set[str] = set()
    if not st.hubs:
        return out
    nodes = graph.nodes
    ntype = {n.name: match_type(n) for n in nodes}
    for t in st.hubs:
        T = graph.tensors[t]
        readers = [(c, p) for c, p in T.consumers if p >= 0]
        if T.producer is not None:
            src = ntype[T.producer]
            for pred, (a, b) in prog.edge_preds.items():
                if src in a and any(ntype[c] in b for c, _ in readers):
                    out.add(pred)
        if (
            prog.tin_types
            and not T.is_constant
            and sum(1 for c, _ in readers if ntype[c] in prog.tin_types) >= 2
        ):
            out.add("tin")
    return out


_PAD_LAST = np.iinfo(np.int32).max  # pads a node set's sorted ranks at its end
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


class _KeyRows:
    """Candidate keys ``(rule, node names, alternative)`` as rows of ints: the rule's
    rank among the rule names, each node's name rank + 1 (0 pads a shorter tuple, so a
    prefix sorts first, as in tuple order), the alternative; and the node set of each
    key as its sorted ranks. ``entries[i]`` is key i's winning row: ``(outcome,
    member)`` (translated: the ranks are read in one numpy step per outcome) or a row of
    its own (``(None, ...)``: read from the names)."""

    def __init__(
        self,
        keys: Sequence[tuple],
        entries: Sequence[tuple],
        rank: np.ndarray,
        pos: Mapping[str, int],
        rule_rank: Mapping[str, int],
        keep_keys: bool = False,
    ) -> None:
        n = len(keys)
        width = max(map(len, map(_SECOND, keys)), default=0)
        nodes = np.zeros((n, width), dtype=np.int32)  # name ranks < 2**31
        if n:
            # entries grouped by outcome (one numpy step each); stable: row order kept
            outs = list(map(_FIRST, entries))
            ids = np.fromiter(map(id, outs), dtype=np.uint64, count=n)
            by = np.argsort(ids, kind="stable")
            cuts = np.flatnonzero(ids[by][1:] != ids[by][:-1]) + 1
            for rows in np.split(by, cuts):
                o = outs[rows[0]]
                if o is None:  # rows of their own: read from the names
                    for i in rows.tolist():
                        names = keys[i][1]
                        nodes[i, : len(names)] = rank[[pos[x] for x in names]] + 1
                    continue
                got = rows.tolist()
                vs = np.fromiter(map(_SECOND, map(entries.__getitem__, got)), np.int64, len(got))
                flat = np.asarray(o.flat, dtype=np.int64)
                at = vs[:, None] + flat[None, :]
                nodes[rows[:, None], np.arange(len(flat))[None, :]] = rank[at] + 1
        rules = np.fromiter(map(rule_rank.__getitem__, map(_FIRST, keys)), dtype=np.int32, count=n)
        alts = np.fromiter(map(_THIRD, keys), dtype=np.int32, count=n)
        self._setup(nodes, rules, alts, keep_keys)

    @classmethod
    def from_ranks(
        cls, nodes: np.ndarray, alts: np.ndarray, rule_rank: int, keep_keys: bool = False
    ) -> _KeyRows:
        """Keys of one rule given as rows: ``nodes`` (int32) each node's name rank + 1,
        0 padding; ``alts`` the alternatives (``nodes`` is taken over)."""
        obj = object.__new__(cls)
        rules = np.full(len(nodes), rule_rank, dtype=np.int32)
        obj._setup(nodes, rules, np.asarray(alts, dtype=np.int32), keep_keys)
        return obj

    def _setup(self, nodes: np.ndarray, rules: np.ndarray, alts: np.ndarray, keep: bool) -> None:
        n, width = nodes.shape
        self.rules = rules
        # key order: rule, then the node ranks column by column, then the alternative
        columns = [alts, *(nodes[:, j] for j in range(width - 1, -1, -1)), self.rules]
        self.order = np.lexsort(columns) if n else np.zeros(0, dtype=np.int64)
        # the key rows, for ``merge_points`` and ``distinct_nodes`` (when asked:
        # transient memory, per rule)
        self.keys, self.alts = (nodes.copy(), alts) if keep else (None, None)
        # node sets: the ranks sorted, padding last
        nodes[nodes == 0] = _PAD_LAST
        nodes.sort(axis=1)
        self.sets = nodes

    def _set_rows(self, width: int) -> np.ndarray:
        """(rule, node set) per key, padded to ``width`` node columns."""
        sets = self.sets
        if sets.shape[1] < width:
            pad = np.full((len(sets), width - sets.shape[1]), _PAD_LAST, dtype=np.int32)
            sets = np.hstack((sets, pad))
        return np.column_stack((self.rules, sets))

    def first_per_set(
        self, codes: Sequence[str] | np.ndarray | None = None, outside: _KeyRows | None = None
    ) -> list[int]:
        """Key indices, in key order, of the first key per (rule, node set) (and code,
        when given), leaving out the node sets ``outside`` has for the same rule."""
        n = len(self.order)
        if not n:
            return []
        width = max(self.sets.shape[1], 0 if outside is None else outside.sets.shape[1])
        rows = self._set_rows(width)
        keep = np.ones(n, dtype=bool)
        if outside is not None and len(outside.order):
            ids = _row_ids(np.vstack((rows, outside._set_rows(width))))
            keep = ~np.isin(ids[:n], ids[n:])
        if isinstance(codes, np.ndarray):  # code ids already
            rows = np.column_stack((rows, codes.astype(np.int32)))
        elif codes is not None:
            code_id = {c: k for k, c in enumerate(sorted(set(codes)))}
            rows = np.column_stack(
                (rows, np.fromiter((code_id[c] for c in codes), dtype=np.int32, count=n))
            )
        order = self.order[keep[self.order]]
        if not len(order):
            return []
        ids = _row_ids(rows[order])
        first = np.zeros(len(order), dtype=bool)
        first[np.unique(ids, return_index=True)[1]] = True
        return order[first].tolist()

    def distinct_nodes(self, mine: Sequence[int]) -> int:
        """How many distinct node tuples the keys ``mine`` (ascending) have: equal ones
        are neighbours in key order (only the alternative follows the nodes)."""
        rows = self.keys[mine]
        return 1 + int((rows[1:] != rows[:-1]).any(axis=1).sum()) if len(rows) else 0

    def merge_points(self, mine: Sequence[int], other: _KeyRows, theirs: Sequence[int]) -> Any:
        """For each key ``theirs[k]`` of ``other`` (same rule, ascending keys), how many
        keys of ``mine`` (ascending) sort before it: where it falls among them. Every
        key of both is distinct (a key is a candidate's or a near miss's, never both)."""
        a, b = self.keys[mine], other.keys[theirs]
        width = max(a.shape[1], b.shape[1])
        rows = np.zeros((len(a) + len(b), width), dtype=np.int32)
        rows[: len(a), : a.shape[1]] = a
        rows[len(a) :, : b.shape[1]] = b
        alts = np.concatenate((self.alts[mine], other.alts[theirs]))
        order = np.lexsort([alts, *(rows[:, j] for j in range(width - 1, -1, -1))])
        theirs_at = order >= len(a)
        before = np.cumsum(~theirs_at)  # keys of ``mine`` up to each place in key order
        out = np.empty(len(b), dtype=np.int64)
        out[order[theirs_at] - len(a)] = before[theirs_at]
        return out


class _RuleRows:
    """One rule's bindings as int rows, de-duplicated as the plain matcher does: per
    candidate key the first row in row order, candidates before near misses; then per
    node set the first key in key order (``_KeyRows``). A translated binding is a row
    (outcome, member): its key's nodes are ``member + outcome.flat`` (node positions,
    compared in numpy); a row checked directly (fan-out siblings) is one of ``own``.
    Records are made for the winners only, when asked (``candidates``, ``near_misses``)."""

    def __init__(
        self,
        name: str,
        outs: list[_Outcome],
        blocks: list[Any],
        own: list[tuple],
        label: Sequence[str],
        label_arr: np.ndarray,
        rank_p: np.ndarray,
        pos: Mapping[str, int],
        rule_rank: int,
        redo: tuple,
    ) -> None:
        self.name, self.outs, self.own, self.label_arr, self.redo = name, outs, own, label_arr, redo
        lens = np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks))
        n_t = int(lens.sum())
        self.n_t = n_t
        self.eo = eo = np.repeat(np.arange(len(outs), dtype=np.int64), lens)
        self.ev = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
        n = n_t + len(own)
        width = max(
            max((len(o.flat) for o in outs), default=0),
            max((len(x[2].nodes) for x in own), default=0),
        )
        at = np.full((n, width), -1, dtype=np.int32)  # node positions, -1 pads
        start = 0
        for o, vs in zip(outs, blocks, strict=True):
            end = start + len(vs)
            at[start:end, : len(o.flat)] = vs[:, None] + np.asarray(o.flat, dtype=np.int64)
            start = end
        alts = np.empty(n, dtype=np.int32)
        is_c = np.empty(n, dtype=bool)
        texts = {o.code or "" for o in outs} | {x[3] or "" for x in own}
        codes = {c: k for k, c in enumerate(sorted(texts))}
        code = np.empty(n, dtype=np.int32)
        if outs:
            alts[:n_t] = np.fromiter((o.alternative for o in outs), np.int32, len(outs))[eo]
            is_c[:n_t] = np.fromiter((o.code is None for o in outs), bool, len(outs))[eo]
            code[:n_t] = np.fromiter((codes[o.code or ""] for o in outs), np.int32, len(outs))[eo]
        for j, (_v, _row, cand, c, _reason) in enumerate(own, n_t):
            ns = cand.nodes
            at[j, : len(ns)] = [pos[x] for x in ns]
            alts[j] = cand.alternative
            is_c[j] = c is None
            code[j] = codes[c or ""]
        # one id per distinct key (alternative and node positions; -1 pads, so a shorter
        # tuple is another key); per key the first row in row order
        ids = _row_ids(np.column_stack((alts, at)))
        c_win = self._first_rows(ids, np.flatnonzero(is_c), label)
        n_win = self._first_rows(ids, np.flatnonzero(~is_c), label)
        n_win = n_win[~np.isin(ids[n_win], ids[c_win])]  # a candidate key wins
        # per node set the first key in key order, keys as rows of name ranks
        c_rows = _KeyRows.from_ranks(rank_p[at[c_win]], alts[c_win], rule_rank, keep_keys=True)
        c_won = c_rows.first_per_set()
        self.c_sel = c_win[c_won] if len(c_won) else np.zeros(0, dtype=np.int64)
        self.matched = c_rows.distinct_nodes(c_won) if len(c_won) else 0
        self.near_matched = 0
        self.n_sel = None
        if len(n_win):
            n_rows = _KeyRows.from_ranks(rank_p[at[n_win]], alts[n_win], rule_rank, keep_keys=True)
            n_won = n_rows.first_per_set(code[n_win], outside=c_rows)
            self.n_sel = n_win[n_won] if len(n_won) else np.zeros(0, dtype=np.int64)
            self.near_at = c_rows.merge_points(c_won, n_rows, n_won)
            if len(n_won):
                self.near_matched = n_rows.distinct_nodes(n_won)

    def _row(self, i: int, label: Sequence[str]) -> tuple:
        if i >= self.n_t:
            return self.own[i - self.n_t][1]
        o, v = self.outs[self.eo[i]], int(self.ev[i])
        return (o.combo, *(label[v + k] for k in o.offs))

    def _first_rows(self, ids: np.ndarray, idx: np.ndarray, label: Sequence[str]) -> np.ndarray:
        """Of the rows ``idx``: per key id, the first in row order (rows are spelled out
        only where two share a key)."""
        if not len(idx):
            return idx
        order = np.argsort(ids[idx], kind="stable")
        srt = ids[idx][order]
        starts = np.flatnonzero(np.r_[True, srt[1:] != srt[:-1]])
        win = idx[order[starts]]
        sizes = np.diff(np.r_[starts, len(srt)])
        for g in np.flatnonzero(sizes > 1).tolist():
            rows = idx[order[starts[g] : starts[g] + sizes[g]]].tolist()
            win[g] = min(rows, key=lambda i: self._row(i, label))
        return win

    def candidates(
        self, site: tuple, base: int, own: dict[int, int]
    ) -> tuple[tuple[dict[int, Candidate], list[_Outcome], Any, Any], tuple | None]:
        """The winning candidates in key order (the first at index ``base``) as a block of
        ``_CandRows``: (records made now by place: rows of their own and the
        representatives' own candidates; the outcomes translated here; each place's
        index into those, -1 for one made; each place's member); and the translated ones
        as (their indices, the outcomes, each one's outcome, each one's member). ``own``
        gets the index of each representative's own."""
        sel = self.c_sel
        made: dict[int, Candidate] = {}
        for k in np.flatnonzero(sel >= self.n_t).tolist():
            made[k] = self.own[int(sel[k]) - self.n_t][2]
        which = np.full(len(sel), -1, dtype=np.int64)
        member = np.zeros(len(sel), dtype=np.int64)
        outs: list[_Outcome] = []
        index: list[Any] = []
        which_t: list[Any] = []
        vs_l: list[Any] = []
        tr = np.flatnonzero(sel < self.n_t)
        if len(tr):
            u = self.eo[sel[tr]]
            v = self.ev[sel[tr]]
            by = np.argsort(u, kind="stable")
            cuts = np.flatnonzero(u[by][1:] != u[by][:-1]) + 1
            for rows in np.split(by, cuts):
                o = self.outs[int(u[rows[0]])]
                places = tr[rows]
                vs = v[rows]
                at_anchor = vs == o.anchor
                if at_anchor.any():
                    k = int(places[int(np.flatnonzero(at_anchor)[0])])
                    made[k] = o.candidate
                    own[id(o.candidate)] = base + k
                o.site = site
                keep = ~at_anchor
                if keep.any():
                    which[places[keep]] = len(outs)
                    member[places[keep]] = vs[keep]
                    index.append(base + places[keep])
                    which_t.append(np.full(int(keep.sum()), len(outs), dtype=np.int64))
                    vs_l.append(vs[keep])
                    outs.append(o)
        block = (made, outs, which, member)
        if not outs:
            return block, None
        return block, (np.concatenate(index), outs, np.concatenate(which_t), np.concatenate(vs_l))

    def near_block(self, site: tuple) -> tuple[dict[int, NearMiss], list[tuple], Any, Any]:
        """The winning near misses in key order, as (records made now by place: rows of
        their own and the representatives' own near misses; per outcome translated
        here, (outcome, its redo); each place's index into those, -1 for one made;
        each place's member)."""
        sel = self.n_sel
        made: dict[int, NearMiss] = {}
        for k in np.flatnonzero(sel >= self.n_t).tolist():
            _v, _row, cand, code, reason = self.own[int(sel[k]) - self.n_t]
            made[k] = NearMiss(cand, code, reason)
        graph, rule, combos, aliases, plans = self.redo
        which = np.full(len(sel), -1, dtype=np.int64)
        member = np.zeros(len(sel), dtype=np.int64)
        outs: list[tuple] = []
        tr = np.flatnonzero(sel < self.n_t)
        if len(tr):
            u = self.eo[sel[tr]]
            v = self.ev[sel[tr]]
            used, back = np.unique(u, return_inverse=True)
            anchors = np.fromiter((self.outs[i].anchor for i in used.tolist()), np.int64)
            at_anchor = anchors[back] == v
            for i in used.tolist():
                o = self.outs[i]
                conc = combos[o.combo]
                o.site = site
                outs.append((o, (graph, rule, conc, aliases, plans[conc.alternative])))
            for k, b in zip(tr[at_anchor].tolist(), back[at_anchor].tolist(), strict=True):
                o = outs[b][0]
                made[k] = NearMiss(o.candidate, o.code, o.reason or "")
            lazy = ~at_anchor
            which[tr[lazy]] = back[lazy]
            member[tr[lazy]] = v[lazy]
        return made, outs, which, member


class _NearRows(LazyTuple[NearMiss]):
    """The memo's near misses in key order, equal to the tuple of their records, each
    record made on first read (2 x 10^5 on a 2048-layer stack; explain and the full
    plan read them, a compact ``fuse`` reads the codes: ``code_ids``, ``code_names``).
    Place ``k`` is a record made already, or outcome ``outs[which[k]]`` translated onto
    member ``member[k]`` (a ``_MappedNearMiss``)."""

    def __init__(
        self,
        blocks: Sequence[tuple[str, tuple[dict[int, NearMiss], list[tuple], Any, Any]]],
    ) -> None:
        outs: list[tuple] = []  # (outcome, redo, rule name)
        which: list[Any] = []
        member: list[Any] = []
        made: dict[int, NearMiss] = {}
        base = 0
        for name, (got, block_outs, w, m) in blocks:
            w = np.where(w >= 0, w + len(outs), -1)
            outs.extend((o, redo, name) for o, redo in block_outs)
            made.update((base + k, rec) for k, rec in got.items())
            which.append(w)
            member.append(m)
            base += len(w)
        self._outs = outs
        self._which = np.concatenate(which) if which else np.zeros(0, dtype=np.int64)
        self._member = np.concatenate(member) if member else np.zeros(0, dtype=np.int64)
        n = len(self._which)
        self._cache = np.empty(n, dtype=object)
        self._have = np.zeros(n, dtype=bool)
        if made:
            at = np.fromiter(made, np.int64, len(made))
            self._cache[at] = np.fromiter(made.values(), object, len(made))
            self._have[at] = True
        # codes per place: the outcome's, or the record's
        names: dict[str, int] = {}
        o_code = np.fromiter(
            (names.setdefault(o.code, len(names)) for o, _r, _n in outs), np.int64, len(outs)
        )
        ids = np.empty(n, dtype=np.int64)
        lazy = self._which >= 0
        ids[lazy] = o_code[self._which[lazy]]
        for k, rec in made.items():
            ids[k] = names.setdefault(rec.code, len(names))
        self.code_ids = ids
        self.code_names = tuple(names)
        self._whole = False

    def __len__(self) -> int:
        return len(self._which)

    def _make(self, k: int) -> NearMiss:
        o, redo, name = self._outs[int(self._which[k])]
        v = int(self._member[k])
        label = o.site[1]  # type: ignore[index]
        cand = _Translated.make_nodes(name, tuple([label[v + f] for f in o.flat]), o.alternative, o)
        rec = _MappedNearMiss(cand, o.code, redo)  # type: ignore[arg-type]
        self._cache[k] = rec
        self._have[k] = True
        return rec

    def _record(self, k: int) -> Any:
        return self._cache[k] if self._have[k] else self._make(k)

    def all(self) -> list[NearMiss]:
        if not self._whole:
            for k in np.flatnonzero(~self._have).tolist():
                self._make(k)
            self._whole = True
        return self._cache.tolist()

    def __repr__(self) -> str:
        return f"_NearRows({len(self)} near misses)"


class _CandRows(LazyTuple[Candidate]):
    """The memo's candidates in key order, equal to the tuple of their records, each
    record made on first read (4.5 x 10^5 on a 2048-layer stack; a compact ``fuse``
    reads the few that are no twin, the sources, the chosen and the listed: cost reads
    the rules by ``rule_at``). Place ``k`` is a record made already, or outcome
    ``outs[which[k]]`` translated onto member ``member[k]`` (a ``_Translated``)."""

    def __init__(self, blocks: Sequence[tuple[str, tuple]]) -> None:
        outs: list[tuple[_Outcome, str]] = []
        which: list[Any] = []
        member: list[Any] = []
        made: dict[int, Candidate] = {}
        starts: list[int] = []
        rules: list[str] = []
        base = 0
        for name, (got, block_outs, w, m) in blocks:
            w = np.where(w >= 0, w + len(outs), -1)
            outs.extend((o, name) for o in block_outs)
            made.update((base + k, rec) for k, rec in got.items())
            which.append(w)
            member.append(m)
            starts.append(base)
            rules.append(name)
            base += len(w)
        self._outs = outs
        self._which = np.concatenate(which) if which else np.zeros(0, dtype=np.int64)
        self._member = np.concatenate(member) if member else np.zeros(0, dtype=np.int64)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._rules = rules
        n = len(self._which)
        self._cache = np.empty(n, dtype=object)
        self._have = np.zeros(n, dtype=bool)
        if made:
            at = np.fromiter(made, np.int64, len(made))
            self._cache[at] = np.fromiter(made.values(), object, len(made))
            self._have[at] = True
        self._whole = False

    def rule_at(self, idx: Any) -> list[str]:
        """The rules of the candidates ``idx`` (no record made: blocks are per rule)."""
        block = np.searchsorted(self._starts, np.asarray(idx, dtype=np.int64), "right") - 1
        return list(map(self._rules.__getitem__, block.tolist()))

    def __len__(self) -> int:
        return len(self._which)

    def _make(self, k: int) -> Candidate:
        o, name = self._outs[int(self._which[k])]
        v = int(self._member[k])
        label = o.site[1]  # type: ignore[index]
        rec = _Translated.make_nodes(name, tuple([label[v + f] for f in o.flat]), o.alternative, o)
        self._cache[k] = rec
        self._have[k] = True
        return rec

    def _record(self, k: int) -> Any:
        return self._cache[k] if self._have[k] else self._make(k)

    def all(self) -> list[Candidate]:
        """Every record (the missing ones made per outcome, names read by numpy)."""
        if not self._whole:
            todo = np.flatnonzero(~self._have)
            if len(todo):
                u = self._which[todo]
                by = np.argsort(u, kind="stable")
                cuts = np.flatnonzero(u[by][1:] != u[by][:-1]) + 1
                make = _Translated.make_nodes
                cache = self._cache
                for rows in np.split(by, cuts):
                    o, name = self._outs[int(u[rows[0]])]
                    label_arr = np.asarray(o.site[1], dtype=object)  # type: ignore[index]
                    at = todo[rows]
                    vs = self._member[at]
                    names = label_arr[vs[:, None] + np.asarray(o.flat, dtype=np.int64)].tolist()
                    alt = o.alternative
                    for k, nm in zip(at.tolist(), names, strict=True):
                        cache[k] = make(name, tuple(nm), alt, o)
                self._have[todo] = True
            self._whole = True
        return self._cache.tolist()

    def __repr__(self) -> str:
        return f"_CandRows({len(self)} candidates)"


def _row_ids(rows: np.ndarray) -> np.ndarray:
    """One int per row, equal for equal rows (lexsort and a scan; ``np.unique`` with
    ``axis=0`` sorts a structured view, several times slower)."""
    n = len(rows)
    if not n:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(rows.T[::-1])
    srt = rows[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _match_window(
    graph: Graph,
    rule_set: RuleSet,
    aliases: Mapping[str, OpAlias],
    st: Structure,
    classes: Classes,
    balls: Mapping[int, list[int]],
    window: set[int],
    anchor_of: Mapping[str, Mapping[str, int]],
    stats: dict[str, Any] | None,
    prog: Program | None = None,
    jobs: int = 1,
) -> tuple[MatchResult, set[str]]:
    """Datalog on the window's facts; the representatives' bindings checked, then
    translated onto every member. Returns the result and the rules whose bindings left
    a representative's ball (to be matched the plain way; never seen so far)."""
    from ruleengine.match.matcher import (
        _build,
        _check,
        _nothing_per_op,
        _op_plan,
        _Reject,
        datalog_answers,
    )

    t0 = time.perf_counter()
    nodes = graph.nodes
    rules = rule_set.rules
    if prog is None:
        prog = compile_rule_set(rules, aliases, tabled_forms=True)
    names_in = {nodes[i].name for i in window}
    answers, timings, t1, n_facts = datalog_answers(graph, prog, names_in, jobs)
    t2 = time.perf_counter()
    pos = st.pos
    rep_of = classes.rep
    is_rep = np.zeros(len(nodes), dtype=bool)
    is_rep[classes.reps] = True
    members: dict[int, list[int]] = {}
    for v in np.flatnonzero(~is_rep):
        members.setdefault(int(rep_of[v]), []).append(int(v))
    ball_sets = {r: set(b) for r, b in balls.items()}
    label = [n.name for n in nodes]
    label_arr = np.array(label, dtype=object)
    redo: set[str] = set()
    # keys are ordered as rows of name ranks: rank + 1 per node position, 0 for the
    # padding (position -1, the last entry)
    rank_p = np.zeros(len(nodes) + 1, dtype=np.int32)
    rank_p[sorted(range(len(nodes)), key=label.__getitem__)] = np.arange(1, len(nodes) + 1)
    rule_rank = {name: k for k, name in enumerate(sorted(r.name for r in rules))}
    # per rule: its bindings as int rows, de-duplicated (``_RuleRows``)
    per_rule: dict[str, _RuleRows] = {}
    for rule in rules:
        head, _arity, combos = prog.rules[rule.name]
        plans: dict[int, tuple] = {}
        # the representatives' bindings, with their outcome
        per_rep: dict[int, list[_Outcome]] = {}
        bad = False
        anchor_at = anchor_of[rule.name]
        for row in answers.get(head, ()):
            conc = combos[row[0]]
            names = row[1 : 1 + conc.n_head]
            if PAD in names:
                continue
            anchor = pos[names[anchor_at[row[0]]]]
            if not is_rep[anchor]:
                continue
            idx = [pos[n] for n in names]
            if not all(i in ball_sets[anchor] for i in idx):
                bad = True
                break
            plan = plans.get(conc.alternative)
            if plan is None:
                plan = plans[conc.alternative] = _op_plan(rule, conc.alternative, aliases)
            lean = conc.single_nodes and _nothing_per_op(plan)
            try:
                cand, bindings = _build(graph, rule, conc, list(names), lean=lean)
            except _Reject:
                continue
            code = reason = None
            try:
                _check(graph, rule, conc, cand, bindings, aliases, plan)
            except _Reject as rej:
                code, reason = rej.code, rej.reason
            per_rep.setdefault(anchor, []).append(
                _outcome(graph, pos, anchor, row[0], idx, cand, code, reason)
            )
        if bad:
            redo.add(rule.name)
            continue
        # Every binding (the representatives' and the translated ones): per subgraph
        # (candidate key) the plain matcher keeps the first row, in row order, that is a
        # candidate, else the first that is a near miss. The translated bindings are
        # int rows (outcome, member): their keys are compared as rows of node positions
        # (numpy), and rows are spelled out only where two give the same key.
        name = rule.name
        sibs: dict[str, tuple] = {}
        for outs in per_rep.values():
            for o in outs:
                if o.combo not in sibs:
                    sibs[o.combo] = _sibling_groups(prog, name, combos[o.combo])
        outs_r: list[_Outcome] = []  # this rule's outcomes
        blk_v: list[Any] = []  # per outcome: the members it is translated onto
        # rows checked directly (fan-out siblings in another name order at a member):
        # (member, row, candidate, code, reason)
        own_rows: list[tuple] = []
        for r, outs in per_rep.items():
            # the representative and its members, all bindings of one outcome at once
            vs = np.fromiter((r, *members.get(r, ())), dtype=np.int64)
            for o in _undercut(outs, sibs) if len(vs) > 1 else outs:
                groups = sibs[o.combo]
                take = vs
                if groups:
                    in_order = np.asarray(_sibling_order(label_arr, vs, o, groups), dtype=bool)
                    in_order[0] = True
                    take = vs[in_order]
                    for v in vs[~in_order].tolist():
                        # fan-out siblings are bound in name order (``<`` in Datalog):
                        # here the names sort the other way, so this is another row,
                        # checked directly
                        row = _reorder((o.combo, *(label[v + k] for k in o.offs)), groups)
                        conc = combos[o.combo]
                        plan = plans[conc.alternative]
                        lean = conc.single_nodes and _nothing_per_op(plan)
                        try:
                            cand, bindings = _build(graph, rule, conc, list(row[1:]), lean=lean)
                        except _Reject:
                            continue
                        try:
                            _check(graph, rule, conc, cand, bindings, aliases, plan)
                        except _Reject as rej:
                            own_rows.append((v, row, cand, rej.code, rej.reason))
                            continue
                        own_rows.append((v, row, cand, None, None))
                blk_v.append(take)
                outs_r.append(o)
        if outs_r or own_rows:
            per_rule[name] = _RuleRows(
                name,
                outs_r,
                blk_v,
                own_rows,
                label,
                label_arr,
                rank_p,
                pos,
                rule_rank[name],
                (graph, rule, combos, aliases, plans),
            )
    t3 = time.perf_counter()
    # same de-duplication as the plain matcher: per rule and node set the first key in
    # key order; records are made for the winners only (``_rule_rows``). Rule by rule in
    # rule name order (keys of two rules never tie: the rule name comes first).
    n_final = 0
    cand_blocks: list[tuple[str, tuple]] = []  # per rule: its candidates (``_CandRows``)
    near_blocks: list[tuple[str, tuple]] = []  # per rule: its near misses (``_NearRows``)
    # per rule's near misses: where they fall among the candidates (cost merges by it)
    near_at: list[Any] = []
    matched: dict[str, int] = {}
    near_matched: dict[str, int] = {}
    site = (graph, label, pos)  # where translated records spell their names
    # translated candidates (not a representative's own): index, outcome, member
    t_index: list[Any] = []
    t_outs: list[_Outcome] = []
    t_which: list[Any] = []
    t_vs: list[Any] = []
    own: dict[int, int] = {}  # id of a representative's own candidate -> its index
    for name in sorted(per_rule):
        got = per_rule.pop(name)
        base = n_final
        block, origin = got.candidates(site, base, own)
        cand_blocks.append((name, block))
        n_final += len(block[2])
        if origin is not None:
            t_index.append(origin[0])
            t_which.append(origin[2] + len(t_outs))
            t_vs.append(origin[3])
            t_outs.extend(origin[1])
        if got.n_sel is not None:
            near_blocks.append((name, got.near_block(site)))
            near_at.append(base + got.near_at)
        if got.matched:
            matched[name] = got.matched
        if got.near_matched:
            near_matched[name] = got.near_matched
    # per rule, its distinct node tuples (what the plan counts as its matches), rules in
    # the order candidates then near misses first show them; a near miss never has a
    # candidate's node set (``first_per_set(outside=)``), so the two counts add up
    for name, k in near_matched.items():
        matched[name] = matched.get(name, 0) + k
    final = _CandRows(cand_blocks)
    if t_index:
        twins = _twins(
            st,
            np.concatenate(t_index),
            t_outs,
            np.concatenate(t_which),
            np.concatenate(t_vs),
            own,
        )
    else:
        twins = TwinMap((), (), ())
    t4 = time.perf_counter()
    if stats is not None:
        stats.update(
            compile_s=t1 - t0,
            datalog_s=t2 - t1,
            check_s=t3 - t2,
            dedup_s=t4 - t3,
            facts=float(n_facts),
        )
    return (
        MatchResult(
            candidates=final,
            near_misses=_NearRows(near_blocks),
            seconds=t4 - t0,
            facts=n_facts,
            twins=twins,
            near_at=np.concatenate(near_at) if near_at else np.zeros(0, dtype=np.int64),
            matched=matched,
        ),
        redo,
    )
