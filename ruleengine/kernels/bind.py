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

import numpy as np

from ruleengine.graph import onnxlite
from ruleengine.graph.model import Graph, replaced
from ruleengine.kernels.catalog import at_opset
from ruleengine.kernels.model import Binding, Catalog, Contract, Form, KernelEntry
from ruleengine.kernels.shape_fit import shape_problem
from ruleengine.rules.model import Rule


@dataclass(frozen=True)
class Call:
    """How a group's fused node calls its kernel."""

    entry: KernelEntry
    form: Form
    inputs: tuple[str, ...]  # tensor per function input ("" for an absent optional port)
    outputs: tuple[str, ...]  # tensor per function output ("" when it does not leave)
    attributes: tuple[tuple[str, Any], ...]
    float_type: int | None = None  # ONNX element type of the first float input (CastLike)


class _Members(tuple):
    """A group's node names (a tuple, as given) with its nodes by op type and the
    tensors its nodes make, read once per group: binding asks for them per port, per
    attribute and per form (~6 x 10^5 node lookups at 2048 layers otherwise)."""

    by_op: dict[str, list[str]]
    produced: set[str]

    def __new__(cls, graph: Graph, names: Sequence[str]) -> _Members:
        self = super().__new__(cls, names)
        self.by_op = {}
        self.produced = set()
        for n in names:
            node = graph.node(n)
            self.by_op.setdefault(node.op_type, []).append(n)
            self.produced.update(t for t in node.outputs if t)
        return self


def _nodes_of(graph: Graph, nodes: Sequence[str], op: str) -> list[str]:
    if isinstance(nodes, _Members):
        return list(nodes.by_op.get(op, ()))
    return [n for n in nodes if graph.node(n).op_type == op]


def _produced(graph: Graph, nodes: Sequence[str]) -> set[str]:
    """The tensors the nodes make."""
    if isinstance(nodes, _Members):
        return nodes.produced
    return {t for n in nodes for t in graph.node(n).outputs if t}


def _resolve(graph: Graph, nodes: Sequence[str], produced: set[str], b: Binding) -> str | None:
    found = _nodes_of(graph, nodes, b.op)
    if not -len(found) <= b.nth < len(found):
        return None
    node = graph.node(found[b.nth])
    if b.output is not None:
        outs = node.outputs
        return outs[b.output] if b.output < len(outs) and outs[b.output] else None
    if b.input == "external":
        outside = [t for t in node.inputs if t and t not in produced]
        if b.operand is not None:
            outside = [t for t in outside if _is_side(graph, t, node) == (b.operand == "side")]
        return outside[0] if outside else None
    k = int(b.input)  # type: ignore[arg-type]
    if k < len(node.inputs) and node.inputs[k] and node.inputs[k] not in produced:
        return node.inputs[k]
    return None


def _is_side(graph: Graph, tensor: str, node: Any) -> bool | None:
    """``tensor`` is a side operand of ``node`` (broadcast into its output: a weight, a
    bias, a mask), not its main operand (the output's own shape); None: shapes unknown."""
    t = graph.tensors.get(tensor)
    out = graph.tensors.get(node.outputs[0]) if node.outputs else None
    if t is None or out is None or t.shape is None or out.shape is None:
        return None
    return tuple(t.shape) != tuple(out.shape)


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
    graph: Graph,
    nodes: Sequence[str],
    rule: Rule,
    entry: KernelEntry,
    form: Form | None = None,
) -> tuple[tuple[tuple[str, Any], ...], list[str]]:
    """The call's attributes and what contradicts ``form``: the rule's value, else a
    constant the form binds, else bound from the group, else the form's, else the default."""
    produced = _produced(graph, nodes)
    fixed = dict(form.attributes) if form is not None else {}
    bound = dict(form.bind) if form is not None else {}
    out: list[tuple[str, Any]] = []
    problems: list[str] = []
    for a in entry.attributes:
        value = None
        if a.name in rule.rewrite.attributes:
            value = rule.rewrite.attributes[a.name]
        elif a.name in bound:
            value = _constant(graph, nodes, produced, bound[a.name])
            if value is None:
                problems.append(f"attribute {a.name} binds no constant of the group")
        elif a.from_op is not None:
            found = _nodes_of(graph, nodes, a.from_op)
            if found:
                value = graph.node(found[0]).attributes.get(a.from_attribute or a.name)
        if value is None:
            value = fixed.get(a.name, a.default)
        if value is not None:
            out.append((a.name, _typed(a.type, value)))
        if (
            a.name in fixed
            and value is not None
            and _typed(a.type, value) != _typed(a.type, fixed[a.name])
        ):
            problems.append(
                f"form {form.name} computes {a.name}={fixed[a.name]}, the call says {value}"  # type: ignore[union-attr]
            )
    return tuple(out), problems


