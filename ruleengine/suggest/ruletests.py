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
- per branch the draft writes (``branch_tests``; ``DraftRule.branches``), the positive
  transformed as the branch describes: without its no-op Casts (their readers read the
  Cast's input), or with an inference BatchNormalization (constant ``W_*`` inputs) after
  each bare Conv (its readers read the BatchNormalization). Expectation: ``# match:`` the
  transformed region's nodes; a negative cuts the link the branch made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import onnx
import onnx.printer
from onnx import helper

from ruleengine.graph.model import Graph, Tensor
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


def _shape(dims: Sequence[int | str | None] | None) -> list | None:
    if dims is None:
        return None
    return [d if isinstance(d, int) else (d if isinstance(d, str) else "d") for d in dims]


def _attrs(attributes: Mapping[str, object]) -> dict:
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
    writer = _RegionWriter(graph, computed_constants)
    produced = {t for n in nodes for t in graph.node(n).outputs if t}
    node_name: dict[str, str] = {}
    body = []
    for k, n in enumerate(nodes):
        node_name[n] = f"{_ident(graph.node(n).op_type).lower()}_{k}"
        body.append(writer.node(n, node_name[n], produced, cut))
    outputs = writer.outputs(nodes)
    g = helper.make_graph(writer.consts + body, "region", writer.inputs, outputs)
    opsets = [
        helper.make_opsetid(d, v) for d, v in sorted((graph.opsets or {"": graph.opset}).items())
    ]
    model = helper.make_model(g, opset_imports=opsets, ir_version=8)
    return model, node_name


class _RegionWriter:
    """Names the region's tensors in the test graph, in the order they are met, and
    collects the graph inputs and Constant nodes its outside inputs become."""

    def __init__(self, graph: Graph, computed_constants: bool) -> None:
        self.graph, self.computed_constants = graph, computed_constants
        self.tensor_name: dict[str, str] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.consts: list[onnx.NodeProto] = []

    def external(self, t: str) -> str:
        """The name of an input from outside the region (a Constant, ``W_*`` or ``x*``)."""
        if t in self.tensor_name:
            return self.tensor_name[t]
        tensor = self.graph.tensors[t]
        shape = _shape(tensor.shape)
        foldable = tensor.is_initializer or tensor.is_constant or tensor.const_foldable
        count = len(self.tensor_name)
        if foldable and tensor.const_value is not None and tensor.is_static:
            name = f"c{count}"
            value = helper.make_tensor(
                name, _dtype(tensor.dtype), shape or [], list(tensor.const_value)
            )
            self.consts.append(
                helper.make_node("Constant", [], [name], name=f"const_{name}", value=value)
            )
        else:
            # a weight stays a constant (W_*: random data at test time) unless it is big:
            # an LLM's projection would make the test run allocate it, for no matching use
            small = (tensor.numel or 0) <= MAX_TEST_WEIGHT_ELEMS
            name = f"W_{count}" if foldable and small else f"x{count}"
            self.inputs.append(helper.make_tensor_value_info(name, _dtype(tensor.dtype), shape))
        if self.computed_constants and tensor.const_foldable and not tensor.is_constant:
            self.consts.append(
                helper.make_node("Identity", [name], [f"{name}_id"], name=f"id_{name}")
            )
            name = f"{name}_id"
        self.tensor_name[t] = name
        return name

    def internal(self, t: str) -> str:
        """The name of a tensor the region produces."""
        return self.tensor_name.setdefault(t, f"t{len(self.tensor_name)}")

    def node(
        self, n: str, name: str, produced: set[str], cut: tuple[str, str] | None
    ) -> onnx.NodeProto:
        """Node ``n`` in the test graph (named ``name``), reading a fresh input at ``cut``."""
        node = self.graph.node(n)
        ins = []
        for t in node.inputs:
            if not t:
                ins.append("")
            elif cut is not None and cut == (n, t):
                fresh = f"cut_{len(self.tensor_name)}"
                tensor = self.graph.tensors[t]
                self.inputs.append(
                    helper.make_tensor_value_info(fresh, _dtype(tensor.dtype), _shape(tensor.shape))
                )
                ins.append(fresh)
            elif t in produced:
                ins.append(self.internal(t))
            else:
                ins.append(self.external(t))
        outs = [self.internal(t) if t else "" for t in node.outputs]
        return helper.make_node(
            node.op_type,
            ins,
            outs,
            name=name,
            domain=node.domain or None,
            **_attrs(node.attributes),
        )

    def outputs(self, nodes: Sequence[str]) -> list[onnx.ValueInfoProto]:
        """The tensors that leave the region (or that nothing reads), as graph outputs."""
        inside = set(nodes)
        outputs = []
        for n in nodes:
            for t in self.graph.node(n).outputs:
                tensor = self.graph.tensors.get(t) if t else None
                if tensor is None:
                    continue
                leaves = tensor.is_graph_output or any(c not in inside for c, _ in tensor.consumers)
                if leaves or not tensor.consumers:
                    outputs.append(
                        helper.make_tensor_value_info(
                            self.tensor_name[t], _dtype(tensor.dtype), _shape(tensor.shape)
                        )
                    )
        return outputs


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
    more = _overlapping(also)
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


# File names of the branch tests (``branch_tests``), one pair per kind of branch.
NOOP_CAST_BRANCH = "branch_without_noop_casts"
BN_BRANCH = "branch_bn_after_conv"


def branch_tests(
    graph: Graph,
    draft: DraftRule,
    also: Mapping[str, Sequence[Sequence[str]]] | None = None,
) -> dict[str, str]:
    """Test file name -> ONNX text, per branch the draft writes: its first region as the
    branch's export has it, expected to match (``# match:`` those nodes), and where the
    branch adds a link, the same with that link cut, expected to match nothing. Without
    them nothing shows a branch matches the export it is written for. ``also``: per
    positive's file name, more node sets (names in its graph) the rule matches there
    besides the transformed region (overlapping), expected as well."""
    dropped, bn_after = draft.branches
    if not dropped and not bn_after:
        return {}
    inst = draft.cluster.instances[0]
    nodes = inst.region.nodes
    computed = "input_count_range" in draft.text
    region = _Cut(graph, inst, *region_model(graph, nodes, computed_constants=computed))
    files: dict[str, str] = {}
    if dropped:
        files.update(_noop_cast_tests(region, dropped, also or {}))
    if bn_after:
        files.update(_bn_tests(region, bn_after, also or {}))
    return files


class _Cut(NamedTuple):
    """A draft's first region cut from its model: the test graph and its node names."""

    graph: Graph
    inst: Instance
    model: onnx.ModelProto
    names: dict[str, str]

    @property
    def source(self) -> str:
        nodes = self.inst.region.nodes
        return (
            f"# Cut from {self.inst.model}: nodes {nodes[0]} .. {nodes[-1]} ({len(nodes)} nodes).\n"
        )


def _noop_cast_tests(
    region: _Cut, dropped: Sequence[int], also: Mapping[str, Sequence[Sequence[str]]]
) -> dict[str, str]:
    """The branch without the no-op Casts: positive, and a negative where it adds a link."""
    graph, inst, model, names = region
    source = region.source
    casts = [inst.units[k].nodes[0] for k in dropped]
    bare, cut = _without_casts(model, names, casts)
    like = graph.tensors[graph.node(casts[0]).inputs[0]]  # a no-op: its output's type
    kept = [names[n] for n in inst.region.nodes if n not in set(casts)]
    positive = f"positive_{NOOP_CAST_BRANCH}.onnxtxt"
    more = _overlapping(also.get(positive, ()))
    what = (
        f"# Branch: the pattern without its {len(casts)} no-op Cast op(s) "
        f"({', '.join(names[c] for c in casts)} left out, their readers read their input),\n"
        "# as an export that writes no Cast there has it.\n"
    )
    files = {
        positive: source
        + what
        + f"# match: {','.join(kept)}\n"
        + more
        + onnx.printer.to_text(bare)
        + "\n"
    }
    if cut is not None:
        files[f"negative_{NOOP_CAST_BRANCH}_link_cut.onnxtxt"] = (
            source
            + what
            + f"# A near structure: {cut[0]} reads a graph input instead of the Cast's "
            "input.\n" + "# no-match\n" + onnx.printer.to_text(_cut_input(bare, cut, like)) + "\n"
        )
    return files


def _bn_tests(
    region: _Cut, bn_after: Sequence[int], also: Mapping[str, Sequence[Sequence[str]]]
) -> dict[str, str]:
    """The branch with a BatchNormalization after each bare Conv: positive and negative."""
    graph, inst, model, names = region
    source = region.source
    convs = [inst.units[k].nodes[0] for k in bn_after]
    grown = _with_bn(graph, model, names, convs)
    if grown is None:
        return {}
    with_bn, bn_names = grown
    order = [m for n in inst.region.nodes for m in (names[n], bn_names.get(n)) if m]
    positive = f"positive_{BN_BRANCH}.onnxtxt"
    more = _overlapping(also.get(positive, ()))
    what = (
        f"# Branch: the pattern with an inference BatchNormalization after each of "
        f"its {len(convs)} Conv op(s)\n"
        f"# ({', '.join(bn_names[c] for c in convs)} after "
        f"{', '.join(names[c] for c in convs)}), as an export that keeps it has it.\n"
    )
    first = bn_names[convs[0]]
    conv_node = next(n for n in with_bn.graph.node if n.name == names[convs[0]])
    conv_out = conv_node.output[0]
    like = graph.tensors[graph.node(convs[0]).outputs[0]]
    return {
        positive: source
        + what
        + f"# match: {','.join(order)}\n"
        + more
        + onnx.printer.to_text(with_bn)
        + "\n",
        f"negative_{BN_BRANCH}_link_cut.onnxtxt": source
        + what
        + f"# A near structure: {first} reads a graph input instead of its Conv.\n"
        + "# no-match\n"
        + onnx.printer.to_text(_cut_input(with_bn, (first, conv_out), like))
        + "\n",
    }


def _overlapping(also: Sequence[Sequence[str]]) -> str:
    """The expectation lines of the overlapping node sets a positive also matches."""
    more = "".join(f"# match: {','.join(ns)}\n" for ns in also)
    if more:
        more = "# It also matches these overlapping node sets (the solver picks one):\n" + more
    return more


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _without_casts(
    model: onnx.ModelProto, names: dict[str, str], casts: Sequence[str]
) -> tuple[onnx.ModelProto, tuple[str, str] | None]:
    """``model`` without the Cast nodes ``casts`` (names in the source graph): what read
    a Cast's output reads its input (a graph output too). Returns the model and the
    first (node, tensor) where a node now reads a Cast's input (the link a negative
    cuts), None where none does."""
    model = _copy(model)
    g = model.graph
    gone = {names[c] for c in casts}
    alias = {n.output[0]: n.input[0] for n in g.node if n.name in gone}

    def through(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    kept = [n for n in g.node if n.name not in gone]
    link = None
    for n in kept:
        ins = [through(t) if t else t for t in n.input]
        if link is None:
            link = next(((n.name, b) for a, b in zip(n.input, ins, strict=True) if a != b), None)
        n.input[:] = ins
    del g.node[:]
    g.node.extend(kept)
    seen: set[str] = set()
    outputs = []
    for vi in g.output:
        vi.name = through(vi.name)
        if vi.name not in seen:
            seen.add(vi.name)
            outputs.append(vi)
    del g.output[:]
    g.output.extend(outputs)
    return model, link


def _with_bn(
    graph: Graph, model: onnx.ModelProto, names: dict[str, str], convs: Sequence[str]
) -> tuple[onnx.ModelProto, dict[str, str]] | None:
    """``model`` with an inference BatchNormalization (``W_*`` scale, bias, mean,
    variance: constants at test time) after each Conv of ``convs`` (names in ``graph``),
    its readers (and a graph output) reading the BatchNormalization's output. Returns
    the model and Conv -> its BatchNormalization's name; None where a Conv's channel
    count is unknown (no constant of its size can be written)."""
    model = _copy(model)
    g = model.graph
    by_name = {names[c]: c for c in convs}
    body: list[onnx.NodeProto] = []
    bn_names: dict[str, str] = {}
    for n in g.node:
        body.append(n)
        conv = by_name.get(n.name)
        if conv is None:
            continue
        node = graph.node(conv)
        out = graph.tensors[node.outputs[0]]
        weight = graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
        channels = next(
            (
                d
                for d in (
                    weight.shape[0] if weight is not None and weight.shape else None,
                    out.shape[1] if out.shape and len(out.shape) > 1 else None,
                )
                if isinstance(d, int)
            ),
            None,
        )
        if channels is None:
            return None
        k = len(bn_names)
        params = [f"W_bn{k}_{p}" for p in ("s", "b", "m", "v")]  # ``_v``: positive values
        for p in params:
            g.input.append(helper.make_tensor_value_info(p, _dtype(out.dtype), [channels]))
        y = n.output[0]
        n.output[0] = f"{y}_conv"
        name = f"batchnormalization_bn{k}"
        body.append(helper.make_node("BatchNormalization", [n.output[0], *params], [y], name=name))
        bn_names[conv] = name
    del g.node[:]
    g.node.extend(body)
    return model, bn_names


def _cut_input(model: onnx.ModelProto, link: tuple[str, str], like: Tensor) -> onnx.ModelProto:
    """``model`` with ``link`` = (node, tensor) cut: the node reads a fresh graph input
    (typed as ``like``) in place of that tensor."""
    model = _copy(model)
    g = model.graph
    node = next(n for n in g.node if n.name == link[0])
    fresh = "cut_branch"
    g.input.append(helper.make_tensor_value_info(fresh, _dtype(like.dtype), _shape(like.shape)))
    node.input[:] = [fresh if t == link[1] else t for t in node.input]
    return model
