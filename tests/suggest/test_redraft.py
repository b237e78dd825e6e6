"""Drafting again (``REDRAFT_ROUNDS``): with the drafted rules in use, what is still left
is drafted too, and the round is kept only where the summed coverage rises."""

from __future__ import annotations

import pytest

from ruleengine import coverage
from ruleengine.suggest.analyses import Given

from .graphs import NOTHING_RULE, save

# Two separate pieces: MatMul -> bias Add -> Relu, and Sigmoid -> Mul -> Tanh.
TWO = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[64,256] z, float[64,256] r, float[256,256] W_m, float[256] W_b)
  => (float[64,256] y1, float[64,256] y2)
{
  [mm] h = MatMul (x, W_m)
  [bias] a = Add (h, W_b)
  [act] y1 = Relu (a)
  [sig] s = Sigmoid (z)
  [mul] m = Mul (s, r)
  [tanh] y2 = Tanh (m)
}
"""


def test_drafting_again_drafts_what_the_drafted_rules_leave(tmp_path):
    from ruleengine.suggest.drafting import draft_rules
    from ruleengine.suggest.measuring import measure_after
    from ruleengine.suggest.rounds import redraft

    model = save(TWO, tmp_path / "two.onnx")
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    rules, target = [given], "ascend910b"

    def quiet(_m: str) -> None:
        return None

    baseline, drafts, _, graphs = draft_rules([model], Given(rules, None, target), 0, None, quiet)
    mm = [d for d in drafts if "mm" in d.cluster.instances[0].region.nodes]
    assert mm and len(mm) < len(drafts)
    # round 1 kept only the MatMul piece's rule: the Sigmoid piece is left unfused
    kept, _, report = measure_after(baseline, mm, Given(rules, None, target), quiet, graphs)
    assert report[0].after < report[0].reach == pytest.approx(1.0)
    again = redraft(
        model, "two.onnx", baseline, kept, report, Given(rules, None, target), 0, quiet, graphs
    )
    assert again is not None
    _, _, drafts2, report2, _ = again
    # the first round's rule stays; a new one, named apart from it, takes the rest
    assert [d.name for d in drafts2[: len(kept)]] == [d.name for d in kept]
    assert len({d.name for d in drafts2}) == len(drafts2) > len(kept)
    assert report2[0].after == pytest.approx(1.0)
    assert report[0].after < 0.99
    assert all(d.tests and d.kernel for d in drafts2)
    # nothing left once every piece has a rule: the round drafts nothing and is not kept
    full, _, report3 = measure_after(baseline, drafts2, Given(rules, None, target), quiet, graphs)
    assert (
        redraft(
            model, "two.onnx", baseline, full, report3, Given(rules, None, target), 0, quiet, graphs
        )
        is None
    )


# The second place of both test graphs: Gemm -> Gemm -> Relu -> Sigmoid -> Tanh.
_SECOND_PLACE = """  [g3] h2 = Gemm (z, W_c)
  [g4] k2 = Gemm (h2, W_d)
  [r2] s2 = Relu (k2)
  [s2] q2 = Sigmoid (s2)
  [t2] y2 = Tanh (q2)
}
"""

# Two places: Gemm (transB=1) -> Gemm -> Relu, and Gemm (transB=0) -> Gemm -> Relu ->
# Sigmoid -> Tanh. A drafted Gemm -> Gemm -> Relu rule matches both; at the second place
# its group wins on net bytes over the Gemm -> Relu -> Sigmoid -> Tanh group and captures
# less.
PLACES = (
    """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[64,256] z, float[1024,256] W_a, float[1024,64] W_b,
   float[256,1024] W_c, float[1024,64] W_d) => (float[64,64] y1, float[64,64] y2)
{
  [g1] h1 = Gemm <transB = 1> (x, W_a)
  [g2] k1 = Gemm (h1, W_b)
  [r1] y1 = Relu (k1)
"""
    + _SECOND_PLACE
)

_GEMM_RELU_SIGMOID = """name: draft_q
match:
  ops:
    - type: Gemm
    - type: Relu
      input_sources:
        input0:
          from_op: 0
    - type: Sigmoid
      input_sources:
        input0:
          from_op: 1
    - type: Tanh
      input_sources:
        input0:
          from_op: 2
rewrite:
  target_op: DraftQ
"""


def _gemm_gemm_relu_cluster(text: str, tmp_path):
    """The model saved, a rules folder holding the Gemm -> Gemm -> Relu -> Sigmoid rule,
    the model analysed with it, and the cluster of the unfused region g1 -> g2 -> r1."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import Instance, Region
    from ruleengine.suggest.canon import canonicalize
    from ruleengine.suggest.model import Cluster

    model = save(text, tmp_path / "m.onnx")
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "draft_q.yaml").write_text(_GEMM_RELU_SIGMOID)
    first = analyze(model, [folder])
    region = ("g1", "g2", "r1")
    canon = canonicalize(first.graph, region, ())
    inst = Instance("m.onnx", Region(region, 0, 0), canon.units, False, frozenset(), frozenset())
    return model, folder, first, Cluster(canon.key, (inst,))


