"""Bind a fused group to its kernel contract: which tensor feeds each port, which form
(reference semantics) applies, which attribute values the call carries.

Ports bind from the rule's ``rewrite.inputs`` where an entry names one with
``input_idx`` (port ``input_port`` <- the tensor pattern op ``from_op`` reads on input
``input_idx``), else by the catalog's binding. A port always binds a tensor from outside
the group; every tensor leaving the group must be an output of the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.kernels.model import Binding, Catalog, Contract, Form, KernelEntry
from ruleengine.rules.model import Rule


@dataclass(frozen=True)
class Call:
    """How a group's fused node calls its kernel."""

    entry: KernelEntry
    form: Form
    inputs: tuple[str, ...]  # tensor per function input ("" for an absent optional port)
    outputs: tuple[str, ...]  # tensor per function output ("" when it does not leave)
    attributes: tuple[tuple[str, Any], ...]


def _nodes_of(graph: Graph, nodes: Sequence[str], op: str) -> list[str]:
    return [n for n in nodes if graph.node(n).op_type == op]


def _resolve(graph: Graph, nodes: Sequence[str], produced: set[str], b: Binding) -> str | None:
    found = _nodes_of(graph, nodes, b.op)
    if b.nth >= len(found):
        return None
    node = graph.node(found[b.nth])
    if b.output is not None:
        outs = node.outputs
        return outs[b.output] if b.output < len(outs) and outs[b.output] else None
    if b.input == "external":
        return next((t for t in node.inputs if t and t not in produced), None)
    k = int(b.input)  # type: ignore[arg-type]
    if k < len(node.inputs) and node.inputs[k] and node.inputs[k] not in produced:
        return node.inputs[k]
    return None


def _rule_port(graph: Graph, group: Any, rule: Rule, index: int) -> tuple[bool, str | None]:
    """(named by rewrite.inputs with input_idx, its tensor) for input port ``index``."""
    entry = next(
        (e for e in rule.rewrite.inputs if e.input_port == index and e.input_idx is not None),
        None,
    )
    if entry is None:
        return False, None
    bindings = group.scored.candidate.bindings
    if not 0 <= entry.from_op < len(bindings) or not bindings[entry.from_op]:
        return True, None
    first = min(bindings[entry.from_op], key=lambda n: graph.node(n).index)
    ins = graph.node(first).inputs
    return True, ins[entry.input_idx] if entry.input_idx < len(ins) else None


def attribute_values(
    graph: Graph, nodes: Sequence[str], rule: Rule, entry: KernelEntry
) -> tuple[tuple[str, Any], ...]:
    """The call's attributes: the rule's, else bound from the group, else the default."""
    out: list[tuple[str, Any]] = []
    for a in entry.attributes:
        value = None
        if a.name in rule.rewrite.attributes:
            value = rule.rewrite.attributes[a.name]
        elif a.from_op is not None:
            found = _nodes_of(graph, nodes, a.from_op)
            if found:
                value = graph.node(found[0]).attributes.get(a.from_attribute or a.name)
        if value is None:
            value = a.default
        if value is not None:
            out.append((a.name, _typed(a.type, value)))
    return tuple(out)


def _typed(kind: str, value: Any) -> Any:
    if kind == "ints":
        return [int(v) for v in value]
    if kind == "floats":
        return [float(v) for v in value]
    if kind == "float":
        return float(value)
    if kind in ("int", "bool"):
        return int(value)
    return str(value)


def bind(graph: Graph, group: Any, rule: Rule, entry: KernelEntry) -> tuple[Call | None, Contract]:
    """Bind ``group`` to ``entry``: a Call (None when the kernel has no reference
    semantics or does not fit) and the Contract record for the plan."""
    base = Contract(
        entry.name,
        entry.version,
        source=entry.location.file if entry.location else None,
    )
    nodes = group.nodes
    produced = {t for n in nodes for t in graph.node(n).outputs if t}
    ins: dict[str, str] = {}
    problems: list[str] = []
    for i, port in enumerate(entry.inputs or ()):
        named, tensor = _rule_port(graph, group, rule, i)
        if not named:
            tensor = next(
                (t for b in port.bind if (t := _resolve(graph, nodes, produced, b))), None
            )
        if tensor is not None and tensor in produced:
            problems.append(f"port {port.name} bound to {tensor}, produced inside the group")
        elif tensor is not None:
            ins[port.name] = tensor
        elif not port.optional or named:
            problems.append(f"input port {port.name} binds no tensor of the group")
    outs: dict[str, str] = {}
    for port in entry.outputs or ():
        tensor = next((t for b in port.bind if (t := _resolve(graph, nodes, produced, b))), None)
        if tensor is not None:
            outs[port.name] = tensor
    attrs = attribute_values(graph, nodes, rule, entry)
    ports = tuple(ins.items()) + tuple(outs.items())
    if not entry.forms:
        return None, _with(base, status="no-reference", ports=ports, attributes=attrs)
    if entry.outputs is not None:
        missing = [t for t in group.outputs if t not in outs.values()]
        if missing:
            problems.append(f"tensor {missing[0]} leaves the group but no kernel output is it")
    form = _form(entry, group.op_types, ins, problems)
    if form is None or problems:
        return None, _with(
            base, status="unbound", ports=ports, attributes=attrs, reason="; ".join(problems)
        )
    call = Call(
        entry,
        form,
        tuple(ins.get(p, "") for p in form.inputs),
        tuple(outs.get(p, "") if outs.get(p) in group.outputs else "" for p in form.outputs),
        attrs,
    )
    return call, _with(base, status="bound", form=form.name, ports=ports, attributes=attrs)


def bind_groups(
    graph: Graph, groups: Sequence[Any], rule_set: Any, catalog: Catalog
) -> tuple[tuple[Any, ...], dict[int, Call]]:
    """Each group (rewrite.model.FusedGroup) with its contract, and the calls of the
    groups bound to reference semantics (by group id)."""
    from dataclasses import replace

    rules = rule_set.by_name()
    out, calls = [], {}
    for g in groups:
        entry = catalog.get(g.target_op)
        if entry is None:
            out.append(replace(g, contract=Contract(None)))
            continue
        call, contract = bind(graph, g, rules[g.rule], entry)
        if call is not None:
            calls[g.id] = call
        out.append(replace(g, contract=contract))
    return tuple(out), calls


def _form(
    entry: KernelEntry, op_types: Sequence[str], ins: Mapping[str, str], problems: list[str]
) -> Form | None:
    optional = {p.name for p in entry.inputs or () if p.optional}
    for f in entry.forms:
        if f.ops is not None and tuple(f.ops) != tuple(op_types):
            continue
        if all(p in ins or p in optional for p in f.inputs):
            return f
    problems.insert(
        0, f"no form of {entry.name} ({', '.join(f.name for f in entry.forms)}) fits ops "
        f"{' '.join(op_types)}",
    )  # fmt: skip
    return None


def _with(c: Contract, **changes: Any) -> Contract:
    from dataclasses import replace

    return replace(c, **changes)
