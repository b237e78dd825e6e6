"""What a relaxed clause's answers mean, for a person: the failing condition, the nearest
places and how to fix it (``WhyNot`` records; ``whynot`` finds them).

A relaxation is read by the kind of the literal it dropped: an edge from an earlier op
(a ``from_op`` or chain link, or its port), an edge inside a composite form, an edge
between copies of a repeated op, a ``cin`` constant, a ``tin`` shared tensor; any other
kind is told generically (its predicate and arguments), so a new kind still reads.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from itertools import islice

from ruleengine.graph.model import Graph, Node
from ruleengine.match.compile import Literal
from ruleengine.match.model import WhyNot, WhyPlace
from ruleengine.match.whynot_engine import FREE, ROWS_CHECKED, Clause, Outcome, Relaxed
from ruleengine.rules.model import OpPattern

_HINTS = {
    "param-mismatch": "set the param to the model's value shown, or remove it",
    "input-source": "fix this op's input_sources (from_op, output_idx, source_type); "
    "`source_type: const_or_param` accepts any tensor from outside the match",
    "input-count": "set min_inputs/max_inputs of this op to the count shown",
    "intermediate-escapes": "set `subgraph: {allow_intermediate_outputs: true}`, end the "
    "pattern at this op, or add the op that also reads it to the pattern",
    "output-count": "set subgraph.output_count to the count shown, or leave it out",
    "input-count-range": "widen subgraph.input_count_range",
    "const-value": "the model's constant differs: correct `value`/`value_in` of this input "
    "to the value shown, or widen its tolerance",
    "structure": "the op's input comes from an op its composite form excludes (e.g. the "
    "inside of a decomposed LayerNorm is no RMSNorm): the model has another op here",
    "dynamic-shape": "give the model's input shapes: --input-shape NAME:d0,d1,... or --dim n=v",
}


def _ops(cl: Clause) -> tuple[OpPattern, ...]:
    return cl.rule.alternatives[cl.conc.alternative].ops


def op_label(cl: Clause, op: int | None) -> str:
    if op is None:
        return "the subgraph"
    return f"op {op} ({_ops(cl)[op].type})"


def _where(cl: Clause, op: int | None, port: int | None = None, param: str | None = None) -> str:
    """file:line:col of the op (of its input ``port`` or ``param`` when they have one)."""
    if op is None:
        return str(cl.rule.location) if cl.rule.location else ""
    pat = _ops(cl)[op]
    loc = None
    if param is not None:
        loc = pat.param_locations.get(param)
    if loc is None and port is not None:
        loc = next((s.location for s in pat.input_sources or () if s.port == port), None)
    loc = loc or pat.location
    return str(loc) if loc else ""


def _path(nodes: Sequence[str]) -> str:
    return " -> ".join(nodes) if len(nodes) <= 3 else f"{nodes[0]} -> ... -> {nodes[-1]}"


def _node_ops(cl: Clause, head_vars: Sequence[str], row: Sequence[str]) -> dict[str, int]:
    """Node name -> the pattern op the row binds it to."""
    return {
        name: cl.conc.slots[cl.slot_of[v]].op
        for v, name in zip(head_vars, row, strict=False)
        if v in cl.slot_of
    }


def reads_text(graph: Graph, node: Node, bound: Mapping[str, int]) -> str:
    """What a node reads, each input's producer named with its pattern op when bound."""
    parts = []
    for port, t in enumerate(node.inputs):
        tensor = graph.tensors.get(t) if t else None
        if tensor is None:
            continue
        if tensor.producer and not graph.node(tensor.producer).compile_time:
            who = tensor.producer
            op = bound.get(who)
            label = f"{who} (op {op})" if op is not None else f"{who} ({graph.node(who).op_type})"
        elif tensor.const_value is not None and len(tensor.const_value) == 1:
            label = f"the constant {tensor.const_value[0]:g}"
        else:
            label = "a constant" if tensor.is_constant else f"graph input {t!r}"
        parts.append(f"{label} on input{port}")
    return f"{node.name} reads " + (", ".join(parts) if parts else "nothing")