def test_a_rule_whose_other_matches_lower_coverage_is_pinned_rather_than_left_out(tmp_path):
    """Left out, the Gemm -> Gemm -> Relu rule would leave its own region unfused (1 of 4
    edges); with the attribute values its region has pinned (transB = 1) it no longer
    matches the other place, and everything fusable is captured."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import DraftRule
    from ruleengine.suggest.emit import PINNED_NOTE, draft, shared_params
    from ruleengine.suggest.model import Cluster
    from ruleengine.suggest.pruning import prune

    model, folder, first, cluster = _gemm_gemm_relu_cluster(PLACES, tmp_path)
    pins = shared_params(cluster, lambda _m, n: first.graph.node(n))
    assert pins[0]["transB"] == 1
    _, general = draft(cluster, "draft_p", 0, "ascend910b")
    _, pinned = draft(cluster, "draft_p", 0, "ascend910b", pins=pins)
    assert PINNED_NOTE in pinned and PINNED_NOTE not in general
    (folder / "draft_p.yaml").write_text(general)
    a = analyze(model, [folder])
    assert [sc.candidate.rule for sc in a.resolution.chosen] == ["draft_p", "draft_p"]
    before = coverage.measure(a.graph, [sc.candidate.nodes for sc in a.resolution.chosen])
    d = DraftRule("draft_p", general, cluster, 0, narrower=((cluster, pinned),))
    q = DraftRule("draft_q", _GEMM_RELU_SIGMOID, Cluster((), ()), 0)
    kept, dropped = prune([d, q], [a], ["m.onnx"], {"m.onnx": a.graph})
    assert dropped == []
    assert [k.text for k in kept] == [pinned, _GEMM_RELU_SIGMOID]
    (folder / "draft_p.yaml").write_text(pinned)
    b = analyze(model, [folder])
    after = coverage.measure(b.graph, [sc.candidate.nodes for sc in b.resolution.chosen])
    assert before.coverage < after.coverage == pytest.approx(1.0)


# The same Gemm -> Gemm -> Relu twice; the first reads its first weight through an
# Identity (as TorchScript exports share weights), a computed tensor the matcher counts
# among the non-constant inputs; the second reads an initializer and goes on into
# Sigmoid -> Tanh.
SHARED_WEIGHT = (
    """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[64,256] z, float[256,1024] W_a, float[1024,64] W_b,
   float[256,1024] W_c, float[1024,64] W_d) => (float[64,64] y1, float[64,64] y2)
{
  [id] wa = Identity (W_a)
  [g1] h1 = Gemm (x, wa)
  [g2] k1 = Gemm (h1, W_b)
  [r1] y1 = Relu (k1)
"""
    + _SECOND_PLACE
)


def test_a_rule_is_pinned_to_its_regions_input_count(tmp_path):
    """The structures differ only in what a rule sees as context: the first reads two
    non-constant tensors, the second one. Pinned to two (``input_count_range``), the
    Gemm -> Gemm -> Relu rule keeps to its region, and its generated tests read the
    weight as the model does (through an Identity)."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import DraftRule
    from ruleengine.suggest.emit import PINNED_NOTE, draft
    from ruleengine.suggest.fitting import io_counts
    from ruleengine.suggest.model import Cluster
    from ruleengine.suggest.pruning import prune

    model, folder, first, cluster = _gemm_gemm_relu_cluster(SHARED_WEIGHT, tmp_path)
    counts = io_counts(cluster, {"m.onnx": first.graph})
    assert counts == (2, 2, 1)
    _, general = draft(cluster, "draft_p", 0, "ascend910b")
    _, pinned = draft(cluster, "draft_p", 0, "ascend910b", counts=counts)
    assert PINNED_NOTE in pinned and "input_count_range" in pinned
    (folder / "draft_p.yaml").write_text(general)
    a = analyze(model, [folder])
    assert [sc.candidate.rule for sc in a.resolution.chosen] == ["draft_p", "draft_p"]
    d = DraftRule("draft_p", general, cluster, 0, narrower=((cluster, pinned),))
    q = DraftRule("draft_q", _GEMM_RELU_SIGMOID, Cluster((), ()), 0)
    kept, dropped = prune([d, q], [a], ["m.onnx"], {"m.onnx": a.graph})
    assert dropped == [] and [k.text for k in kept] == [pinned, _GEMM_RELU_SIGMOID]
    assert "Identity" in kept[0].tests["positive_region.onnxtxt"]
    (folder / "draft_p.yaml").write_text(pinned)
    b = analyze(model, [folder])
    after = coverage.measure(b.graph, [sc.candidate.nodes for sc in b.resolution.chosen])
    assert after.coverage == pytest.approx(1.0)


# The two places of ``PLACES`` alike in everything a rule sees but size: the same Gemm
# attributes, the same input counts; the second reads 128 rows instead of 64 (a longer
# sequence, as a decoder and an encoder of one model differ).
SIZES = (
    """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x, float[128,256] z, float[256,1024] W_a, float[1024,64] W_b,
   float[256,1024] W_c, float[1024,64] W_d) => (float[64,64] y1, float[128,64] y2)
{
  [g1] h1 = Gemm (x, W_a)
  [g2] k1 = Gemm (h1, W_b)
  [r1] y1 = Relu (k1)
"""
    + _SECOND_PLACE
)


def test_a_rule_is_pinned_to_its_regions_tensor_sizes(tmp_path):
    """Neither attribute values nor input counts tell the two places apart; the drafts of
    the Gemm -> Gemm -> Relu region (``fitting_drafts``) end with one pinned to the
    largest tensors its region has (``memory_limit``), and the pruning narrows the rule
    to it: the larger place is left to the Gemm -> Relu -> Sigmoid -> Tanh rule and
    everything fusable is captured (left out, the rule's own region stays unfused)."""
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import DraftRule
    from ruleengine.suggest.emit import PINNED_NOTE
    from ruleengine.suggest.fitting import alternatives, fitting_drafts, largest_sizes
    from ruleengine.suggest.model import Cluster
    from ruleengine.suggest.pruning import prune

    model, folder, first, cluster = _gemm_gemm_relu_cluster(SIZES, tmp_path)
    graphs = {"m.onnx": first.graph}
    # h1 is 64 x 1024 float32 inside, y1 64 x 64 float32 out
    assert largest_sizes(cluster, graphs) == (64 * 1024 * 4, 64 * 64 * 4)
    fitted = fitting_drafts(cluster, "draft_p", 0, "ascend910b", graphs)
    general = fitted[0].text
    assert not fitted[0].pinned and "memory_limit" not in general
    sized = [f for f in fitted if f.pinned and "memory_limit" in f.text]
    assert sized and all(
        PINNED_NOTE in f.text and "max_intermediate_size: 262144" in f.text for f in sized
    )
    # each is recorded with its unpinned draft and the limit (what the pruning compares):
    # the unpinned text is the pinned one without the constraint and the note's line
    plain = [f.text for f in fitted if not f.pinned]
    limit = {"max_intermediate_size": 262144, "max_output_size": 16384}
    assert [f.unsized for f in sized] == [(t, limit) for t in plain]
    for f in sized:
        lines = f.text.split("\n")
        at = lines.index("- type: memory_limit")
        note = next(k for k, line in enumerate(lines) if PINNED_NOTE in line)
        kept = [x for k, x in enumerate(lines) if not (at <= k <= at + 2 or k == note)]
        assert "\n".join(kept) == f.unsized[0]
    assert all(f.unsized is None for f in fitted if f not in sized)
    assert alternatives("draft_p", 0, fitted)[0].unsized == {f.text: f.unsized for f in sized}
    (folder / "draft_p.yaml").write_text(general)
    a = analyze(model, [folder])
    assert [sc.candidate.rule for sc in a.resolution.chosen] == ["draft_p", "draft_p"]
    before = coverage.measure(a.graph, [sc.candidate.nodes for sc in a.resolution.chosen])
    d = DraftRule(
        "draft_p",
        general,
        cluster,
        0,
        narrower=tuple((f.cluster, f.text) for f in fitted[1:]),
        unsized={f.text: f.unsized for f in sized},
    )
    q = DraftRule("draft_q", _GEMM_RELU_SIGMOID, Cluster((), ()), 0)
    kept, dropped = prune([d, q], [a], ["m.onnx"], graphs)
    assert dropped == []
    assert [k.text for k in kept][1:] == [_GEMM_RELU_SIGMOID]
    assert "memory_limit" in kept[0].text
    (folder / "draft_p.yaml").write_text(kept[0].text)
    b = analyze(model, [folder])
    assert sorted(sc.candidate.rule for sc in b.resolution.chosen) == ["draft_p", "draft_q"]
    after = coverage.measure(b.graph, [sc.candidate.nodes for sc in b.resolution.chosen])
    assert before.coverage < after.coverage == pytest.approx(1.0)


def test_a_size_pin_that_changes_nothing_is_not_matched_again(tmp_path, monkeypatch):
    """At the two places of ``PLACES`` (equal sizes) every candidate of the rule fits its
    region's sizes: its size-pinned form would match and judge the same candidates, so
    the pruning does not match it again; the attribute-pinned form is still found."""
    import ruleengine.suggest.pruning as pruning
    from ruleengine.pipeline import analyze
    from ruleengine.suggest import DraftRule
    from ruleengine.suggest.emit import draft, shared_params, size_limit
    from ruleengine.suggest.fitting import largest_sizes
    from ruleengine.suggest.model import Cluster
    from ruleengine.suggest.pruning import prune

    model, folder, first, cluster = _gemm_gemm_relu_cluster(PLACES, tmp_path)
    graphs = {"m.onnx": first.graph}
    pins = shared_params(cluster, lambda _m, n: first.graph.node(n))
    sizes = largest_sizes(cluster, graphs)
    _, general = draft(cluster, "draft_p", 0, "ascend910b")
    # the size-pinned form first: tried beside the attribute-pinned one in one round
    narrower = [
        draft(cluster, "draft_p", 0, "ascend910b", sizes=sizes)[1],
        draft(cluster, "draft_p", 0, "ascend910b", pins=pins)[1],
    ]
    assert "memory_limit" in narrower[0]
    (folder / "draft_p.yaml").write_text(general)
    a = analyze(model, [folder])
    matched: list[str] = []
    real = pruning.scored_rule

    def counted(name: str, text: str, analysis):
        matched.append(text)
        return real(name, text, analysis)

    monkeypatch.setattr(pruning, "scored_rule", counted)
    d = DraftRule(
        "draft_p",
        general,
        cluster,
        0,
        narrower=tuple((cluster, t) for t in narrower),
        unsized={narrower[0]: (general, size_limit(sizes))},
    )
    q = DraftRule("draft_q", _GEMM_RELU_SIGMOID, Cluster((), ()), 0)
    kept, dropped = prune([d, q], [a], ["m.onnx"], graphs)
    assert dropped == [] and "transB: 1" in kept[0].text and "memory_limit" not in kept[0].text
    assert any("transB: 1" in t for t in matched)
    assert not any("memory_limit" in t for t in matched)
