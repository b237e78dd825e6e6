"""Property: Datalog matching equals a brute-force enumeration on random small graphs."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruleengine.match import find_candidates

from .helpers import graph, model, node, rules

UNARY = ("Relu", "Sigmoid", "Tanh")
BINARY = ("Add", "Mul", "Sub")


@st.composite
def random_graphs(draw):
    n = draw(st.integers(min_value=2, max_value=9))
    nodes, tensors = [], ["x", "y"]
    for i in range(n):
        op = draw(st.sampled_from(UNARY + BINARY))
        arity = 1 if op in UNARY else 2
        ins = [draw(st.sampled_from(tensors)) for _ in range(arity)]
        out = f"t{i}"
        nodes.append(node(op, ins, [out], name=f"n{i}"))
        tensors.append(out)
    consumed = {t for nd in nodes for t in nd.input}
    outputs = {t: None for t in tensors[2:] if t not in consumed} or {tensors[-1]: None}
    extra = draw(st.sampled_from(tensors[2:]))
    outputs.setdefault(extra, None)
    return model(nodes, {"x": [2, 3], "y": [2, 3]}, outputs)


def brute(g, a: str, b: str, c: str | None, allow: bool) -> set[tuple[str, ...]]:
    ops = [a, b] + ([c] if c else [])
    found = set()
    for combo in itertools.permutations(g.nodes, len(ops)):
        if any(nd.op_type != t for nd, t in zip(combo, ops, strict=True)):
            continue
        if not all(
            any(t in combo[i + 1].inputs for t in combo[i].outputs) for i in range(len(ops) - 1)
        ):
            continue
        if not allow:
            inside = {nd.name for nd in combo}
            bad = False
            for nd in combo:
                for t in nd.outputs:
                    tensor = g.tensors[t]
                    inner = [x for x, _ in tensor.consumers if x in inside]
                    outer = [x for x, _ in tensor.consumers if x not in inside]
                    if inner and (outer or tensor.is_graph_output):
                        bad = True
            if bad:
                continue
        found.add(tuple(nd.name for nd in combo))
    return found


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    m=random_graphs(),
    a=st.sampled_from(UNARY + BINARY),
    b=st.sampled_from(UNARY + BINARY),
    c=st.one_of(st.none(), st.sampled_from(UNARY + BINARY)),
    allow=st.booleans(),
)
def test_matches_equal_brute_force(tmp_path_factory, m, a, b, c, allow) -> None:
    ops = "".join(f"    - type: {t}\n" for t in [a, b] + ([c] if c else []))
    text = (
        f"name: r\nmatch:\n  ops:\n{ops}  subgraph:\n"
        f"    allow_intermediate_outputs: {str(allow).lower()}\nrewrite: {{target_op: F}}\n"
    )
    g = graph(m)
    res = find_candidates(g, rules(tmp_path_factory.mktemp("r"), text))
    assert {c.nodes for c in res.candidates} == brute(g, a, b, c, allow)
