"""Rule tests for a drafted rule, cut from the model it was drafted from.

In the layout ``autofusion test`` runs (docs/rule-tests.md): ``<rule>.tests/*.onnxtxt``.

- positive: the first region of the cluster as a graph of its own; its external data
  inputs become graph inputs, constants of up to 64 values stay Constant nodes (so the
  constants a composite is recognised by survive), other constants become ``W_*``
  inputs (random weights; plain graph inputs when over 65,536 elements, which the
  matcher does not tell apart); tensors that leave the region are graph outputs.
  Expectation: ``# match:`` the region's nodes.
- negative, a near structure: the same graph with one internal link cut (the last
  pattern op reads a fresh graph input instead of its producer's output).
  Expectation: ``# no-match``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import onnx
import onnx.printer
from onnx import helper

from ruleengine.graph.model import Graph
from ruleengine.suggest.model import DraftRule, Instance

_ONNX_DTYPES = {
    name: code
    for code, name in (
        (onnx.TensorProto.FLOAT, "float32"),
        (onnx.TensorProto.FLOAT16, "float16"),
        (onnx.TensorProto.BFLOAT16, "bfloat16"),
        (onnx.TensorProto.DOUBLE, "float64"),
        (onnx.TensorProto.INT8, "int8"),
        (onnx.TensorProto.UINT8, "uint8"),
        (onnx.TensorProto.INT16, "int16"),
        (onnx.TensorProto.INT32, "int32"),
        (onnx.TensorProto.INT64, "int64"),
        (onnx.TensorProto.BOOL, "bool"),
    )
}


MAX_TEST_WEIGHT_ELEMS = 1 << 16


def _dtype(name: str | None) -> int:
    return _ONNX_DTYPES.get(name or "", onnx.TensorProto.FLOAT)


def _shape(dims) -> list | None:  # noqa: ANN001
    if dims is None:
        return None
    return [d if isinstance(d, int) else (d if isinstance(d, str) else "d") for d in dims]


def _attrs(attributes) -> dict:  # noqa: ANN001
    out = {}
    for k, v in attributes.items():
        if v is None or (isinstance(v, tuple) and not v):
            continue  # an empty list has no attribute type; the default applies anyway
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def _ident(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def region_model(
    graph: Graph,
    nodes: Sequence[str],
    cut: tuple[str, str] | None = None,
    *,
    computed_constants: bool = False,
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The region as a model of its own; ``cut`` = (node, tensor): that node reads a fresh
    graph input instead of ``tensor``. Returns the model and node name -> name in it.
    ``computed_constants``: an outside input computed from constants (an Identity or Cast
    of a weight, as TorchScript exports share them) is one here too, an Identity of the
    constant outside the region, not the constant itself: the matcher counts it among the
    non-constant inputs (``input_count_range``) there as in the model."""
    inside = set(nodes)
    produced = {t for n in nodes for t in graph.node(n).outputs if t}
    tensor_name: dict[str, str] = {}
    node_name: dict[str, str] = {}
    inputs: list[onnx.ValueInfoProto] = []
    consts: list[onnx.NodeProto] = []

    def ext(t: str) -> str:
        if t in tensor_name:
            return tensor_name[t]
        tensor = graph.tensors[t]
        shape = _shape(tensor.shape)
        foldable = tensor.is_initializer or tensor.is_constant or tensor.const_foldable
        if foldable and tensor.const_value is not None and tensor.is_static:
            name = f"c{len(tensor_name)}"
            value = helper.make_tensor(
                name, _dtype(tensor.dtype), shape or [], list(tensor.const_value)
            )
            consts.append(
                helper.make_node("Constant", [], [name], name=f"const_{name}", value=value)
            )
        else:
            # a weight stays a constant (W_*: random data at test time) unless it is big:
            # an LLM's projection would make the test run allocate it, for no matching use
            small = (tensor.numel or 0) <= MAX_TEST_WEIGHT_ELEMS
            name = f"W_{len(tensor_name)}" if foldable and small else f"x{len(tensor_name)}"
            inputs.append(helper.make_tensor_value_info(name, _dtype(tensor.dtype), shape))
        if computed_constants and tensor.const_foldable and not tensor.is_constant:
            consts.append(helper.make_node("Identity", [name], [f"{name}_id"], name=f"id_{name}"))
            name = f"{name}_id"
        tensor_name[t] = name
        return name

    body = []
    for k, n in enumerate(nodes):
        node = graph.node(n)
        node_name[n] = f"{_ident(node.op_type).lower()}_{k}"
        ins = []
        for t in node.inputs:
            if not t:
                ins.append("")
            elif cut is not None and cut == (n, t):
                fresh = f"cut_{len(tensor_name)}"
                tensor = graph.tensors[t]
                inputs.append(
                    helper.make_tensor_value_info(fresh, _dtype(tensor.dtype), _shape(tensor.shape))
                )
                ins.append(fresh)
            elif t in produced:
                ins.append(tensor_name.setdefault(t, f"t{len(tensor_name)}"))
            else:
                ins.append(ext(t))
        outs = [
            tensor_name.setdefault(t, f"t{len(tensor_name)}") if t else "" for t in node.outputs
        ]
        body.append(
            helper.make_node(
                node.op_type,
                ins,
                outs,
                name=node_name[n],
                domain=node.domain or None,
                **_attrs(node.attributes),
            )
        )
    outputs = []
    for n in nodes:
        for t in graph.node(n).outputs:
            tensor = graph.tensors.get(t) if t else None
            if tensor is None:
                continue
            leaves = tensor.is_graph_output or any(c not in inside for c, _ in tensor.consumers)
            if leaves or not tensor.consumers:
                outputs.append(
                    helper.make_tensor_value_info(
                        tensor_name[t], _dtype(tensor.dtype), _shape(tensor.shape)
                    )
                )
    g = helper.make_graph(consts + body, "region", inputs, outputs)
    opsets = [
        helper.make_opsetid(d, v) for d, v in sorted((graph.opsets or {"": graph.opset}).items())
    ]
    model = helper.make_model(g, opset_imports=opsets, ir_version=8)
    return model, node_name