def _constant(
    graph: Graph, nodes: Sequence[str], produced: set[str], bindings: Sequence[Binding]
) -> Any:
    """The scalar value of the first constant a binding finds (None: none is constant);
    a ``dim`` binding's static dimension; the product over ``all`` bindings."""
    if any(b.all for b in bindings):
        return _product(graph, nodes, produced, bindings)
    for b in bindings:
        if b.dim is not None:
            value = _dim(graph, nodes, b)
            if value is not None:
                return value
            continue
        t = _resolve(graph, nodes, produced, b)
        value = _scalar(graph, t)
        if value is not None:
            if b.reciprocal:
                value = 1.0 / value if value else None
            return value
    return None


def _scalar(graph: Graph, tensor: str | None) -> float | None:
    """The value of a one-element tensor a compiler folds (None: not one)."""
    value = _folded(graph, tensor, {}) if tensor else None
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


_FOLD_NODES = 24  # producers evaluated for one tensor, at most
_FOLD_NUMEL = 64  # the largest intermediate evaluated (shape vectors, scalars)
_UNARY = {"Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Neg": np.negative, "Identity": np.asarray}
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power}
_VIEWS = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Flatten"})


def _folded(graph: Graph, tensor: str, seen: dict[str, Any]) -> np.ndarray | None:
    """The value of a small tensor a compiler folds (``const_foldable``): a constant, or
    arithmetic over constants and static shapes (torch's 1 / sqrt(head dim) from Shape,
    Slice, Cast, Sqrt and Div), evaluating at most _FOLD_NODES producers (``seen``: the
    values found so far); None when it is not such a tensor or uses an op not evaluated
    here."""
    if tensor in seen:
        return seen[tensor]
    if len(seen) >= _FOLD_NODES:
        return None
    seen[tensor] = None
    seen[tensor] = value = _fold(graph, tensor, seen)
    return value


def _fold(graph: Graph, tensor: str, seen: dict[str, Any]) -> np.ndarray | None:
    info = graph.tensors.get(tensor)
    if info is None:
        return None
    try:
        dtype = np.dtype(info.dtype) if info.dtype else None
    except TypeError:
        return None
    if info.const_value is not None:
        value = np.asarray(info.const_value, dtype=dtype)
        if info.is_static and value.size == info.numel:
            value = value.reshape(info.shape)  # type: ignore[arg-type]
        return value
    if (
        not info.const_foldable
        or info.producer is None
        or info.numel is None
        or info.numel > _FOLD_NUMEL
    ):
        return None
    node = graph.node(info.producer)
    if node.outputs[:1] != (tensor,):
        return None
    op, attrs = node.op_type, node.attributes
    if op in ("Shape", "Size"):
        src = graph.tensors.get(node.inputs[0])
        if src is None or not src.is_static:
            return None
        if op == "Size":
            return np.asarray(src.numel, dtype=np.int64)
        dims = list(src.shape or ())
        return np.asarray(dims[attrs.get("start") or 0 : attrs.get("end")], dtype=np.int64)
    args: list[np.ndarray | None] = []
    for t in node.inputs:
        args.append(_folded(graph, t, seen) if t else None)
        if args[0] is None:
            return None
    with np.errstate(all="ignore"):
        return _computed(op, attrs, args, info)


def _computed(
    op: str, attrs: Mapping[str, Any], args: list[np.ndarray | None], info: Any
) -> np.ndarray | None:
    """The output ``op`` computes from its folded inputs ``args`` (the first one given),
    or None for an op not folded here; ``info``: the output tensor."""
    x = args[0]
    if op in _UNARY:
        return np.asarray(_UNARY[op](x))
    if op == "Cast":
        return x.astype(onnxlite.np_dtype(int(attrs["to"])))
    if op in _VIEWS and info.is_static:
        return x.reshape(info.shape)  # type: ignore[arg-type]
    if len(args) < 2 or args[1] is None:
        return None
    y = args[1]
    if op in _BINARY:
        return np.asarray(_BINARY[op](x, y)).astype(x.dtype)
    if op == "Div":
        q = np.trunc(x / y) if np.issubdtype(x.dtype, np.integer) else x / y
        return np.asarray(q).astype(x.dtype)
    if op == "Gather":
        return np.take(x, y, axis=int(attrs.get("axis") or 0))
    if op == "Slice" and x.ndim == 1 and len(args) >= 3 and args[2] is not None:
        axes, steps = [
            None if a is None else a.reshape(-1).tolist() for a in [*args[3:5], None, None][:2]
        ]
        if axes not in (None, [0], [-1]) or steps not in (None, [1]):
            return None  # a slice of a 1-D shape vector only
        start, end = int(y.reshape(-1)[0]), int(args[2].reshape(-1)[0])
        return x[start:end]
    return None