def chain_from(graph: Graph, name: str, n: int = 4) -> str:
    """The node and the first readers after it: how the model spells this part out."""
    out = []
    node: Node | None = graph.node(name)
    while node is not None and len(out) < n:
        out.append(f"{node.name} ({node.op_type})")
        readers = [
            c for t in node.outputs if t in graph.tensors for c, _ in graph.tensors[t].consumers
        ]
        node = graph.node(readers[0]) if readers else None
    return " -> ".join(out)


def describe(
    graph: Graph,
    o: Outcome,
    others: Sequence[Outcome],
    relaxed: Sequence[Relaxed],
    answers: Mapping[str, list],
    candidates: int,
    max_places: int,
) -> WhyNot:
    """The ``WhyNot`` of one rule from its best outcome and the relaxations' answers."""
    cl = o.ladder.clause
    also = tuple(_also(x) for x in others)
    if o.kind == "match":
        row = o.rows[0]
        return WhyNot(
            cl.rule.name, candidates, cl.conc.alternative, None, "", "match",
            f"matches ({candidates} candidate(s)); a binding passes every check at {_path(row)}",
            "", None, o.matched - 1, o.places,
            (WhyPlace(tuple(row), row[-1], "every check passes"),), also,
        )  # fmt: skip
    loose = _loose_ops(cl)
    if loose:
        op, (condition, message, hint, where, places) = _disconnected(graph, o, loose, max_places)
        return WhyNot(
            cl.rule.name, candidates, cl.conc.alternative, op, _ops(cl)[op].type, condition,
            message, hint, where or None, o.matched, o.places, tuple(places), also,
        )  # fmt: skip
    if o.kind in ("check", "subgraph"):
        condition, message, hint, where, places = _checked(graph, o, max_places)
    else:
        condition, message, hint, where, places = _structural(
            graph, o, relaxed, answers, max_places
        )
    op = o.op
    return WhyNot(
        cl.rule.name, candidates, cl.conc.alternative, op,
        _ops(cl)[op].type if op is not None else "", condition, message, hint, where or None,
        o.matched, o.places, tuple(places), also,
    )  # fmt: skip


def _loose_ops(cl: Clause) -> list[int]:
    """The pattern ops no link joins to op 0 in this clause (lint AF306): the clause's
    prefixes stop before them, whatever the model holds."""
    parent = list(range(len(cl.conc.slots)))

    def find(a: int) -> int:
        while parent[a] != a:
            a = parent[a]
        return a

    for link in cl.conc.links:
        parent[find(link.src)] = find(link.dst)
    if not parent:
        return []
    root = find(0)
    return sorted({x.op for i, x in enumerate(cl.conc.slots) if find(i) != root})


def _disconnected(graph: Graph, o: Outcome, loose: list[int], k: int) -> tuple[int, tuple]:
    """An op not connected to op 0: the link the model has instead, read from the nodes
    the connected prefix binds. Either the loose op reads a bound op (give it that
    ``from_op``), or a bound op's reader that a later op stands for reads a node of the
    loose op's type (give the later op ``from_op`` the loose op)."""
    cl = o.ladder.clause
    d = loose[0]
    ops = _ops(cl)
    slot_d = cl.conc.slots[cl.conc.slots_by_op[d][0]]
    types = slot_d.types if slot_d.form is None else frozenset()
    n_vars = cl.vars_of(range(o.level))
    cond = "disconnected"
    head = f"{op_label(cl, d)} is not connected to op 0 (AF306): no from_op joins it to the rest"
    found = list(islice(_missing_links(graph, cl, o.rows[:ROWS_CHECKED], n_vars, d, types), 50))
    found.sort(key=lambda f: f[0] != d)  # the loose op's own link first
    for fix_op, q, i, row, node in found[:1]:
        bound = _node_ops(cl, n_vars, row)
        place = WhyPlace(
            tuple(row), node, f"at {_path(row)}: {reads_text(graph, graph.node(node), bound)}"
        )
        if fix_op == d:
            hint = (
                f"the model's {graph.node(node).op_type} reads op {i} on input{q}: give op {d} "
                f"`input{q}: {{from_op: {i}}}`"
            )
            return d, (cond, f"{head} of the pattern", hint, _where(cl, d), [place])
        message = (
            f"{op_label(cl, fix_op)} reads a {ops[d].type} (op {d}'s type) on input{q} in the "
            f"model; {head} of the pattern"
        )
        hint = f"write `input{q}: {{from_op: {d}}}` in op {fix_op}'s input_sources"
        return fix_op, (cond, message, hint, _where(cl, fix_op, port=q), [place])
    hint = (
        f"connect op {d} with `input_sources: {{inputK: {{from_op: j}}}}` (j an earlier op), "
        f"or have a later op read it with `from_op: {d}`"
    )
    return d, (cond, f"{head} of the pattern", hint, _where(cl, d), [])


