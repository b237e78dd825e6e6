"""Build stage records by hand, so the rewrite stage is tested without the other stages.

``graph_from_model`` is a deliberately small stand-in for the graph loader (static shapes,
no attribute defaults): enough for the rewriter, which reads only names, order and sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import onnx

from ruleengine.cost.model import Cost, ScoredCandidate, Target, Verdict
from ruleengine.graph.model import Graph, Node, Tensor
from ruleengine.match.model import Candidate
from ruleengine.resolve.model import Resolution
from ruleengine.rules.model import (
    FrozenMap,
    MatchAlternative,
    OpPattern,
    OutputSpec,
    Rewrite,
    Rule,
)

TARGET = Target(
    name="test910b",
    ub_bytes=196608,
    ub_reserve_bytes=256,
    l1_bytes=524288,
    l0a_bytes=65536,
    l0b_bytes=65536,
    l0c_bytes=131072,
    hbm_bandwidth=1.6e12,
    peak_flops=MappingProxyType({"float16": 3.5e14}),
    cores=24,
    vector_cores=48,
)


def graph_from_model(model: onnx.ModelProto) -> Graph:
    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    infos = {vi.name: vi for vi in [*g.input, *g.value_info, *g.output]}
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[tuple[str, int]]] = {}
    producers: dict[str, tuple[str, int]] = {}
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        nodes.append(Node(name, n.op_type, n.domain, tuple(n.input), tuple(n.output), index=i))
        for p, t in enumerate(n.input):
            if t:
                consumers.setdefault(t, []).append((name, p))
        for p, t in enumerate(n.output):
            producers[t] = (name, p)
    names = set(infos) | set(inits) | set(producers) | set(consumers)
    tensors = {}
    for t in names:
        if t in inits:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(inits[t].data_type).name
            shape = tuple(inits[t].dims)
        elif t in infos:
            tt = infos[t].type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        else:
            dtype, shape = None, None
        prod = producers.get(t)
        tensors[t] = Tensor(
            t,
            dtype,
            shape,
            producer=prod[0] if prod else None,
            producer_port=prod[1] if prod else None,
            consumers=tuple(consumers.get(t, ())),
            is_initializer=t in inits,
            is_constant=t in inits,
            is_graph_input=t in {i.name for i in g.input},
            is_graph_output=t in {o.name for o in g.output},
        )
    return Graph(
        name=g.name,
        nodes=tuple(nodes),
        tensors=MappingProxyType(tensors),
        inputs=tuple(i.name for i in g.input if i.name not in inits),
        outputs=tuple(o.name for o in g.output),
        opset=next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        _node_index=MappingProxyType({n.name: n for n in nodes}),
    )


def rule(name: str, target_op: str, *, kernel: str | None = None, **output) -> Rule:
    return Rule(
        name=name,
        alternatives=(MatchAlternative((OpPattern(0, "Relu"),)),),
        rewrite=Rewrite(target_op=target_op, attributes=FrozenMap({"fused": True})),
        output=OutputSpec(kernel_name=kernel, **output),
    )


def scored(rule_name: str, nodes: Sequence[str], saved: int = 1000) -> ScoredCandidate:
    cand = Candidate(rule_name, 0, tuple((n,) for n in nodes), (), ())
    cost = Cost(
        bytes_before=3 * saved,
        bytes_after=2 * saved,
        bytes_saved=saved,
        overhead_bytes=0,
        net_bytes=saved,
        accesses_before=2 * len(nodes),
        accesses_after=2,
        flops=0,
        ub_bytes=4096,
        ub_limit=TARGET.ub_usable_bytes,
        launches_saved=len(nodes) - 1,
        time_saved_s=saved / TARGET.hbm_bandwidth,
    )
    return ScoredCandidate(cand, 0, Verdict.FUSE, "fuse", "fuse", cost)


def resolution(chosen: Sequence[ScoredCandidate], lost=()) -> Resolution:
    return Resolution(
        "exact", "OPTIMAL", tuple(chosen), tuple(lost), sum(c.cost.net_bytes for c in chosen)
    )
