"""Why-not's Datalog work per layer on a composite the model spells differently.

A rule naming only a composite (``RMSNorm``) on a stack whose RMSNorm is spelt
Cast, Mul x*x, ReduceMean, Add, Sqrt, Reciprocal, Mul, Cast, Mul gamma (no form matches:
Mul x*x is not Pow) has no candidate, so ``match`` asks why not. Its relaxations drop
one literal of the form at a time; dropping the only link between two parts of the form
left a clause whose parts no variable joins, and pyDatalog answered it as their cross
product: rows grew as the layers' power (issue 38: 16 layers 1 GB, 32 layers
MemoryError). Each part is now asked on its own: rows linear in the layers, the same
why-not record."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ruleengine.graph import graph_from_model
from ruleengine.match import find_candidates, whynot_engine
from ruleengine.match.whynot import why_not
from ruleengine.match.whynot_engine import components
from ruleengine.rules import load_rule_set

pytestmark = pytest.mark.unit

RULE = """
name: rmsnorm_only
match:
  ops:
    - type: RMSNorm
rewrite: {target_op: RMSNorm}
"""


def _stack(layers: int) -> onnx.ModelProto:
    """``layers`` blocks: h -> RMSNorm spelt with Mul x*x and Casts, its own constants,
    then a parallel residual (h + norm @ W + norm)."""
    nodes, inits = [], []
    h = "x"
    for i in range(layers):
        p = f"l{i}_"

        def node(op: str, ins: list[str], out: str, p: str = p, **kw) -> str:
            nodes.append(helper.make_node(op, ins, [p + out], name=p + out, **kw))
            return p + out

        inits += [
            numpy_helper.from_array(np.array(1e-6, np.float32), p + "eps"),
            numpy_helper.from_array(np.ones(8, np.float32), p + "gamma"),
            numpy_helper.from_array(np.ones((8, 8), np.float32), p + "w"),
        ]
        c = node("Cast", [h], "c", to=TensorProto.FLOAT)
        sq = node("Mul", [c, c], "sq")
        ms = node("ReduceMean", [sq], "ms", axes=[-1], keepdims=1)
        ae = node("Add", [ms, p + "eps"], "ae")
        rt = node("Sqrt", [ae], "rt")
        inv = node("Reciprocal", [rt], "inv")
        nm = node("Mul", [c, inv], "nm")
        c2 = node("Cast", [nm], "c2", to=TensorProto.FLOAT)
        g = node("Mul", [c2, p + "gamma"], "g")
        mm = node("MatMul", [g, p + "w"], "mm")
        a1 = node("Add", [h, mm], "a1")
        h = node("Add", [a1, g], "h")
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [2, 8])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rows_asked(monkeypatch: pytest.MonkeyPatch, tmp_path, layers: int) -> tuple[int, object]:
    """Datalog answer rows why-not computed on ``layers`` layers, and its record."""
    counted = [0]
    real = whynot_engine.datalog_answers

    def counting(graph, prog, *a, **kw):
        got = real(graph, prog, *a, **kw)
        counted[0] += sum(len(rows) for rows in got[0].values())
        return got

    monkeypatch.setattr(whynot_engine, "datalog_answers", counting)
    path = tmp_path / "rule.yaml"
    path.write_text(RULE)
    rule_set = load_rule_set([path])
    graph = graph_from_model(_stack(layers))
    result = find_candidates(graph, rule_set)
    assert not result.candidates
    (w,) = why_not(graph, rule_set, ["rmsnorm_only"], result=result)
    return counted[0], w


def test_why_not_rows_grow_linearly_in_layers(monkeypatch, tmp_path) -> None:
    small, w_small = _rows_asked(monkeypatch, tmp_path, 4)
    large, w_large = _rows_asked(monkeypatch, tmp_path, 8)
    assert small > 0
    # linear: twice the layers, about twice the rows (a cross product of the form's
    # parts was 2^k times: 52,488 rows at 8 layers)
    assert large <= 2.2 * small, (small, large)
    assert w_small.condition == w_large.condition
    assert w_small.message == w_large.message


def test_components_split_only_what_no_variable_joins() -> None:
    lits = [
        ("e_A__B", ("N1", "N2", 0)),
        ("tin", ("N3", "P0", "T0")),
        ("tin", ("N4", "P1", "T0")),  # joined to N3 by the tensor T0
        ("n_C", ("N5",)),
        ("cin", ("'k'", "'v'")),  # ground: a filter, kept with the first part
    ]
    parts = components(lits)
    assert [sorted(lit[0] for lit in p) for p in parts] == [
        ["cin", "e_A__B"],
        ["tin", "tin"],
        ["n_C"],
    ]


def test_a_disconnected_clause_is_the_product_of_its_parts() -> None:
    """A clause in two parts: the cross product of their rows (in head order); a part
    without head variables only filters; a part without answers empties it."""
    rows = whynot_engine._product_rows(
        ["A", "B"], [("h1", ["A"]), ("h2", ["B"])], {"h1": [("a1",), ("a2",)], "h2": [("b1",)]}
    )
    assert rows == [("a1", "b1"), ("a2", "b1")]
    only = whynot_engine._product_rows(
        ["B", "A"], [("h1", ["A", "B"]), ("h2", ["C"])], {"h1": [("a", "b")], "h2": [("c",)]}
    )
    assert only == [("b", "a")]
    assert (
        whynot_engine._product_rows(["A"], [("h1", ["A"]), ("h2", ["C"])], {"h1": [("a",)]}) == []
    )