def _product(
    graph: Graph, nodes: Sequence[str], produced: set[str], bindings: Sequence[Binding]
) -> float | None:
    """The product of the scalar constants the nodes of each ``all`` binding read (None:
    no node reads one)."""
    value, found = 1.0, False
    for b in bindings:
        for name in _nodes_of(graph, nodes, b.op):
            node = graph.node(name)
            if b.input == "external":
                ins = [t for t in node.inputs if t and t not in produced]
            else:
                k = int(b.input)  # type: ignore[arg-type]
                ins = [node.inputs[k]] if k < len(node.inputs) else []
            c = next((v for t in ins if (v := _scalar(graph, t)) is not None), None)
            if c is None:
                continue
            if b.reciprocal:
                if not c:
                    return None
                c = 1.0 / c
            value, found = value * c, True
    return value if found else None


def _dim(graph: Graph, nodes: Sequence[str], b: Binding) -> int | None:
    """A static dimension of the tensor node ``b`` reads (or writes), inside the group too."""
    found = _nodes_of(graph, nodes, b.op)
    if not -len(found) <= b.nth < len(found):
        return None
    node = graph.node(found[b.nth])
    names = node.outputs if b.output is not None else node.inputs
    k = b.output if b.output is not None else b.input
    if not isinstance(k, int) or k >= len(names) or not names[k]:
        return None
    info = graph.tensors.get(names[k])
    shape = info.shape if info is not None else None
    if shape is None or not -len(shape) <= b.dim < len(shape):  # type: ignore[operator]
        return None
    d = shape[b.dim]  # type: ignore[index]
    return d if isinstance(d, int) else None


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