def _missing_links(graph: Graph, cl: Clause, rows: Sequence, n_vars: Sequence[str], d: int, types):
    """(op to fix, port, op read, row, node) for each place a missing link shows."""
    ops = _ops(cl)
    for row in sorted(set(rows), key=lambda r: [graph.node(n).index for n in r]):
        by_op = {}
        for v, name in zip(n_vars, row, strict=False):
            slot = cl.conc.slots[cl.slot_of[v]]
            if v == slot.out_var:
                by_op[slot.op] = name
        inside = set(row)
        for i, name in sorted(by_op.items()):
            for t in graph.node(name).outputs:
                tensor = graph.tensors.get(t)
                for reader, q in tensor.consumers if tensor else ():
                    node = graph.node(reader)
                    if reader in inside:
                        continue
                    if node.op_type in types:
                        yield d, q, i, row, reader
                    for kk in range(d + 1, len(ops)):
                        src = [s for s in ops[kk].input_sources or () if s.from_op == i]
                        if not src or node.op_type not in _type_names(ops[kk].type):
                            continue
                        for p, prod in _producers(graph, node):
                            if p != q and graph.node(prod).op_type == ops[d].type:
                                yield kk, p, d, row, reader


def _type_names(type_name: str) -> set[str]:
    return set(type_name.split("|"))


def _also(o: Outcome) -> str:
    cl = o.ladder.clause
    alt = cl.conc.alternative
    label = "match.ops" if alt == 0 else f"branch {alt - 1}"
    if o.kind == "match":
        return f"alternative {alt} ({label}) matches"
    if o.reject is not None:
        return f"alternative {alt} ({label}): {o.reject.reason}"
    return f"alternative {alt} ({label}) stops at {op_label(cl, o.op)} after {o.matched} op(s)"


def _checked(graph: Graph, o: Outcome, max_places: int) -> tuple:
    """A Python check refused every binding that got this far (or the whole subgraph)."""
    cl = o.ladder.clause
    rej = o.reject
    assert rej is not None
    param = next(
        (k for k in (_ops(cl)[o.op].params if o.op is not None else ()) if f" {k}" in rej.reason),
        None,
    )
    hint = _HINTS.get(rej.code, f"the check {rej.code!r} fails: adjust that field of this op")
    if "has no parameter" in rej.reason:
        hint = "the param is misspelt or not of this op: rename or remove it (AF217/AF303)"
    elif rej.code == "input-count" and o.kind == "subgraph":
        hint = _HINTS["input-count-range"]
    places = []
    seen: set[str] = set()
    n_vars = cl.vars_of(range(o.level))
    # the checks' reasons start with the op ("op 1 (Add): ..."), which the message names
    said = _unprefixed(rej.reason, cl, o.op)
    for row, reason in zip(o.rows, o.reasons or [rej.reason] * len(o.rows), strict=False):
        ops = _node_ops(cl, n_vars, row)
        at = next((n for n, k in ops.items() if k == o.op), row[-1])
        if at in seen:
            continue
        seen.add(at)
        where = at if len(row) == 1 else f"{at} (in {_path(row)})"
        reason = _unprefixed(reason, cl, o.op)
        # the message says the first reason: a place repeats only one that differs
        places.append(
            WhyPlace(tuple(row), at, f"at {where}" + (f": {reason}" if reason != said else ""))
        )
        if len(places) >= max_places:
            break
    message = f"{op_label(cl, o.op)} fails the {rej.code} check: {said}"
    port = re.search(r"\binput(\d+)\b", rej.reason) if param is None else None
    where = _where(cl, o.op, port=int(port.group(1)) if port else None, param=param)
    return rej.code, message, hint, where, places


