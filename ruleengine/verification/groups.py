"""Per-group verification: each fused node alone against the original subgraph it replaces.

Memory is bounded by one group, never by the model: a group's inputs are its weights (read
through a memory map of exactly those tensors, so only pages the computation touches are
read), constants, and made-up activations of their real shapes (standard normal floats).
Integer and bool inputs (Reshape shapes, indices, masks), and small float inputs computed
from constants and static shapes alone (an attention scale of 1 / sqrt(head dim)), are not
made up when they can be computed: their producers (the shape arithmetic upstream, stopping
at Shape nodes of tensors whose shape is static) run once for all groups, within a memory
budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ruleengine.graph.model import Graph
from ruleengine.rewrite.model import FusedGroup, GroupCheck
from ruleengine.rewrite.onnx_rewrite import node_index
from ruleengine.rewrite.weights import tensor_array, tensor_nbytes
from ruleengine.verification import numerics

# The upstream computation of integer inputs runs only if it stays this small.
CONE_BUDGET_BYTES = 256 << 20
# Float inputs computed from constants and static shapes are computed up to this size.
SMALL_FOLDED = 4096
_FLOATS = {"float32", "float16", "bfloat16", "float64"}


def check_groups(
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[FusedGroup],
    *,
    model_dir: Path,
    feeds: Mapping[str, object],
    seed: int = 0,
    threshold: float = numerics.COSINE_THRESHOLD,
) -> tuple[GroupCheck, ...]:
    """One GroupCheck per group, in group order (the caller drops the failed ones)."""
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in original.graph.initializer}
    constants = numerics._constant_values(original)
    wanted = {
        t
        for g in groups
        for t in g.inputs
        if t not in inits
        and t not in constants
        and t not in feeds
        and (not _is_float(graph, t) or _small_folded(graph, t))
    }
    computed = _upstream_values(original, graph, sorted(wanted), feeds, model_dir)
    positions = node_index(original, graph)
    by_group = {_group_id(n): n for n in fused.graph.node if _group_id(n) is not None}
    results: list[GroupCheck] = []
    for g in groups:
        node = by_group.get(g.id)
        if node is None:
            results.append(GroupCheck(g.id, g.rule, "not_run", error="fused node not found"))
            continue
        feed, why_not = _group_feed(g, graph, (inits, constants, feeds, computed), rng, model_dir)
        if why_not is not None:
            results.append(GroupCheck(g.id, g.rule, "not_run", error=why_not))
            continue
        protos = [original.graph.node[positions[n]] for n in g.nodes]
        reference_model = _subgraph_model(original, protos, feed, g.outputs)
        try:
            reference = numerics.run_model(reference_model, feed)
        except Exception as exc:  # the original subgraph cannot run alone
            if numerics.is_out_of_memory(exc):
                raise MemoryError(str(exc)) from None
            results.append(
                GroupCheck(g.id, g.rule, "not_run", error=f"original: {numerics._short(exc)}")
            )
            continue
        try:
            node_feed = {t: feed[t] for t in node.input if t}
            got = numerics.run_model(numerics._single_node_model(fused, node, feed), node_feed)
        except Exception as exc:  # a fused node that does not run has failed
            if numerics.is_out_of_memory(exc):
                raise MemoryError(str(exc)) from None
            results.append(GroupCheck(g.id, g.rule, "failed", error=numerics._short(exc)))
            continue
        checks = numerics.compare(reference, got, threshold)
        status = "passed" if all(c.ok for c in checks) else "failed"
        results.append(GroupCheck(g.id, g.rule, status, checks))
    return tuple(results)


def _group_feed(
    g: FusedGroup,
    graph: Graph,
    known: tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, object], Mapping[str, Any]],
    rng: np.random.Generator,
    model_dir: Path,
) -> tuple[dict[str, object], str | None]:
    """The values the group's inputs take: known ones (initializers, constants, the
    model's feeds, values computed upstream: ``known``), else made up from ``rng``; or
    why the group cannot run alone."""
    inits, constants, feeds, computed = known
    feed: dict[str, object] = {}
    for t in g.inputs:
        if t in inits:
            feed[t] = tensor_array(inits[t], model_dir)
        elif t in constants:
            feed[t] = constants[t]
        elif t in feeds:
            feed[t] = feeds[t]
        elif t in computed:
            feed[t] = computed[t]
        else:
            value = _random(graph, t, rng)
            if value is None:
                return feed, f"input {t!r} has no static shape or no float type"
            feed[t] = value
    return feed, None


def _group_id(node: onnx.NodeProto) -> int | None:
    value = next((e.value for e in node.metadata_props if e.key == "autofusion.group_id"), None)
    return int(value) if value is not None and value.isdigit() else None


def _small_folded(graph: Graph, name: str) -> bool:
    """A small float tensor computed from constants and static shapes alone (torch's
    sqrt(1 / sqrt(head dim)) attention scale): computed like the integer inputs, not made
    up, since the kernel's bound attributes carry its value."""
    t = graph.tensors.get(name)
    return t is not None and t.const_foldable and (t.numel or SMALL_FOLDED + 1) <= SMALL_FOLDED


