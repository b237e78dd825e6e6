"""Smaller forms (``regions.largest_viable_form``): where a drafted rule's match at
another occurrence is no kernel (not convex, or an intermediate read outside it), its
largest trim that the cost model fuses is what a rule can still take there."""

from __future__ import annotations

from ruleengine import coverage
from ruleengine.cost.model import Verdict
from ruleengine.cost.scoring import score_one
from ruleengine.graph.loader import load_graph
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.regions import group_candidate, largest_viable_form

from .graphs import save

# a -> b -> s -> t, and a -> o (outside) -> s: {a, b, s, t} leaves and re-enters itself
# through o (not convex). Its trims that fuse: {b, s, t} (2 edges captured) and {a, b}
# (1 edge); {a} alone or pieces that are not connected are no form.
NOT_CONVEX = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y)
{
  [a] p = Relu (x)
  [b] q = Sigmoid (p)
  [o] r = Neg (p)
  [s] u = Add (q, r)
  [t] y = Tanh (u)
}
"""

# a -> b -> c -> d, b also read by e outside: the whole set fuses only with b's output
# written out; skipping it, the largest trim is {a, b, c} or {b, c, d} (2 edges each; the
# earlier in the graph first).
ESCAPES = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y, float[64,256] z)
{
  [a] p = Relu (x)
  [b] q = Sigmoid (p)
  [c] r = Tanh (q)
  [d] y = Exp (r)
  [e] z = Neg (q)
}
"""


def _target():
    from ruleengine.cost.targets import load_target

    return load_target("ascend910b")


def test_the_largest_convex_trim_of_a_match_that_is_not_convex(tmp_path):
    graph = load_graph(save(NOT_CONVEX, tmp_path / "m.onnx"))
    target = _target()
    whole = frozenset("abst")
    assert (
        score_one(graph, group_candidate(graph, whole), None, target).verdict is Verdict.NOT_CONVEX
    )
    region = largest_viable_form(graph, whole, target, coverage.fusable_edges(graph), {whole})
    assert region is not None
    assert region.nodes == ("b", "s", "t")
    assert region.bytes_saved > 0


def test_a_match_whose_intermediate_escapes_gives_its_largest_other_trim(tmp_path):
    graph = load_graph(save(ESCAPES, tmp_path / "m.onnx"))
    target = _target()
    edges = coverage.fusable_edges(graph)
    whole = frozenset("abcd")
    region = largest_viable_form(graph, whole, target, edges, {whole})
    assert region is not None and region.nodes == ("a", "b", "c")
    # without skipping it, the whole set is its own largest form (b's output written out)
    assert largest_viable_form(graph, whole, target, edges).nodes == ("a", "b", "c", "d")
    # nothing left to fuse: no form
    assert largest_viable_form(graph, frozenset("e"), target, edges) is None


# The structure of ESCAPES without the outside reader: a rule drafted here matches ESCAPES
# at {a, b, c, d}, where b's output is also read outside (not viable there).
CLEAN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y)
{
  [a] p = Relu (x)
  [b] q = Sigmoid (p)
  [c] r = Tanh (q)
  [d] y = Exp (r)
}
"""


def test_a_smaller_form_is_drafted_where_a_draft_matches_but_does_not_fuse(tmp_path):
    from ruleengine.suggest.drafting import draft_rules
    from ruleengine.suggest.measuring import measure_after
    from ruleengine.suggest.rounds import smaller_round

    from .graphs import NOTHING_RULE

    clean = save(CLEAN, tmp_path / "clean.onnx")
    escapes = save(ESCAPES, tmp_path / "escapes.onnx")
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    rules, target = [given], "ascend910b"

    def quiet(_m: str) -> None:
        return None

    _, drafts, _, graphs = draft_rules([clean], Given(rules, None, target), 0, None, quiet)
    assert drafts
    baseline, _, _, more_graphs = draft_rules([escapes], Given(rules, None, target), 0, None, quiet)
    graphs = {**graphs, **more_graphs}
    kept, _, report = measure_after(baseline, drafts, Given(rules, None, target), quiet, graphs)
    assert report[0].after == report[0].before  # the clean draft does not fuse there
    smaller = smaller_round(baseline, kept, report, Given(rules, None, target), quiet, graphs)
    assert smaller is not None
    drafts2, report2, _ = smaller
    assert [d.name for d in drafts2[: len(kept)]] == [d.name for d in kept]
    new = drafts2[len(kept) :]
    assert len(new) == 1 and new[0].tests and new[0].kernel
    assert new[0].cluster.instances[0].region.nodes == ("a", "b", "c")
    assert "allow_intermediate_outputs: true" in new[0].text
    assert report2[0].after > report[0].after
    # nothing left that a draft matches without fusing: no round
    assert (
        smaller_round(baseline, drafts2, report2, Given(rules, None, target), quiet, graphs) is None
    )