def rule_tests(
    graph: Graph,
    draft: DraftRule,
    attempt: int = 0,
    also: Sequence[Sequence[str]] = (),
) -> dict[str, str]:
    """Test file name -> ONNX text with its expectation, for the draft's first instance
    found in ``graph``; ``attempt`` k cuts the k-th link from the end instead. ``also``:
    more node sets (names in the test graph) the rule matches there besides the region
    (e.g. a composite with and without its optional last op), expected as well."""
    inst = draft.cluster.instances[0]
    nodes = inst.region.nodes
    source = f"# Cut from {inst.model}: nodes {nodes[0]} .. {nodes[-1]} ({len(nodes)} nodes).\n"
    # a rule pinned to its regions' input count must meet the inputs as the model has them
    computed = "input_count_range" in draft.text
    model, names = region_model(graph, nodes, computed_constants=computed)
    region_line = f"# match: {','.join(names[n] for n in nodes)}\n"
    more = "".join(f"# match: {','.join(ns)}\n" for ns in also)
    if more:
        more = "# It also matches these overlapping node sets (the solver picks one):\n" + more
    files = {
        "positive_region.onnxtxt": source + region_line + more + onnx.printer.to_text(model) + "\n"
    }
    cut = _link(graph, inst, attempt)
    if cut is not None:
        near, _ = region_model(graph, nodes, cut, computed_constants=computed)
        files["negative_link_cut.onnxtxt"] = (
            source
            + f"# A near structure: {names[cut[0]]} reads a graph input instead of its producer.\n"
            + "# no-match\n"
            + onnx.printer.to_text(near)
            + "\n"
        )
    return files


def _link(graph: Graph, inst: Instance, k: int) -> tuple[str, str] | None:
    """(node, tensor) of the k-th internal link between pattern ops, from the end."""
    links = []
    for unit in reversed(inst.units):
        for ref in reversed(unit.inputs):
            producer_nodes = set(inst.units[ref.source].nodes)
            hit = next(
                (
                    (n, t)
                    for n in unit.nodes
                    for t in graph.node(n).inputs
                    if t and graph.tensors[t].producer in producer_nodes
                ),
                None,
            )
            if hit is not None:
                links.append(hit)
    return links[k] if k < len(links) else None


MAX_CUT_ATTEMPTS = 3
