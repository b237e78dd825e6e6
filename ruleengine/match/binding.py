"""One Datalog answer row -> a ``Candidate`` and its per-slot bindings.

A row that is structurally no match (a node bound twice, a composite input from an
excluded op) raises ``Reject``; the checks (``match.checks``) raise it too, with a
near-miss code.
"""

from __future__ import annotations

from ruleengine.graph.model import Graph, Node
from ruleengine.match.compile import Concrete
from ruleengine.match.model import Candidate
from ruleengine.match.params import Binding
from ruleengine.match.tensors import subgraph_io
from ruleengine.rules.model import Rule


class Reject(Exception):
    """A binding that is no candidate: ``code`` names the near-miss kind."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _slot_bindings(graph: Graph, conc: Concrete, names: list[str]) -> list[Binding]:
    out: list[Binding] = []
    pos = 0
    node = graph.node
    for slot, k in zip(conc.slots, conc.slot_sizes, strict=True):
        if k == 1:
            out.append(Binding((node(names[pos]),), slot.form))
        else:
            out.append(Binding(tuple(node(n) for n in names[pos : pos + k]), slot.form))
        pos += k
    return out


def build_candidate(
    graph: Graph, rule: Rule, conc: Concrete, names: list[str], *, lean: bool = False
) -> tuple[Candidate, list[Binding]]:
    """The candidate of one answer row, and its per-slot bindings (empty when ``lean``:
    every slot one node and no per-op check, see ``nothing_per_op``)."""
    if len(set(names)) != len(names):
        raise Reject("structure", "a node is bound twice")
    if lean:
        n_ops = len(rule.alternatives[conc.alternative].ops)
        by_op = conc.slots_by_op
        groups = tuple(tuple(names[i] for i in by_op.get(op, ())) for op in range(n_ops))
        node = graph.node
        inputs, outputs = subgraph_io(graph, [node(n) for n in names])
        return Candidate(rule.name, conc.alternative, groups, inputs, outputs), []
    bindings = _slot_bindings(graph, conc, names)
    for b in bindings:
        if b.form is not None and b.form.main_input_not_from:
            x = b.main_input(graph)
            producer = graph.tensors[x].producer if x else None
            if producer and graph.node(producer).op_type in b.form.main_input_not_from:
                raise Reject("structure", "composite input from an excluded op")
    n_ops = len(rule.alternatives[conc.alternative].ops)
    if conc.single_nodes:  # one node per slot: names line up with slots
        by_op = conc.slots_by_op
        groups = tuple(tuple(names[i] for i in by_op.get(op, ())) for op in range(n_ops))
        all_nodes = [b.nodes[0] for b in bindings]
    else:
        per_op: dict[int, list[Node]] = {}
        for slot, b in zip(conc.slots, bindings, strict=True):
            group = list(b.nodes)
            if slot.form is not None:
                group.sort(key=lambda n: n.index)
            per_op.setdefault(slot.op, []).extend(group)
        groups = tuple(tuple(n.name for n in per_op.get(i, [])) for i in range(n_ops))
        all_nodes = [n for b in bindings for n in b.nodes]
    inputs, outputs = subgraph_io(graph, all_nodes)
    return Candidate(rule.name, conc.alternative, groups, inputs, outputs), bindings