def _bind_ports(
    graph: Graph,
    group: Any,
    rule: Rule,
    entry: KernelEntry,
    form: Form | None,
    nodes: _Members | None = None,
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Input and output port tensors (the rule's rewrite.inputs, else the form's bindings,
    else the entry's), and what does not bind. ``nodes``: the group's, when made."""
    nodes = _Members(graph, group.nodes) if nodes is None else nodes
    produced = nodes.produced
    overrides = dict(form.bind) if form is not None else {}
    ins: dict[str, str] = {}
    problems: list[str] = []
    for i, port in enumerate(entry.inputs or ()):
        named, tensor = _rule_port(graph, group, rule, i)
        if not named:
            tensor = next(
                (
                    t
                    for b in overrides.get(port.name, port.bind)
                    if (t := _resolve(graph, nodes, produced, b))
                ),
                None,
            )
        if tensor is not None and tensor in produced:
            problems.append(f"port {port.name} bound to {tensor}, produced inside the group")
        elif tensor is not None:
            ins[port.name] = tensor
        elif (not port.optional and (form is None or port.name in form.inputs)) or named:
            problems.append(f"input port {port.name} binds no tensor of the group")
    outs: dict[str, str] = {}
    for port in entry.outputs or ():
        bindings = overrides.get(port.name, port.bind)
        tensor = next((t for b in bindings if (t := _resolve(graph, nodes, produced, b))), None)
        if tensor is not None:
            outs[port.name] = tensor
    return ins, outs, problems


def _at_opset(
    form: Form, opset: int, attrs: tuple[tuple[str, Any], ...], memo: dict[tuple, Any] | None
) -> tuple[Form, list[str]]:
    """``catalog.at_opset`` (a pure function of the form, the opset and the call's
    attributes), computed once per distinct triple when ``memo`` is given: a stack of
    repeated layers binds the same form with the same attributes thousands of times."""
    if memo is None:
        return at_opset(form, opset, dict(attrs))
    key = (id(form), opset, repr(attrs))
    got = memo.get(key)
    if got is None or got[0] is not form:  # the memo holds the form: its id stays its own
        got = memo[key] = (form, at_opset(form, opset, dict(attrs)))
    out, invalid = got[1]
    return out, list(invalid)


def bind(
    graph: Graph,
    group: Any,
    rule: Rule,
    entry: KernelEntry,
    memo: dict[tuple, Any] | None = None,
) -> tuple[Call | None, Contract]:
    """Bind ``group`` to ``entry``: a Call (None when the kernel has no reference
    semantics or does not fit) and the Contract record for the plan. ``memo``: a dict
    the caller keeps across groups (results that depend on no tensor are shared)."""
    base = Contract(
        entry.name,
        entry.version,
        source=entry.location.file if entry.location else None,
    )
    nodes = _Members(graph, group.nodes)
    ops = tuple(group.op_types)
    fitting = [f for f in entry.forms if f.ops is None or ops in f.ops]
    if not fitting and (not entry.forms or entry.structure is not None):
        return None, _structural(graph, group, rule, entry, nodes, base)
    first: tuple[Any, ...] | None = None
    for form in fitting:
        ins, outs, problems = _bind_ports(graph, group, rule, entry, form, nodes)
        if graph.opset < form.min_opset:
            problems.append(f"its body needs opset {form.min_opset}, the model has {graph.opset}")
        attrs, contradictions = attribute_values(graph, nodes, rule, entry, form)
        problems += contradictions
        if graph.opset >= form.min_opset:
            form, invalid = _at_opset(form, graph.opset, attrs, memo)
            problems += invalid
        if entry.outputs is not None:
            missing = [t for t in group.outputs if t not in outs.values()]
            if missing:
                problems.append(f"tensor {missing[0]} leaves the group but no kernel output is it")
        optional = {p.name for p in entry.inputs or () if p.optional}
        problems += [
            f"input port {p} binds no tensor of the group"
            for p in form.inputs
            if p not in ins
            and p not in optional
            and f"input port {p} binds no tensor of the group" not in problems
        ]
        ports = tuple(ins.items()) + tuple(outs.items())
        if not problems:
            call = Call(
                entry,
                form,
                tuple(ins.get(p, "") for p in form.inputs),
                tuple(
                    outs.get(p, "") if outs.get(p) in group.outputs else "" for p in form.outputs
                ),
                attrs,
                _float_type(graph, ins.values()),
            )
            if (why := shape_problem(graph, call, memo)) is not None:
                problems.append(why)
        if not problems:
            return call, _with(base, status="bound", form=form.name, ports=ports, attributes=attrs)
        first = first or (ports, attrs, [f"form {form.name}: {p}" for p in problems])
    if first is None:
        ins, outs, _ = _bind_ports(graph, group, rule, entry, None, nodes)
        attrs, _ = attribute_values(graph, nodes, rule, entry)
        reason = (
            f"no form of {entry.name} ({', '.join(f.name for f in entry.forms)}) fits ops "
            f"{' '.join(group.op_types)}"
        )
        first = (tuple(ins.items()) + tuple(outs.items()), attrs, [reason])
    ports, attrs, problems = first
    return None, _with(
        base, status="unbound", ports=ports, attributes=attrs, reason="; ".join(problems)
    )


def _structural(
    graph: Graph, group: Any, rule: Rule, entry: KernelEntry, nodes: _Members, base: Contract
) -> Contract:
    """The contract of a group no form fits: no reference semantics for its structure,
    so the structural contract, if any (a generated kernel's ports are the group's own
    inputs and outputs)."""
    ins, outs, problems = _bind_ports(graph, group, rule, entry, None, nodes)
    if entry.forms:
        problems = []
    attrs, _ = attribute_values(graph, nodes, rule, entry)
    ports = tuple(ins.items()) + tuple(outs.items())
    if entry.structure is None:
        return _with(base, status="no-reference", ports=ports, attributes=attrs)
    from ruleengine.kernels.structure import check

    problems += check(graph, nodes, group.outputs, entry.structure)
    if problems:
        return _with(
            base, status="unbound", ports=ports, attributes=attrs, reason="; ".join(problems)
        )
    return _with(base, status="structural", ports=ports, attributes=attrs)


def bind_groups(
    graph: Graph, groups: Sequence[Any], rule_set: Any, catalog: Catalog
) -> tuple[tuple[Any, ...], dict[int, Call]]:
    """Each group (rewrite.model.FusedGroup) with its contract, and the calls of the
    groups bound to reference semantics (by group id)."""
    rules = rule_set.by_name()
    out, calls = [], {}
    memo: dict[tuple, Any] = {}
    for g in groups:
        entry = catalog.get(g.target_op)
        if entry is None:
            out.append(replaced(g, contract=Contract(None)))
            continue
        call, contract = bind(graph, g, rules[g.rule], entry, memo)
        if call is not None:
            calls[g.id] = call
        out.append(replaced(g, contract=contract))
    return tuple(out), calls


_FLOAT_TYPES = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}  # ONNX elem types


def _float_type(graph: Graph, tensors: Any) -> int | None:
    """The ONNX element type of the first float tensor among ``tensors``."""
    for t in tensors:
        info = graph.tensors.get(t)
        if info is not None and info.dtype in _FLOAT_TYPES:
            return _FLOAT_TYPES[info.dtype]
    return None


def _with(c: Contract, **changes: Any) -> Contract:
    return replaced(c, **changes)
