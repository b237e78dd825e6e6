"""A region in canonical form: its pattern ops, labelled and ordered by structure alone.

A region's nodes become *units*, one per pattern op: a whole composite instance (a
decomposed LayerNorm, GELU, SiLU, ... as ``ops/composites.yaml`` defines them, found by
the real matcher) or a single node. Each unit gets a label: the framework alias that
stands for both the ONNX op and its decomposed forms (``LayerNorm`` for
LayerNormalization and the ``layernorm`` composite, so two exporters' forms agree), else
the ONNX op type. Units are ordered by Weisfeiler-Lehman colours of their labels and
wiring: every root first, then a topological order that picks the smallest colour,
so two regions of the same structure (two layers, two models) get the same order, and
the order is a valid pattern op order (each op's producers come before it).

The *key* of a region (coarse labels: op classes for plain ONNX ops) clusters regions
that differ only in which op of a class sits at a position; the *fine* labels say
which ops each instance really has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate

# Classes tried, in order, for the coarse label of a plain ONNX op.
COARSE_CLASSES = ("@cube", "@view", "@reduce", "@activation", "@broadcast", "@elementwise")


@dataclass(frozen=True)
class InputRef:
    """Input ``port`` of a unit reads output ``output_idx`` of unit ``source``."""

    port: int
    source: int
    output_idx: int = 0


@dataclass(frozen=True)
class Unit:
    nodes: tuple[str, ...]  # topological order; one node unless a composite
    label: str  # ONNX op type or alias name
    coarse: str  # label used for clustering
    composite: bool
    commutative: bool
    inputs: tuple[InputRef, ...]  # internal inputs only, sources index the canonical order


@dataclass(frozen=True)
class CanonicalRegion:
    units: tuple[Unit, ...]  # canonical order
    key: tuple  # coarse structure: equal keys = one cluster

    @property
    def fine(self) -> tuple[str, ...]:
        return tuple(u.label for u in self.units)


@cache
def _alias_labels() -> tuple[Mapping[str, str], Mapping[str, str]]:
    """(composite name -> alias label, ONNX op type -> alias label) for the aliases that
    stand for an ONNX op and decomposed forms alike."""
    from ruleengine.ops.aliases import alias_table
    from ruleengine.ops.composites import expand_composite

    best: dict[str, tuple[int, int, str]] = {}  # composite -> (-forms, table index, alias)
    by_onnx: dict[str, str] = {}
    for i, (name, alias) in enumerate(alias_table().items()):
        members = [c.name for ref in alias.composites for c in expand_composite(ref)]
        if not members:
            continue
        for c in members:  # the alias standing for the most forms names the composite
            best[c] = min(best.get(c, (0, i, name)), (-len(members), i, name))
        for t in alias.onnx_types:
            by_onnx.setdefault(t, name)
    return {c: name for c, (_, _, name) in best.items()}, by_onnx


@cache
def _classes() -> Mapping[str, frozenset[str]]:
    from ruleengine.ops.classes import op_classes

    return op_classes()


@cache
def _commutative() -> frozenset[str]:
    from ruleengine.ops.classes import commutative_ops

    return commutative_ops()


def op_class(name: str) -> frozenset[str]:
    """The ONNX op types of op class ``name`` (``@epilogue``, ...)."""
    return _classes().get(name, frozenset())


def coarse_label(op_type: str) -> str:
    """The op class a plain ONNX op is clustered by (itself when no class has it)."""
    classes = _classes()
    for name in COARSE_CLASSES:
        if op_type in classes.get(name, frozenset()):
            return name
    return op_type


def smallest_class(op_types: Sequence[str]) -> str:
    """The op class with the fewest members holding every op type given."""
    wanted = set(op_types)
    best = min(
        (
            (len(members), name)
            for name, members in _classes().items()
            if wanted <= members and name != "@opaque"
        ),
        default=None,
    )
    if best is None:
        raise ValueError(f"no op class holds {sorted(wanted)}")
    return best[1]


def composite_instances(graph: Graph) -> tuple[Candidate, ...]:
    """Every instance of every composite in ``graph``, as the matcher finds them."""
    from ruleengine.match import find_candidates
    from ruleengine.ops.composites import composites
    from ruleengine.rules.lint import lint_file
    from ruleengine.rules.model import RuleSet

    names = sorted(composites())
    text = "\n---\n".join(
        f"name: composite_{c}\nmatch:\n  ops:\n    - type: {c}\nrewrite:\n  target_op: C{i}"
        for i, c in enumerate(names)
    )
    result = lint_file(Path("<composites>"), "<composites>", text)
    found = find_candidates(graph, RuleSet(rules=result.rules))
    return tuple(c for c in found.candidates if len(c.nodes) > 1)


def _runtime_inputs(graph: Graph, cand: Candidate) -> list[str]:
    out = []
    for t in cand.inputs:
        tensor = graph.tensors.get(t)
        if tensor is None or tensor.is_initializer or tensor.is_constant or tensor.const_foldable:
            continue
        out.append(t)
    return out


def _hash(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


class _RawUnit(NamedTuple):
    """A unit before ordering: its nodes, label and whether it is a composite."""

    members: tuple[str, ...]
    label: str
    composite: bool


# per unit: (input port, source unit, the source's output index)
Wiring = list[list[tuple[int, int, int]]]


def canonicalize(
    graph: Graph, nodes: Sequence[str], composites: Sequence[Candidate] = ()
) -> CanonicalRegion:
    """The region's units in canonical order, and its clustering key."""
    from ruleengine.cost.traffic import topo_position

    pos = topo_position(graph)
    inside = set(nodes)
    raw, unit_of, composite_input = _raw_units(graph, inside, composites, pos)
    wiring = _wiring(graph, inside, raw, unit_of, composite_input)
    commutative = _commutative()
    coarse = [_coarse(graph, u) for u in raw]
    free = [u.composite or u.label in commutative for u in raw]
    colour = _colours(coarse, wiring, free)
    order = _canonical_order(wiring, colour, raw, pos)
    return _in_order(order, raw, wiring, coarse, free)