def _unprefixed(reason: str, cl: Clause, op: int | None) -> str:
    """A check's reason without its leading ``op N (Type): `` (the message names the op)."""
    label = f"{op_label(cl, op)}: "
    return reason[len(label) :] if op is not None and reason.startswith(label) else reason


def _structural(
    graph: Graph, o: Outcome, relaxed: Sequence[Relaxed], answers: Mapping[str, list], k: int
) -> tuple:
    """The structure stops at slot ``o.slot``: read the relaxations that have answers."""
    cl = o.ladder.clause
    joined = [
        r
        for r in relaxed
        if r.joined
        and r.dropped is not None
        and any(len(set(row)) == len(row) for row in answers.get(r.head, ()))
    ]
    joined.sort(
        key=lambda r: (not r.rewired, r.freed is None, not _is_link(cl, r.dropped, o.slot), r.head)
    )
    freed = [
        r
        for r in relaxed
        if r.dropped is None and any(len(set(row)) == len(row) for row in answers.get(r.head, ()))
    ]
    if joined:
        return _dropped(graph, o, joined[0], answers[joined[0].head], k)
    slot = cl.conc.slots[o.slot] if o.slot is not None else None
    if freed and slot is not None and slot.copy > 0 and not _ops(cl)[slot.op].fan_out:
        return _repeat(graph, cl, freed[0], answers[freed[0].head], slot, k, FREE)
    if freed:
        return _freed(graph, o, freed[0], answers[freed[0].head], k)
    return _nothing(graph, o, k)


def _is_link(cl: Clause, lit: Literal | None, s: int | None) -> bool:
    return lit is not None and lit[0].startswith("e_") and min(cl.slots_in(lit)) < (s or 0)


def _rows_places(
    graph: Graph, cl: Clause, r: Relaxed, rows: list, at_var: str, k: int, text
) -> list[WhyPlace]:
    """Up to k places, one per node bound to ``at_var``, in graph order."""
    idx = r.head_vars.index(at_var)
    by_node: dict[str, tuple] = {}
    for row in sorted(set(rows)):
        if len(set(row)) == len(row):
            by_node.setdefault(row[idx], row)
    order = sorted(by_node, key=lambda n: graph.node(n).index)[:k]
    out = []
    for name in order:
        row = by_node[name]
        bound = _node_ops(cl, r.head_vars, row)
        prefix = tuple(
            n for v, n in zip(r.head_vars, row, strict=True) if v != at_var and v != FREE
        )
        out.append(WhyPlace(prefix, name, text(row, bound, prefix, name)))
    return out


