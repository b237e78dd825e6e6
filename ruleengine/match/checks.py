"""Python-side checks of one binding, what Datalog expresses badly.

Output indices, input source kinds (and the values a constant input must hold:
``match.values``), input counts, params (by meaning, with ONNX defaults and alias
mappings), constant operands and the subgraph conditions. A failed
check raises ``Reject`` with a near-miss code and a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ruleengine.graph.model import Graph, Node
from ruleengine.match.binding import Reject
from ruleengine.match.compile import Concrete
from ruleengine.match.model import Candidate
from ruleengine.match.params import Binding, ParamFailure, check_params
from ruleengine.match.tensors import is_const_like, readers
from ruleengine.match.values import check_const_value
from ruleengine.ops.classes import commutative_ops
from ruleengine.ops.model import OpAlias
from ruleengine.rules.model import OpPattern, Rule, SubgraphSpec

_RESOLVED: dict[tuple[str, int], object] = {}


def _resolve(type_name: str, aliases: Mapping[str, OpAlias]):
    """resolve_type, memoised per alias table (checks call it once per candidate op)."""
    from ruleengine.match.compile import resolve_type

    key = (type_name, id(aliases))
    hit = _RESOLVED.get(key)
    if hit is None or hit[0] is not aliases:
        hit = (aliases, resolve_type(type_name, aliases))
        _RESOLVED[key] = hit
    return hit[1]


def _reads(node: Node, tensor: str) -> list[int]:
    return [p for p, t in enumerate(node.inputs) if t == tensor]


def op_plan(rule: Rule, alternative: int, aliases: Mapping[str, OpAlias]) -> tuple:
    """Per pattern op of one alternative: (index, op, where, resolved type, chained).

    The same for every binding of the alternative, so the matchers compute it once.
    """
    alt = rule.alternatives[alternative]
    return tuple(
        (i, op, f"op {i} ({op.type})", _resolve(op.type, aliases), alt.chains_to_previous(i))
        for i, op in enumerate(alt.ops)
    )


def nothing_per_op(plan: tuple) -> bool:
    """True when no op of the plan has a source, input-count, param or constant-operand
    check (``check_binding`` would pass every op without looking), e.g. ``elementwise_chain``."""
    for _i, op, _where, spec, _chained in plan:
        alias = spec.alias
        if op.input_sources is not None or op.min_inputs is not None:
            return False
        if op.max_inputs is not None or op.params:
            return False
        if alias is not None and (alias.implied_params or alias.const_operand):
            return False
    return True


def check_binding(
    graph: Graph,
    rule: Rule,
    conc: Concrete,
    cand: Candidate,
    bindings: list[Binding],
    aliases: Mapping[str, OpAlias],
    plan: tuple | None = None,
) -> None:
    """Raise ``Reject`` (code, reason) at the first check the binding fails: per op
    (sources, input count, params, constant operand), then the subgraph's conditions."""
    if plan is None:
        plan = op_plan(rule, conc.alternative, aliases)
    if not bindings:  # a lean build: no op has anything to check
        plan = ()
    inside = set(cand.nodes)
    _check_ops(graph, conc, bindings, plan, inside)
    spec = rule.subgraph
    if not spec.allow_intermediate_outputs:
        _check_intermediates(graph, cand.nodes, inside)
    _check_counts(graph, spec, cand)


def _check_ops(
    graph: Graph, conc: Concrete, bindings: list[Binding], plan: tuple, inside: set[str]
) -> None:
    """The per-op checks, op by op in pattern order."""
    by_op = conc.slots_by_op
    first, last = conc.first_slot, conc.last_slot
    comm = commutative_ops()
    for op_idx, op, where, spec, chained in plan:
        if op_idx not in first:  # an optional op (repeat.min 0) absent from this clause
            continue
        b = bindings[first[op_idx]]
        # a fan-out op: every copy reads what the first reads, so each is checked
        for i in by_op.get(op_idx, ()) if op.fan_out else (first[op_idx],):
            _check_sources(
                graph, op, op_idx, chained, bindings[i], bindings, first, last, inside, comm, where
            )
        _check_input_count(graph, op, b, where)
        for i in by_op.get(op_idx, ()):
            try:
                check_params(graph, op.type, op.params, spec.alias, bindings[i], where)
            except ParamFailure as exc:
                raise Reject(exc.code, exc.reason) from None
            if spec.alias is not None and spec.alias.const_operand and bindings[i].form is None:
                _check_const_operand(graph, op, bindings[i].node, where)


def _check_const_operand(graph: Graph, op: OpPattern, node: Node, where: str) -> None:
    """An alias with a constant operand (e.g. a scale): the node reads a constant."""
    if not any(is_const_like(graph, t) for t in node.inputs if t in graph.tensors):
        raise Reject(
            "param-mismatch",
            f"{where}: {op.type} needs a constant operand; node {node.name!r} reads none",
        )


