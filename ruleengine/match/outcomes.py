"""Outcomes: a representative's checked binding, as offsets from the representative.

An outcome holds for every member of the representative's class, translated by the
member's offset, except where fan-out siblings (bound in name order) sort another way
at a member: those rows are checked again there (``sibling_order``, ``reorder``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate


def sibling_order(label: np.ndarray, vs: np.ndarray, o: Outcome, groups: tuple) -> list[bool]:
    """Per translation ``v`` of ``o``: whether its fan-out siblings are in name order."""
    ok = np.ones(len(vs), dtype=bool)
    for g in groups:
        for k in range(len(g) - 1):
            a = label[vs + o.offs[g[k] - 1]]
            b = label[vs + o.offs[g[k + 1] - 1]]
            ok &= (a < b).astype(bool)
    return ok.tolist()


def undercut(outs: list[Outcome], sibs: Mapping[str, tuple]) -> list[Outcome]:
    """``outs`` without the outcomes that lose, at the representative and at every
    member alike, to another outcome of the same representative: two outcomes with the
    same offsets in key order, alternative and kind (candidate or near miss) give the
    same key at every member, and the row that comes first wins there; when their
    clauses (combos) differ, the combo decides, whatever the names. Outcomes with
    fan-out siblings (rows re-ordered per member) are all kept."""
    groups: dict[tuple, list[Outcome]] = {}
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


def reorder(row: tuple, groups: tuple[tuple[int, ...], ...]) -> tuple:
    """``row`` with each group of fan-out siblings in name order, as Datalog binds them."""
    out = list(row)
    for g in groups:
        for k, name in zip(g, sorted(row[k] for k in g), strict=True):
            out[k] = name
    return tuple(out)


@dataclass
class Outcome:
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


def make_outcome(
    graph: Graph,
    pos: Mapping[str, int],
    anchor: int,
    combo: str,
    idx: Sequence[int],
    cand: Candidate,
    code: str | None,
    reason: str | None,
) -> Outcome:
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
    return Outcome(
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