def _dropped(graph: Graph, o: Outcome, r: Relaxed, rows: list, k: int) -> tuple:
    """One literal of the failing op dropped has answers: that literal is the cause."""
    cl = o.ladder.clause
    s = o.slot
    assert s is not None and r.dropped is not None
    pred, args = r.dropped
    slot = cl.conc.slots[s]
    op = slot.op
    srcs = sorted(cl.slots_in(r.dropped) - {s})
    if r.freed is not None:
        return _freed_arg(graph, cl, r, rows, s, k)
    if pred.startswith("e_") and srcs:
        src_slot = cl.conc.slots[srcs[0]]
        if src_slot.op == op:
            return _repeat(graph, cl, r, rows, slot, k, slot.var)
        return _link(graph, cl, r, rows, s, srcs[0], args, k)
    at_var = next((a for a in args if a in cl.slot_of), slot.entry_var)
    if pred == "cin":
        port = f"input{args[1]}" if isinstance(args[1], int) else "an input"
        what = f"{port} of its {_form_node(slot, args[0])} to be the constant {r.note or args[2]}"
        cond = "constant"
        hint = (
            "the model computes something else here (its constant is shown at the places): "
            "write the ops out with their own constants, or add a form to ops/composites.yaml"
        )
    elif pred == "tin":
        what = f"input{args[1]} to be the tensor its composite reads twice"
        cond, hint = "shared-input", "the model reads two different tensors here: write the ops out"
    elif pred.startswith(("e_", "k_")):
        what = f"the {slot.form.name if slot.form else slot.types} form"
        cond = "composite-form"
        hint = "the model spells this op another way: write its ops out as pattern ops"
    else:
        what = f"{pred}({', '.join(map(str, args))})"
        cond, hint = pred, "this condition of the op does not hold here: relax or correct it"
    places = _rows_places(
        graph, cl, r, rows, at_var, k,
        lambda row, b, p, n: f"at {_path(p or (n,))}: {reads_text(graph, graph.node(n), b)}",
    )  # fmt: skip
    message = f"{op_label(cl, op)} expects {what}; the rest of it matches"
    return cond, message, hint, _where(cl, op), places


def _freed_arg(graph: Graph, cl: Clause, r: Relaxed, rows: list, s: int, k: int) -> tuple:
    """Only a constant argument of one literal differs: a port, or a constant's value."""
    assert r.dropped is not None and r.freed is not None
    pred, args = r.dropped
    op = cl.conc.slots[s].op
    if pred.startswith("e_") and cl.slot_of.get(args[0]) == s:
        slot = cl.conc.slots[s]
        form = slot.form.name if slot.form else "repeat"
        message = (
            f"{op_label(cl, op)}: inside its {form} form, {_form_node(slot, args[1])} reads "
            f"{_form_node(slot, args[0])} on another input than input{args[2]}"
        )
        hint = "the model spells this op another way: write its ops out as pattern ops"
        places = _rows_places(
            graph, cl, r, rows, args[1], k,
            lambda row, b, p, n: f"at {_path(p)}: {reads_text(graph, graph.node(n), b)}",
        )  # fmt: skip
        return "composite-form", message, hint, _where(cl, op), places
    if pred.startswith("e_"):
        src_var, dst_var, want = args
        j = cl.conc.slots[cl.slot_of[src_var]].op
        got: list[int] = []

        def text(row, bound, prefix, name) -> str:
            src_node = graph.node(row[r.head_vars.index(src_var)])
            node = graph.node(name)
            got.extend(q for q, t in enumerate(node.inputs) if t in src_node.outputs)
            return f"at {_path(prefix)}: {reads_text(graph, node, bound)}"

        places = _rows_places(graph, cl, r, rows, dst_var, k, text)
        q = got[0] if got else "?"
        twice = {x.port for x in _ops(cl)[op].input_sources or () if x.from_op == j}
        if q in twice:  # the rule reads op j on both ports; the model on one only
            return _read_once(graph, cl, op, j, want, q, places)
        message = (
            f"{op_label(cl, op)} expects input{want} from op {j}; the model reads it on input{q}"
        )
        hint = (
            f"write `input{q}: {{from_op: {j}}}` in op {op}'s input_sources (the model has the "
            "inputs in the other order), and move the other input's source to the other port"
        )
        return "port", message, hint, _where(cl, op, port=want), places
    at_var = next((a for a in args if a in cl.slot_of), cl.conc.slots[s].entry_var)
    places = _rows_places(
        graph, cl, r, rows, at_var, k,
        lambda row, b, p, n: f"at {_path(p or (n,))}: {reads_text(graph, graph.node(n), b)}",
    )  # fmt: skip
    message = (
        f"{op_label(cl, op)} expects {pred} argument {r.freed} to be {r.note}; the model has "
        "another value there"
    )
    hint = "the model's value differs from the rule's: correct the value (see the places)"
    return "constant" if pred == "cin" else pred, message, hint, _where(cl, op), places