def _check_intermediates(graph: Graph, names: Sequence[str], inside: set[str]) -> None:
    """``allow_intermediate_outputs: false``: no tensor made and read inside the group
    is also read outside it (or a graph output)."""
    tensors = graph.tensors
    folded = readers(graph).folded  # one set per graph, not one per binding
    for n in names:
        for t in graph.node(n).outputs:
            tensor = tensors.get(t) if t else None
            if tensor is None:
                continue
            has_inner = has_outer = False
            for c, _ in tensor.consumers:
                if c in inside:
                    has_inner = True
                elif c not in folded:  # a Shape of a static tensor is folded
                    has_outer = True
            if not has_inner or not (has_outer or tensor.is_graph_output):
                continue
            outer = sorted({c for c, _ in tensor.consumers if c not in inside and c not in folded})
            if outer or tensor.is_graph_output:
                whom = (
                    f"also read by {', '.join(repr(c) for c in outer[:3])}"
                    if outer
                    else "a graph output"
                )
                raise Reject(
                    "intermediate-escapes",
                    f"intermediate tensor {t!r} (from node {n!r}) is {whom}, so fusing "
                    "would not remove its HBM write (allow_intermediate_outputs is false)",
                )


def _check_counts(graph: Graph, spec: SubgraphSpec, cand: Candidate) -> None:
    """The subgraph's ``input_count_range`` (non-constant inputs) and ``output_count``."""
    data_inputs = [t for t in cand.inputs if not graph.tensors[t].is_constant]
    if spec.input_count_range is not None:
        lo, hi = spec.input_count_range
        if not lo <= len(data_inputs) <= hi:
            raise Reject(
                "input-count",
                f"the subgraph reads {len(data_inputs)} non-constant input(s), outside "
                f"input_count_range [{lo}, {hi}]",
            )
    if spec.output_count is not None and len(cand.outputs) != spec.output_count:
        raise Reject(
            "output-count",
            f"the subgraph has {len(cand.outputs)} output(s) used outside it, "
            f"output_count is {spec.output_count}",
        )


def _port_tensor(node: Node, port: int) -> str | None:
    return node.inputs[port] if 0 <= port < len(node.inputs) and node.inputs[port] else None


def _check_same_as(
    graph: Graph,
    op: OpPattern,
    b: Binding,
    bindings: list[Binding],
    first: Mapping[int, int],
    where: str,
    comm: frozenset[str],
) -> None:
    """``inputK: {same_as: {op: j, input: m}}``: this input is the tensor op j reads on m."""
    for src in op.input_sources or ():
        if src.same_as is None:
            continue
        j, m = src.same_as
        if j not in first:
            continue
        other = bindings[first[j]]
        o_node = other.node if other.form is None else _entry_node(graph, other)
        want = _port_tensor(o_node, m) if o_node is not None else None
        node = b.node if b.form is None else _entry_node(graph, b)
        if node is None or want is None:
            raise Reject(
                "input-source", f"{where}: input{src.port} or op {j}'s input{m} is missing"
            )
        ports = [src.port]
        if node.op_type in comm and len(node.inputs) == 2 and src.port in (0, 1):
            ports.append(1 - src.port)
        if not any(_port_tensor(node, p) == want for p in ports):
            raise Reject(
                "input-source",
                f"{where}: input{src.port} of node {node.name!r} is not the tensor op {j} "
                f"reads on input{m} ({want!r})",
            )


def _entry_node(graph: Graph, b: Binding) -> Node | None:
    """The node of a composite binding that reads its main input first."""
    x = b.main_input(graph)
    for n in sorted(b.nodes, key=lambda n: n.index):
        if x in n.inputs:
            return n
    return b.nodes[0] if b.nodes else None


def _check_sources(
    graph: Graph,
    op: OpPattern,
    op_idx: int,
    chained: bool,
    b: Binding,
    bindings: list[Binding],
    first: Mapping[int, int],
    last: dict[int, int],
    inside: set[str],
    comm: frozenset[str],
    where: str,
) -> None:
    """``input_sources``: same-as tensors, the ops an input comes from, source kinds."""
    if op.input_sources is None:
        return
    _check_same_as(graph, op, b, bindings, first, where, comm)
    node = b.node
    swapped = False
    if b.form is None and chained and node.op_type in comm:
        swapped = _chain_swapped(op, node, bindings[last[op_idx - 1]])
    if b.form is None:
        swapped = _check_from_ops(op, node, bindings, last, comm, where) or swapped
    try:
        _check_source_kinds(graph, op, b, node, swapped, inside, where)
    except Reject as first:
        # a commutative binary op whose order nothing inside the pattern fixes (a root:
        # Add(3, x) as well as Add(x, 3)) matches with its inputs the other way round
        if not _order_free(op, b, node, chained, comm):
            raise
        try:
            _check_source_kinds(graph, op, b, node, True, inside, where)
        except Reject as other:
            # the order that got further says why (a wrong value, not a wrong kind)
            if first.code == "input-source" and other.code != "input-source":
                raise other from None
            raise first from None


