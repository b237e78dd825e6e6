"""No-op Casts (``emit.noop_casts``): a Cast to the dtype its input already has computes
nothing. TorchScript writes one before every RMSNorm of a float32 model, dynamo none; a
draft keeps the Cast its regions have and offers the pattern without it as a branch, so
it matches the export that has none, and the fused model still checks there."""

from __future__ import annotations

import yaml

from ruleengine.graph.loader import load_graph
from ruleengine.match import find_candidates
from ruleengine.pipeline import fuse
from ruleengine.rules.lint import lint_paths
from ruleengine.rules.model import RuleSet
from ruleengine.suggest.analyses import Given

from .graphs import NOTHING_RULE, save


def _chain(cast: str | None) -> str:
    """x -> MatMul -> Relu -> [Cast] -> Sigmoid -> Mul -> MatMul: the vector ops between
    the two MatMuls are one region (cube -> cube is not fusable)."""
    mid = "r" if cast is None else "c"
    cast_line = "" if cast is None else f"  [cast] c = Cast <to = {cast}> (r)\n"
    return (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        "g (float[64,256] x, float[256,256] W_a, float[256,256] W_b) => (float[64,256] y)\n"
        "{\n"
        "  [mm] h = MatMul (x, W_a)\n"
        "  [relu] r = Relu (h)\n" + cast_line + f"  [sig] s = Sigmoid ({mid})\n"
        f"  [gate] g = Mul (s, {mid})\n"
        "  [out] y = MatMul (g, W_b)\n"
        "}\n"
    )


def _quiet(_m: str) -> None:
    return None


def _given(tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    return [given]


def _draft_from(path, rules):
    from ruleengine.suggest.drafting import draft_rules

    _, drafts, _, graphs = draft_rules([path], Given(rules, None, "ascend910b"), 0, None, _quiet)
    return drafts, graphs


def test_a_noop_cast_is_drafted_with_a_branch_without_it(tmp_path):
    from ruleengine.suggest.fitting import noop_cast

    source = save(_chain("1"), tmp_path / "cast.onnx")  # to float32: a no-op
    assert noop_cast(load_graph(source), "cast")
    rules = _given(tmp_path)
    drafts, _ = _draft_from(source, rules)
    (d,) = drafts  # MatMul -> Relu -> Cast -> SiLU -> MatMul (Relu -> Cast: @epilogue x2..3)
    rule = yaml.safe_load(d.text)
    (branch,) = rule["match"]["branches"]
    assert [op.get("repeat") for op in branch["ops"]][1] == {"min": 1, "max": 2}
    assert [op["type"] for op in rule["match"]["ops"]] == ["MatMul", "@epilogue", "Swish", "MatMul"]
    # the ops as found (a narrowing): the branch is the same without the Cast
    narrower = [yaml.safe_load(text) for _, text in d.narrower]
    found = next(m for m in narrower if "Cast" in [op["type"] for op in m["match"]["ops"]])
    assert [op["type"] for op in found["match"]["ops"]] == [
        "MatMul",
        "Relu",
        "Cast",
        "Swish",
        "MatMul",
    ]
    assert [op["type"] for op in found["match"]["branches"][0]["ops"]] == [
        "MatMul",
        "Relu",
        "Swish",
        "MatMul",
    ]
    assert d.tests and "positive_region.onnxtxt" in d.tests  # its own tests pass

    # the export without the Cast: the branch matches the region there
    other = save(_chain(None), tmp_path / "plain.onnx")
    folder = tmp_path / "drafted"
    folder.mkdir()
    (folder / f"{d.name}.yaml").write_text(d.text)
    loaded = lint_paths([folder], set_checks=False).rules
    found = find_candidates(load_graph(other), RuleSet(rules=loaded)).candidates
    assert {frozenset(c.nodes) for c in found if c.alternative == 1} == {
        frozenset({"mm", "relu", "sig", "gate", "out"})
    }
    # without the branch the draft matches nothing there
    del rule["match"]["branches"]
    (folder / f"{d.name}.yaml").write_text(yaml.safe_dump(rule))
    plain = find_candidates(
        load_graph(other), RuleSet(rules=lint_paths([folder], set_checks=False).rules)
    )
    assert not plain.candidates

    # fused with the drafted rule (branch and all), the model still computes the same
    (folder / f"{d.name}.yaml").write_text(d.text)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / f"{d.target_op}.yaml").write_text(d.kernel)
    for path in (other, source):
        result = fuse(path, [*rules, folder], kernels=[kernels], verify=True)
        assert {g.rule for g in result.plan.groups} == {d.name}
        assert result.plan.verification.ok


def test_coverage_rises_on_the_export_without_the_cast(tmp_path):
    from ruleengine.suggest.drafting import draft_rules
    from ruleengine.suggest.measuring import measure_after

    rules = _given(tmp_path)
    source = save(_chain("1"), tmp_path / "cast.onnx")
    other = save(_chain(None), tmp_path / "plain.onnx")
    drafts, graphs = _draft_from(source, rules)
    baseline, _, _, more = draft_rules([other], Given(rules, None, "ascend910b"), 0, None, _quiet)
    _, _, report = measure_after(
        baseline, drafts, Given(rules, None, "ascend910b"), _quiet, {**graphs, **more}
    )
    assert report[0].before == 0.0
    assert report[0].after == 1.0


def test_a_cast_to_another_dtype_is_no_noop(tmp_path):
    from ruleengine.suggest.fitting import noop_cast

    source = save(_chain("10"), tmp_path / "half.onnx")  # to float16: it computes
    assert not noop_cast(load_graph(source), "cast")
    drafts, _ = _draft_from(source, _given(tmp_path))
    assert drafts
    assert all("branches" not in yaml.safe_load(d.text)["match"] for d in drafts)


# x -> Cast (a no-op) read by two ops that never meet again: without the Cast the two are
# unrelated roots, a disconnected pattern (AF306); the draft is written without a branch
FORK = """<ir_version: 8, opset_import: ["" : 17]>
g (float[64,256] x) => (float[64,256] y, float[64,256] z)
{
  [cast] c = Cast <to = 1> (x)
  [sig] y = Sigmoid (c)
  [tanh] z = Tanh (c)
}
"""


def test_a_branch_that_would_be_disconnected_is_not_written(tmp_path):
    from ruleengine.rules.lint import lint_file

    source = save(FORK, tmp_path / "fork.onnx")
    drafts, _ = _draft_from(source, _given(tmp_path))
    assert drafts
    for d in drafts:
        assert "branches" not in yaml.safe_load(d.text)["match"]
        assert not lint_file(tmp_path, "d", d.text, set_checks=True).diagnostics