def _read_once(
    graph: Graph, cl: Clause, op: int, j: int, want: int, q: int, places: list[WhyPlace]
) -> tuple:
    """The rule reads op ``j`` on input ``want`` and input ``q``; the model's node reads
    it on input ``q`` only: input ``want`` comes from another node (named at the place)."""
    message = (
        f"{op_label(cl, op)} expects input{want} from op {j} too; the model reads op {j} "
        f"only on input{q}"
    )
    hint = (
        f"input{want} comes from another node here: `input{want}: {{from_op: i}}` with that "
        "node's op, or `source_type: any`"
    )
    if places and places[0].node:
        node = graph.node(places[0].node)
        t = node.inputs[want] if want < len(node.inputs) else None
        tensor = graph.tensors.get(t) if t else None
        prod = tensor.producer if tensor is not None else None
        if prod:
            hint = (
                f"input{want} reads {prod} ({graph.node(prod).op_type}) here: if that is an op "
                f"of the pattern, write `input{want}: {{from_op: i}}` with its index; otherwise "
                f"`source_type: any`"
            )
    return "link", message, hint, _where(cl, op, port=want), places


def _form_node(slot, var: str) -> str:
    """The composite node a form variable stands for, e.g. ``Add`` (or the op's type)."""
    if slot.form is not None:
        for fnode, v in zip(slot.form.nodes, slot.node_vars(), strict=True):
            if v == var:
                return f"{fnode.op} ({slot.form.name})"
    return "node"


def _link(
    graph: Graph, cl: Clause, r: Relaxed, rows: list, s: int, src: int, args: tuple, k: int
) -> tuple:
    """A link from an earlier op is dropped: where the op reads from instead."""
    op, j = cl.conc.slots[s].op, cl.conc.slots[src].op
    port = args[2] if isinstance(args[2], int) else None
    want = (
        f"input{port} from op {j} ({_ops(cl)[j].type})"
        if port is not None
        else (f"to read {op_label(cl, j)}'s output")
    )
    src_var, dst_var = args[0], args[1]
    found: dict[str, object] = {}

    def text(row, bound, prefix, name) -> str:
        node = graph.node(name)
        src_node = graph.node(row[r.head_vars.index(src_var)])
        ports = [q for q, t in enumerate(node.inputs) if t in src_node.outputs]
        others = [(q, bound[p]) for q, p in _producers(graph, node) if bound.get(p, j) != j]
        found.setdefault("ports", ports)
        found.setdefault("others", others)
        return f"at {_path(prefix)}: {reads_text(graph, node, bound)}"

    places = _rows_places(graph, cl, r, rows, dst_var, k, text)
    # a port another from_op of this op already names is no swap
    claimed = {
        src.port
        for src in _ops(cl)[op].input_sources or ()
        if src.from_op is not None and src.port != port
    }
    ports = [q for q in found.get("ports") or [] if q not in claimed]
    others = found.get("others") or []
    if ports and port is not None and not r.rewired:
        cond = "port"
        hint = (
            f"op {j}'s output arrives on input{ports[0]}: write `input{ports[0]}: {{from_op: "
            f"{j}}}` in op {op}'s input_sources (the inputs are in the other order)"
        )
    elif others and (fix := _relink(_ops(cl)[op], j, port, others)):
        cond = "link"
        hint = (
            f"op {op} reads op {fix[1]} here, not op {j}: write "
            f"`input{fix[0]}: {{from_op: {fix[1]}}}`"
        )
    else:
        cond = "link"
        hint = (
            f"op {op} does not read op {j}'s output at these places: check its from_op "
            f"(or the op order) against the model"
        )
    message = f"{op_label(cl, op)} expects {want}"
    return cond, message, hint, _where(cl, op, port=port), places