def _order_free(op: OpPattern, b: Binding, node: Node, chained: bool, comm: frozenset[str]) -> bool:
    """A single commutative binary node whose input order no link of the pattern fixes."""
    return (
        b.form is None
        and not chained
        and node.op_type in comm
        and len(node.inputs) == 2
        and not any(s.from_op is not None or s.same_as is not None for s in op.input_sources or ())
    )


def _chain_swapped(op: OpPattern, node: Node, prev: Binding) -> bool:
    """A chain link on a commutative binary op: if the previous op's output arrived on
    a port the rule describes by source kind, the rule meant the other order."""
    prev_out = _out_node(prev).outputs
    ports = [p for p, t in enumerate(node.inputs) if t in prev_out]
    described = {src.port for src in op.input_sources or () if src.source_type is not None}
    return len(node.inputs) == 2 and bool(ports) and all(p in described for p in ports)


def _check_from_ops(
    op: OpPattern,
    node: Node,
    bindings: list[Binding],
    last: dict[int, int],
    comm: frozenset[str],
    where: str,
) -> bool:
    """``from_op``: the node reads that op's output on the port named; True when a
    commutative binary op reads it on the other port (the rule meant the other order)."""
    swapped = False
    for src in op.input_sources or ():
        if src.from_op is None or src.from_op not in last:
            continue
        out_node = _out_node(bindings[last[src.from_op]])
        if src.output_idx >= len(out_node.outputs):
            raise Reject(
                "input-source", f"{where}: op {src.from_op} has no output {src.output_idx}"
            )
        ports = _reads(node, out_node.outputs[src.output_idx])
        if not ports:
            raise Reject(
                "input-source",
                f"{where}: node {node.name!r} does not read output {src.output_idx} of "
                f"op {src.from_op}",
            )
        if src.port not in ports:
            if node.op_type in comm and len(node.inputs) == 2:
                swapped = True
            else:
                raise Reject(
                    "input-source",
                    f"{where}: node {node.name!r} reads op {src.from_op} on input "
                    f"{ports[0]}, not input{src.port}",
                )
    return swapped


def _check_source_kinds(
    graph: Graph,
    op: OpPattern,
    b: Binding,
    node: Node,
    swapped: bool,
    inside: set[str],
    where: str,
) -> None:
    """``source_type``: each described input is a constant, a graph input, ... ."""
    externals = b.external_inputs(graph) if b.form is not None else []
    for src in op.input_sources or ():
        if src.source_type is None:
            continue
        if b.form is not None:
            if src.port == 0:
                t = b.main_input(graph)
            else:
                rest = [x for x in externals if x != b.main_input(graph)]
                t = rest[src.port - 1] if src.port - 1 < len(rest) else None
        else:
            port = (1 - src.port) if swapped and src.port in (0, 1) else src.port
            t = node.inputs[port] if port < len(node.inputs) and node.inputs[port] else None
        if t is None:
            raise Reject("input-source", f"{where}: input{src.port} is missing")
        tensor = graph.tensors[t]
        kind = src.source_type
        ok = {
            "any": True,
            "const": is_const_like(graph, t),
            "graph_input": tensor.is_graph_input,
            "const_or_param": tensor.producer is None or tensor.producer not in inside,
        }.get(kind, True)
        if not ok:
            what = (
                f"produced by node {tensor.producer!r}"
                if tensor.producer
                else ("a graph input" if tensor.is_graph_input else "a constant")
            )
            raise Reject(
                "input-source",
                f"{where}: input{src.port} must be {kind}, but tensor {t!r} is {what}",
            )
        if src.value is not None:  # value, value_in, shape: what the constant holds
            check_const_value(graph, src.value, t, f"{where}: input{src.port}")


def _out_node(b: Binding) -> Node:
    if b.form is None:
        return b.nodes[-1]
    ids = [n.id for n in b.form.nodes]
    return b.nodes[ids.index(b.form.output.id)] if len(b.nodes) == len(ids) else b.nodes[-1]


def _check_input_count(graph: Graph, op: OpPattern, b: Binding, where: str) -> None:
    if op.min_inputs is None and op.max_inputs is None:
        return
    if b.form is None:
        counts = [sum(1 for t in n.inputs if t) for n in b.nodes]
    else:
        counts = [len(b.data_inputs(graph))]
    for n_in in counts:
        if op.min_inputs is not None and n_in < op.min_inputs:
            raise Reject("input-count", f"{where}: {n_in} input(s), min_inputs is {op.min_inputs}")
        if op.max_inputs is not None and n_in > op.max_inputs:
            raise Reject("input-count", f"{where}: {n_in} input(s), max_inputs is {op.max_inputs}")
