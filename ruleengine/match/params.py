"""Param values compared by meaning, and the param checks of one bound pattern op.

Numbers compare with relative tolerance 1e-6 (a YAML 1.1 string like ``"1e-5"`` is a
number), ``true == 1``, lists equal tuples, an absent attribute is its ONNX default (the
loader fills defaults in). Framework aliases map params onto ONNX via the alias table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ruleengine.graph import onnxlite
from ruleengine.graph.model import Graph, Node, Tensor
from ruleengine.graph.shapes import broadcast_compatible
from ruleengine.ops.composites import CompositeForm, composites
from ruleengine.ops.model import OpAlias, ParamKind, ParamMapping

REL_TOL = 1e-6

_MISSING = object()


def as_number(value: Any) -> float | None:
    """A number, or a string YAML 1.1 left unparsed (``"1e-5"``); else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def one_of_options(want: Any) -> list[Any]:
    """The values a rule param accepts: ``{one_of: [a, b]}`` -> [a, b], else [want]."""
    if isinstance(want, Mapping) and set(want) == {"one_of"}:
        opts = want["one_of"]
        return list(opts) if isinstance(opts, list | tuple) else [opts]
    return [want]


def values_equal(want: Any, have: Any) -> bool:
    """Rule value ``want`` equals graph value ``have`` by meaning (``{one_of: [...]}``:
    any of the values)."""
    opts = one_of_options(want)
    if len(opts) > 1 or opts[0] is not want:
        return any(values_equal(w, have) for w in opts)
    if isinstance(want, Mapping) or isinstance(have, Mapping):
        return dict(want) == dict(have) if isinstance(have, Mapping) else False
    want_seq = isinstance(want, (list, tuple))
    have_seq = isinstance(have, (list, tuple))
    if want_seq or have_seq:
        if not want_seq:
            want = (want,)
        if not have_seq:
            have = (have,)
        return len(want) == len(have) and all(
            values_equal(w, h) for w, h in zip(want, have, strict=True)
        )
    wn, hn = as_number(want), as_number(have)
    if wn is not None and hn is not None:
        if math.isnan(wn) or math.isnan(hn):
            return math.isnan(wn) and math.isnan(hn)
        return math.isclose(wn, hn, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(want, str) and isinstance(have, str):
        return want == have or want.lower() == have.lower()
    return bool(want == have)


def _schema_has_attr(node: Node, name: str, opset: int) -> bool:
    try:
        return name in onnxlite.get_schema(node.op_type, opset, node.domain).attributes
    except Exception:
        return False


class ParamFailure(Exception):
    """A param check failed: ``code`` (param-mismatch | dynamic-shape) and a reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v) if isinstance(v, str) else str(v)


# ---------------------------------------------------------------- shape checks


def _shapes(graph: Graph, names: Sequence[str], what: str) -> list[tuple]:
    out = []
    for t in names:
        tensor = graph.tensors.get(t)
        if tensor is None or tensor.shape is None or any(d is None for d in tensor.shape):
            raise ParamFailure("dynamic-shape", f"the shape of {what} {t!r} is unknown")
        out.append(tensor.shape)
    return out


def shape_check(check: str, value: Any, graph: Graph, binding: Binding, where: str) -> None:
    if check == "broadcast":
        ins = binding.data_inputs(graph)
        if len(ins) < 2:
            return
        shapes = _shapes(graph, ins, "input")
        if as_number(value):
            ok = broadcast_compatible(shapes)
            if not ok:
                raise ParamFailure(
                    "param-mismatch",
                    f"{where}: broadcast: true, but input shapes "
                    f"{', '.join(_fmt(s) for s in shapes)} are not broadcast-compatible",
                )
        elif any(s != shapes[0] for s in shapes):
            raise ParamFailure(
                "param-mismatch",
                f"{where}: broadcast: false, but input shapes differ: "
                f"{', '.join(_fmt(s) for s in shapes)}",
            )
    elif check == "normalized_shape":
        x = binding.main_input(graph)
        if x is None:
            raise ParamFailure("param-mismatch", f"{where}: no input to check normalized_shape")
        (shape,) = _shapes(graph, [x], "input")
        want = tuple(value) if isinstance(value, (list, tuple)) else (value,)
        if len(shape) < len(want) or not values_equal(want, shape[len(shape) - len(want) :]):
            raise ParamFailure(
                "param-mismatch",
                f"{where}: normalized_shape {_fmt(want)}, but the input has shape {_fmt(shape)}",
            )
    elif check == "elementwise_affine":
        affine = binding.affine()
        if affine is None:
            return
        if bool(as_number(value)) != affine:
            raise ParamFailure(
                "param-mismatch",
                f"{where}: elementwise_affine: {_fmt(value)}, but the matched form "
                f"{'applies' if affine else 'applies no'} scale",
            )
    # unknown checks are lint findings; nothing to evaluate here


# ---------------------------------------------------------------- a bound op


class Binding:
    """The nodes one pattern op bound: one node, a composite form, or a repeat chain."""

    def __init__(self, nodes: tuple[Node, ...], form: CompositeForm | None = None) -> None:
        self.nodes = nodes
        self.form = form
        self._vars: dict[str, str] | None = None

    @property
    def node(self) -> Node:
        return self.nodes[0]

    def external_vars(self) -> dict[str, str]:
        """Composite ``$name`` -> the graph tensor bound to it."""
        if self._vars is None:
            self._vars = {}
            if self.form is not None:
                by_id = dict(zip((n.id for n in self.form.nodes), self.nodes, strict=True))
                produced = {t for n in self.nodes for t in n.outputs}
                for fnode in self.form.nodes:
                    gnode = by_id[fnode.id]
                    ext = [r for r in fnode.inputs if r.kind == "external"]
                    if not ext:
                        continue
                    free = [t for t in gnode.inputs if t and t not in produced]
                    # a constant input is one of the form's constants, not a $var, unless
                    # it is the only candidate
                    for r in ext:
                        pick = next(
                            (t for t in free if t not in self._vars.values()),
                            free[0] if free else None,
                        )
                        if pick is not None and r.name not in self._vars:
                            self._vars[r.name] = pick
        return self._vars

    def main_input(self, graph: Graph) -> str | None:
        if self.form is not None:
            return self._main_composite_input(graph)
        return next((t for t in self.node.inputs if t), None)

    def _main_composite_input(self, graph: Graph) -> str | None:
        by_id = dict(zip((n.id for n in self.form.nodes), self.nodes, strict=True))
        produced = {t for n in self.nodes for t in n.outputs}
        entry = self.form.entry
        gnode = by_id[entry.id]
        for port, r in enumerate(entry.inputs):
            if r.kind == "external" and r.name == "x":
                if port < len(gnode.inputs) and gnode.inputs[port] not in produced:
                    t = gnode.inputs[port]
                    tensor = graph.tensors.get(t)
                    if tensor is not None and not tensor.is_constant:
                        return t
        for t in gnode.inputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is not None and t not in produced and not tensor.is_constant:
                return t
        return None

    def external_inputs(self, graph: Graph) -> list[str]:
        produced = {t for n in self.nodes for t in n.outputs}
        seen: list[str] = []
        for n in self.nodes:
            for t in n.inputs:
                if t and t not in produced and t not in seen:
                    seen.append(t)
        return seen

    def data_inputs(self, graph: Graph) -> list[str]:
        """Inputs that are not constants (weights, Constant outputs excluded)."""
        out = []
        for t in self.external_inputs(graph):
            tensor = graph.tensors.get(t)
            if tensor is not None and not tensor.is_constant:
                out.append(t)
        if self.form is None and len(out) < 2:
            # a binary op with a constant operand still broadcasts against it
            return self.external_inputs(graph)
        return out

    def affine(self) -> bool | None:
        if self.form is not None:
            return self.form.affine
        n = self.node
        if n.op_type in ("LayerNormalization", "RMSNormalization", "GroupNormalization"):
            return len(n.inputs) > 1 and bool(n.inputs[1])
        return None


# ---------------------------------------------------------------- param checks


def _input_const(
    graph: Graph, node: Node, m: ParamMapping, where: str, name: str
) -> tuple[bool, Any]:
    if m.onnx_attr and m.attr_before_opset is not None and graph.opset < m.attr_before_opset:
        v = node.attributes.get(m.onnx_attr, _MISSING)
        return (True, m.default) if v is _MISSING else (True, v)
    idx = m.input_index if m.input_index is not None else 1
    if idx >= len(node.inputs) or not node.inputs[idx]:
        return True, m.default
    tensor: Tensor | None = graph.tensors.get(node.inputs[idx])
    if tensor is None or not tensor.is_constant:
        raise ParamFailure(
            "param-mismatch", f"{where}: {name} comes from input {idx}, which is not a constant"
        )
    if tensor.const_value is None:
        raise ParamFailure(
            "param-mismatch", f"{where}: {name}: the value of input {idx} is not stored"
        )
    cv = tensor.const_value
    return True, cv[0] if len(cv) == 1 else cv


def _composite_param(graph: Graph, b: Binding, onnx_name: str) -> Any:
    comp = composites().get(b.form.composite) if b.form else None
    if comp is None:
        return _MISSING
    var = comp.params.get(onnx_name)
    if var is None:
        return _MISSING
    t = b.external_vars().get(var)
    tensor = graph.tensors.get(t) if t else None
    if tensor is None or tensor.const_value is None:
        return _MISSING
    return tensor.const_value[0] if len(tensor.const_value) == 1 else tensor.const_value


def check_params(
    graph: Graph,
    op_type: str,
    params: Mapping[str, Any],
    alias: OpAlias | None,
    binding: Binding,
    where: str,
) -> None:
    """Raise ParamFailure on the first param that does not hold for ``binding``."""
    if not params and (alias is None or not alias.implied_params):
        return  # nothing to check (most ops of most rules)
    merged = dict(alias.implied_params) if alias is not None else {}
    merged.update(params)
    for name, want in merged.items():
        opts = one_of_options(want)
        if len(opts) == 1:
            _check_param(graph, op_type, alias, binding, where, name, opts[0])
            continue
        failures: list[ParamFailure] = []
        for value in opts:
            try:
                _check_param(graph, op_type, alias, binding, where, name, value)
                break
            except ParamFailure as exc:
                failures.append(exc)
        else:
            raise ParamFailure(
                failures[0].code,
                f"{where}: {name}: none of {_fmt(opts)} holds ({failures[0].reason})",
            )


def _check_param(
    graph: Graph,
    op_type: str,
    alias: OpAlias | None,
    binding: Binding,
    where: str,
    name: str,
    want: Any,
) -> None:
    """Raise ParamFailure unless param ``name`` has value ``want`` on ``binding``."""
    m: ParamMapping | None = alias.params.get(name) if alias is not None else None
    kind = m.kind if m is not None else ParamKind.ATTR
    if kind is ParamKind.ALWAYS:
        if not values_equal(want, m.always):
            raise ParamFailure(
                "param-mismatch",
                f"{where}: {name} is always {_fmt(m.always)} on {op_type}, "
                f"the rule asks for {_fmt(want)}",
            )
        return
    if kind is ParamKind.SHAPE:
        check = m.check or name
        # the reason names the check and its value ("broadcast: false, but ..."); the
        # param's own name only when it is another
        shape_check(check, want, graph, binding, where if check == name else f"{where}: {name}")
        return
    if kind is ParamKind.VARIANT:
        _check_variant(m, binding, where, name, want)
        return
    if binding.form is not None:
        _check_composite_param(graph, m, binding, where, name, want)
        return
    for node in binding.nodes:
        if kind is ParamKind.INPUT_CONST:
            _, have = _input_const(graph, node, m, where, name)
            if not values_equal(want, have):
                raise ParamFailure(
                    "param-mismatch",
                    f"{where}: {name} is {_fmt(have)} on node {node.name!r}, expected {_fmt(want)}",
                )
        else:
            _check_node_attr(graph, node, m, where, name, want)


def _check_variant(m: ParamMapping, binding: Binding, where: str, name: str, want: Any) -> None:
    """A variant param: the composite form matched, or the node's attribute."""
    if binding.form is not None:
        target = m.variants.get(str(want).lower(), m.variants.get(str(want)))
        got = binding.form.composite
        if target is not None and target != got and binding.form.variant != target:
            raise ParamFailure(
                "param-mismatch",
                f"{where}: {name}: {_fmt(want)} means the {target} form; matched "
                f"the {got} form ({binding.form.name})",
            )
        return
    have = binding.node.attributes.get(name, _MISSING)
    if have is not _MISSING and not values_equal(want, have):
        raise ParamFailure(
            "param-mismatch", f"{where}: {name} is {_fmt(have)}, expected {_fmt(want)}"
        )


def _check_composite_param(
    graph: Graph, m: ParamMapping | None, binding: Binding, where: str, name: str, want: Any
) -> None:
    """A param of a decomposed composite, where its nodes show it."""
    onnx_name = m.onnx_attr if m is not None and m.onnx_attr else name
    have = _composite_param(graph, binding, onnx_name)
    if have is _MISSING:
        return  # not visible on the decomposed form
    if not values_equal(want, have):
        raise ParamFailure(
            "param-mismatch",
            f"{where}: {name} is {_fmt(have)} in the decomposed "
            f"{binding.form.composite}, expected {_fmt(want)}",
        )


def _check_node_attr(
    graph: Graph, node: Node, m: ParamMapping | None, where: str, name: str, want: Any
) -> None:
    """An attribute param on one node (through the alias's name and value map)."""
    attr = m.onnx_attr if m is not None and m.onnx_attr else name
    shown = name if attr == name else f"{name} ({attr})"
    if m is not None and len(m.value_map):
        want_onnx = m.value_map.get(str(want), m.value_map.get(want, want))
    else:
        want_onnx = want
    have = node.attributes.get(attr, _MISSING)
    if have is _MISSING:
        if not _schema_has_attr(node, attr, graph.opsets.get(node.domain, graph.opset)):
            # not an attribute of this op (a misspelling?): it never holds, so
            # the rule cannot match more than it says (check reports AF303)
            raise ParamFailure(
                "param-mismatch",
                f"{where}: {node.op_type} has no parameter {shown!r} (node "
                f"{node.name!r}); the rule asks for {_fmt(want)}",
            )
        raise ParamFailure(
            "param-mismatch",
            f"{where}: {shown} is not set on node {node.name!r} and has no "
            f"default, expected {_fmt(want)}",
        )
    if not values_equal(want_onnx, have):
        raise ParamFailure(
            "param-mismatch",
            f"{where}: {shown} is {_fmt(have)} on node {node.name!r}, expected {_fmt(want_onnx)}",
        )