def _relink(
    pat: OpPattern, j: int, port: int | None, others: Sequence[tuple[int, int]]
) -> tuple[int, int] | None:
    """The input to rewire and the op it reads in the model: ``(q, i)`` among the node's
    inputs from other pattern ops (``others``), leaving out those the rule already names
    right. ``port`` None: the op's input order is free (commutative), so the fix goes on
    the input the rule wired to op ``j``."""
    srcs = [s for s in pat.input_sources or () if s.from_op is not None]
    wrong = [s.port for s in srcs if s.from_op == j]
    named = {(s.port, s.from_op) for s in srcs}
    if port is None:
        named_ops = {s.from_op for s in srcs if s.from_op != j}
        left = [(q, i) for q, i in others if i not in named_ops]
        return (wrong[0] if wrong else left[0][0], left[0][1]) if left else None
    left = [(q, i) for q, i in others if (q, i) not in named]
    left.sort(key=lambda qi: qi[0] != port)
    return left[0] if left else None


def _producers(graph: Graph, node: Node) -> list[tuple[int, str]]:
    out = []
    for q, t in enumerate(node.inputs):
        tensor = graph.tensors.get(t) if t else None
        if tensor is not None and tensor.producer:
            out.append((q, tensor.producer))
    return out


def _repeat(graph: Graph, cl: Clause, r: Relaxed, rows: list, slot, k: int, at: str) -> tuple:
    """A repeated op's next copy does not follow: the chain is shorter than repeat.min."""
    op = slot.op
    pat = _ops(cl)[op]
    copies = slot.copy
    prev_var = cl.conc.slots[cl.conc.slots_by_op[op][copies - 1]].out_var
    places = _rows_places(
        graph, cl, r, rows, at, k,
        lambda row, b, p, n: f"the chain of op {op} ends at {row[r.head_vars.index(prev_var)]}; "
        f"next: {chain_from(graph, row[r.head_vars.index(prev_var)], 2)}",
    )  # fmt: skip
    message = (
        f"{op_label(cl, op)} repeats {pat.repeat_min}..{pat.repeat_max} times; the model's "
        f"chain has {copies} copies"
    )
    hint = f"lower `repeat.min` of op {op} to {copies} (or end the pattern earlier)"
    return "repeat", message, hint, _where(cl, op), places


def _freed(graph: Graph, o: Outcome, r: Relaxed, rows: list, k: int) -> tuple:
    """With the op's type freed there are answers: another op type sits there."""
    cl = o.ladder.clause
    assert o.slot is not None
    slot = cl.conc.slots[o.slot]
    op = slot.op
    pat = _ops(cl)[op]
    types = sorted(slot.types) if slot.form is None else [slot.form.name]
    places = _rows_places(
        graph, cl, r, rows, FREE, k,
        lambda row, b, p, n: f"at {_path(p)}: the next node is {chain_from(graph, n)}",
    )  # fmt: skip
    found = graph.node(places[0].node).op_type if places and places[0].node else "?"
    present = {n.op_type for n in graph.nodes}
    if slot.form is None and not (set(slot.types) & present):
        hint = (
            f"the model has no {pat.type} node; it may spell it out as elementary ops (the "
            "places show what follows): write those ops as pattern ops, each with its "
            "input_sources (docs/debugging-rules.md)"
        )
        cond = "composite-vs-decomposed"
    else:
        hint = f"use `type: {found}` (or an op class covering both), or check the op order"
        cond = "op-type"
        if op == len(_ops(cl)) - 1 and op > 0:
            hint += f"; or drop op {op}: the model's chain ends before it"
    message = f"{op_label(cl, op)} expects {'/'.join(types)}; the model has {found} there"
    return cond, message, hint, _where(cl, op), places