def _is_float(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    return t is not None and t.dtype in _FLOATS


def _static_shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.tensors.get(name)
    if t is None or t.shape is None:
        return None
    dims = []
    for d in t.shape:
        if isinstance(d, int):
            dims.append(d)
        elif isinstance(d, str) and d in graph.bound_dims:
            dims.append(int(graph.bound_dims[d]))
        else:
            return None
    return tuple(dims)


def _random(graph: Graph, name: str, rng: np.random.Generator) -> np.ndarray | None:
    """Standard normal values of the tensor's real shape and float type (else None)."""
    t = graph.tensors.get(name)
    shape = _static_shape(graph, name)
    if t is None or shape is None or t.dtype not in _FLOATS or t.dtype == "bfloat16":
        return None
    return rng.standard_normal(shape).astype(t.dtype)


def _value_info(name: str, value: object) -> onnx.ValueInfoProto:
    arr = np.asarray(value)
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)
    )


def _subgraph_model(
    model: onnx.ModelProto,
    protos: Sequence[onnx.NodeProto],
    feed: Mapping[str, object],
    outputs: Sequence[str],
) -> onnx.ModelProto:
    """The original nodes of one group as a model of their own (inputs: the group's)."""
    nodes = []
    for p in protos:
        n = onnx.NodeProto()
        n.CopyFrom(p)
        nodes.append(n)
    return _model_like(model, nodes, "group", feed, outputs)


def _model_like(
    model: onnx.ModelProto,
    nodes: Sequence[onnx.NodeProto],
    name: str,
    feed: Mapping[str, object],
    outputs: Sequence[str],
) -> onnx.ModelProto:
    """A model of ``nodes`` fed by ``feed``, with ``model``'s opsets, IR version and functions."""
    graph = helper.make_graph(
        nodes,
        name,
        [_value_info(t, v) for t, v in feed.items()],
        [onnx.ValueInfoProto(name=t) for t in outputs],
    )
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    out.functions.extend(model.functions)
    return out


def _upstream_values(
    model: onnx.ModelProto,
    graph: Graph,
    names: Sequence[str],
    feeds: Mapping[str, object],
    model_dir: Path,
) -> dict[str, object]:
    """Values of ``names`` computed by running only what produces them, once for all.

    A Shape node whose input has a static shape becomes a constant, so the upstream
    computation of a Reshape's target shape usually needs no activation at all. Gives up
    (returns what it has: nothing) when that computation would exceed CONE_BUDGET_BYTES.
    """
    if not names:
        return {}
    producer = {t: n for n in model.graph.node for t in n.output if t}
    inits = {t.name: t for t in model.graph.initializer}
    order: list[onnx.NodeProto] = []
    seen: set[str] = set()
    needed_inits: dict[str, onnx.TensorProto] = {}
    needed_inputs: set[str] = set()
    budget = CONE_BUDGET_BYTES
    stack = list(names)
    visited_nodes: set[int] = set()
    while stack:
        t = stack.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        if t in inits:
            needed_inits[t] = inits[t]
            continue
        if t in feeds:
            needed_inputs.add(t)
            continue
        node = producer.get(t)
        if node is None or id(node) in visited_nodes:
            continue
        visited_nodes.add(id(node))
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            shape = _static_shape(graph, node.input[0])
            if shape is not None:
                order.append(_shape_constant(node, shape))
                continue
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute
        ):
            return {}
        for o in node.output:
            size = graph.tensors[o].nbytes if o in graph.tensors else None
            budget -= size if size is not None else CONE_BUDGET_BYTES
        if budget < 0:
            return {}
        order.append(node)
        stack.extend(node.input)
    index = {id(n): i for i, n in enumerate(model.graph.node)}
    order.sort(key=lambda n: index.get(id(n), -1))
    feed: dict[str, object] = {t: feeds[t] for t in needed_inputs}
    for name, t in needed_inits.items():
        if tensor_nbytes(t) > CONE_BUDGET_BYTES:
            return {}
        feed[name] = tensor_array(t, model_dir)
    cone = _model_like(model, order, "upstream", feed, names)
    try:
        return numerics.run_model(cone, feed)
    except Exception:  # best effort: the groups get made-up values instead
        return {}


def _shape_constant(node: onnx.NodeProto, shape: tuple[int, ...]) -> onnx.NodeProto:
    """The value a Shape node produces for a static shape, as a Constant node."""
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    values = np.array(shape[slice(start, end)], dtype=np.int64)
    return helper.make_node(
        "Constant",
        [],
        [node.output[0]],
        value=onnx.numpy_helper.from_array(values),
        name=f"{node.name}_static",
    )