def _raw_units(
    graph: Graph, inside: set[str], composites: Sequence[Candidate], pos: Mapping[str, int]
) -> tuple[list[_RawUnit], dict[str, int], dict[int, str]]:
    """The units: whole composite instances inside the region (largest first), else
    nodes; each node's unit; each composite unit's one runtime input."""
    by_composite, by_onnx = _alias_labels()
    unit_of: dict[str, int] = {}
    raw: list[_RawUnit] = []
    composite_input: dict[int, str] = {}
    for cand in sorted(composites, key=lambda c: (-len(c.node_set), pos[c.nodes[0]], c.rule)):
        members = cand.node_set
        if not members <= inside or members & unit_of.keys():
            continue
        runtime = _runtime_inputs(graph, cand)
        if len(runtime) != 1 or len(cand.outputs) != 1:
            continue
        name = cand.rule.removeprefix("composite_")
        label = by_composite.get(name, name)
        composite_input[len(raw)] = runtime[0]
        for n in members:
            unit_of[n] = len(raw)
        raw.append(_RawUnit(tuple(sorted(members, key=pos.__getitem__)), label, True))
    for n in sorted(inside - unit_of.keys(), key=pos.__getitem__):
        unit_of[n] = len(raw)
        op = graph.node(n).op_type
        raw.append(_RawUnit((n,), by_onnx.get(op, op), False))
    return raw, unit_of, composite_input


def _source(
    graph: Graph, inside: set[str], unit_of: Mapping[str, int], t: str
) -> tuple[int, int] | None:
    """(unit, output index) of the unit inside the region producing ``t``, if any."""
    tensor = graph.tensors.get(t)
    if tensor is None or tensor.producer is None or tensor.producer not in inside:
        return None
    return unit_of[tensor.producer], tensor.producer_port or 0


def _wiring(
    graph: Graph,
    inside: set[str],
    raw: Sequence[_RawUnit],
    unit_of: Mapping[str, int],
    composite_input: Mapping[int, str],
) -> Wiring:
    """The internal wiring between units."""
    wiring: Wiring = []
    for i, (members, _, is_comp) in enumerate(raw):
        links: list[tuple[int, int, int]] = []
        if is_comp:
            src = _source(graph, inside, unit_of, composite_input[i])
            if src is not None:
                links.append((0, *src))
        else:
            for port, t in enumerate(graph.node(members[0]).inputs):
                src = _source(graph, inside, unit_of, t) if t else None
                if src is not None and src[0] != i:
                    links.append((port, *src))
        wiring.append(links)
    return wiring


def _coarse(graph: Graph, unit: _RawUnit) -> str:
    """The unit's label for clustering: an op class for a plain ONNX op."""
    members, label, is_comp = unit
    return label if is_comp or label != graph.node(members[0]).op_type else coarse_label(label)


def _colours(coarse: Sequence[str], wiring: Wiring, free: Sequence[bool]) -> list[str]:
    """Weisfeiler-Lehman colours over labels and wiring (a free port: any input)."""
    n_units = len(coarse)
    consumers: Wiring = [[] for _ in range(n_units)]
    for i, links in enumerate(wiring):
        for port, src, idx in links:
            consumers[src].append((-1 if free[i] else port, i, idx))
    colour = [_hash(coarse[i]) for i in range(n_units)]
    for _ in range(4):
        colour = [
            _hash(
                colour[i],
                sorted((-1 if free[i] else p, colour[s], x) for p, s, x in wiring[i]),
                sorted((p, colour[c], x) for p, c, x in consumers[i]),
            )
            for i in range(n_units)
        ]
    return colour


def _canonical_order(
    wiring: Wiring, colour: Sequence[str], raw: Sequence[_RawUnit], pos: Mapping[str, int]
) -> list[int]:
    """The canonical order: roots, then topological by smallest colour."""

    def tie(i: int) -> tuple[str, int]:
        return colour[i], pos[raw[i][0][0]]

    n_units = len(raw)
    indeg = [len({s for _, s, _ in links}) for links in wiring]
    order = sorted((i for i in range(n_units) if indeg[i] == 0), key=tie)
    placed = set(order)
    waiting = {i: {s for _, s, _ in wiring[i]} for i in range(n_units) if i not in placed}
    while waiting:
        ready = [i for i, deps in waiting.items() if deps <= placed]
        nxt = min(ready, key=tie)
        order.append(nxt)
        placed.add(nxt)
        del waiting[nxt]
    return order


def _in_order(
    order: Sequence[int],
    raw: Sequence[_RawUnit],
    wiring: Wiring,
    coarse: Sequence[str],
    free: Sequence[bool],
) -> CanonicalRegion:
    """The units in canonical order, their inputs indexing it, and the key."""
    index = {u: k for k, u in enumerate(order)}
    units = []
    key = []
    for u in order:
        members, label, is_comp = raw[u]
        refs = tuple(
            sorted(
                (InputRef(port, index[src], idx) for port, src, idx in wiring[u]),
                key=lambda r: (r.source, r.port, r.output_idx),
            )
        )
        units.append(Unit(members, label, coarse[u], is_comp, free[u], refs))
        ports = sorted((-1 if free[u] else r.port, r.source, r.output_idx) for r in refs)
        key.append((coarse[u], tuple(ports)))
    return CanonicalRegion(tuple(units), tuple(key))