def _nothing(graph: Graph, o: Outcome, k: int) -> tuple:
    """No single relaxation has answers: the op type is absent or several things differ."""
    cl = o.ladder.clause
    s = o.slot if o.slot is not None else 0
    slot = cl.conc.slots[s]
    op = slot.op
    pat = _ops(cl)[op]
    present = sorted({n.op_type for n in graph.nodes if not n.compile_time})
    types = sorted(slot.types) if slot.form is None else [slot.form.name]
    into = [kk for kk in cl.conc.links if kk.dst == s and kk.src < s]
    places: list[WhyPlace] = []
    n_vars = cl.vars_of(range(o.level))
    for row in sorted(set(o.rows))[:k]:
        bound = _node_ops(cl, n_vars, row)
        src = cl.conc.slots[into[0].src] if into else None
        if src is not None and src.out_var in n_vars:
            name = row[n_vars.index(src.out_var)]
            text = f"at {_path(row)}: op {src.op}'s output is read by {_readers(graph, name)}"
        else:
            name = row[-1]
            text = f"at {_path(row)}: {reads_text(graph, graph.node(name), bound)}"
        places.append(WhyPlace(tuple(row), name, text))
    close = difflib.get_close_matches(pat.type, present, n=3, cutoff=0.5)
    if not (set(slot.types) & set(present)) and slot.form is None:
        message = f"{op_label(cl, op)}: the model has no {'/'.join(types)} node"
        hint = (
            f"did you mean {', '.join(close)}? " if close else ""
        ) + f"the model's op types: {', '.join(present[:20])}"
        cond = "op-type"
    else:
        message = f"{op_label(cl, op)}: no {'/'.join(types)} node is wired as the pattern says"
        hint = "both its type and its input_sources differ from the model here: check each"
        cond = "op-type+link"
    return cond, message, hint, _where(cl, op), places


def _readers(graph: Graph, name: str) -> str:
    node = graph.node(name)
    readers = [
        f"{c} ({graph.node(c).op_type})"
        for t in node.outputs
        if t in graph.tensors
        for c, _ in graph.tensors[t].consumers
    ]
    return ", ".join(readers[:4]) or "nothing"


# ---------------------------------------------------------------- rendering


def whynot_line(w: WhyNot) -> str:
    """One line: the rule, the failing op and the fix (match and explain)."""
    at = f" [{w.location}]" if w.location else ""
    place = f"; {w.places[0].text}" if w.places else ""
    return f"why-not {w.rule}: {w.message}{place}{at}; fix: {w.hint}"


def whynot_text(w: WhyNot) -> list[str]:
    """The whole answer of explain-rule for one rule."""
    alt = "match.ops" if w.alternative == 0 else f"branch {w.alternative - 1}"
    lines = [f"rule {w.rule}: {w.candidates} candidate(s)"]
    if w.condition == "match":
        lines.append(f"  {w.message}")
        return lines
    lines.append(
        f"  alternative {w.alternative} ({alt}) got furthest: {w.matched_ops} op(s) matched"
        + (f" at {w.prefix_places} place(s)" if w.prefix_places else "")
    )
    at = f" ({w.location})" if w.location else ""
    lines.append(f"  failing: {w.message}{at} [{w.condition}]")
    for p in w.places:
        lines.append(f"    {p.text}")
    lines.append(f"  fix: {w.hint}")
    lines.extend(f"  also: {a}" for a in w.also)
    return lines


def whynot_json(w: WhyNot) -> dict:
    return {
        "rule": w.rule,
        "candidates": w.candidates,
        "alternative": w.alternative,
        "op": w.op,
        "op_type": w.op_type,
        "condition": w.condition,
        "message": w.message,
        "hint": w.hint,
        "location": w.location,
        "matched_ops": w.matched_ops,
        "prefix_places": w.prefix_places,
        "places": [{"nodes": list(p.nodes), "node": p.node, "text": p.text} for p in w.places],
        "also": list(w.also),
    }
