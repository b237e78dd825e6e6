"""Rule tests for a draft's branches (``ruletests.branch_tests``): the branch without the
no-op Casts and the branch with a BatchNormalization after each bare Conv each get a
positive (the first region as that export has it, expected to match) and a negative
(the link the branch makes cut). They pass under the real matcher, and fail once the
branch is taken out of the rule: they test the branch, not the main pattern."""

from __future__ import annotations

from dataclasses import replace

import yaml
from typer.testing import CliRunner

from ruleengine.cli.app import app
from ruleengine.ruletest.model import Status
from ruleengine.ruletest.run import run_tests
from ruleengine.suggest.analyses import Given
from ruleengine.suggest.ruletests import BN_BRANCH, NOOP_CAST_BRANCH, branch_tests

from .graphs import NOTHING_RULE, save
from .test_noop_cast import _chain

# x -> Sigmoid -> Conv (bias: a BatchNorm folded in) -> Relu -> Sigmoid: no BatchNorm
CONV_RELU = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,32,32] inp, float[16,16,3,3] W_w, float[16] W_c) => (float[1,16,32,32] z)
{
  [pre] x = Sigmoid (inp)
  [conv] c = Conv <pads = [1, 1, 1, 1]> (x, W_w, W_c)
  [relu] r = Relu (c)
  [post] z = Sigmoid (r)
}
"""


def _quiet(_m: str) -> None:
    return None


def _drafts(tmp_path, text: str):
    from ruleengine.suggest.drafting import draft_rules

    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    model = save(text, tmp_path / "m.onnx")
    _, drafts, _, graphs = draft_rules([model], Given([given], None, "ascend910b"), 0, None, _quiet)
    return drafts, graphs


def _run(tmp_path, name: str, text: str, tests: dict[str, str], folder: str = "out"):
    """`autofusion test`'s runner on the rule and its tests: file name -> outcome."""
    out = tmp_path / folder
    (out / f"{name}.tests").mkdir(parents=True)
    (out / f"{name}.yaml").write_text(text)
    for fname, body in tests.items():
        (out / f"{name}.tests" / fname).write_text(body)
    return {o.test_file.rsplit("/", 1)[-1]: o for o in run_tests([out]).outcomes}


def _without_branches(text: str) -> str:
    rule = yaml.safe_load(text)
    del rule["match"]["branches"]
    return yaml.safe_dump(rule, sort_keys=False)


def _assert_pass_and_need_branch(tmp_path, d, branch: str) -> None:
    """Every test of the draft passes; without its branches the rule still finds its
    region but no longer the branch's form of it."""
    outcomes = _run(tmp_path, d.name, d.text, dict(d.tests))
    assert set(outcomes) == set(d.tests)
    assert all(o.status is Status.PASS for o in outcomes.values())
    plain = _run(tmp_path, d.name, _without_branches(d.text), dict(d.tests), "plain")
    assert plain[f"positive_{branch}.onnxtxt"].status is Status.FAIL
    assert plain["positive_region.onnxtxt"].status is Status.PASS


def test_a_conv_relu_draft_gets_a_bn_branch_test_that_passes(tmp_path):
    drafts, _ = _drafts(tmp_path, CONV_RELU)
    (d,) = [d for d in drafts if d.branches[1]]
    assert "branches" in yaml.safe_load(d.text)["match"]
    positive = d.tests[f"positive_{BN_BRANCH}.onnxtxt"]
    negative = d.tests[f"negative_{BN_BRANCH}_link_cut.onnxtxt"]
    assert "# Branch: the pattern with an inference BatchNormalization" in positive
    assert "# match: sigmoid_0,conv_1,batchnormalization_bn0,relu_2,sigmoid_3\n" in positive
    assert "batchnormalization_bn0] t4 = BatchNormalization (t4_conv, W_bn0_s" in positive
    assert "BatchNormalization (cut_branch," in negative and "# no-match" in negative
    outcomes = _run(tmp_path, d.name, d.text, dict(d.tests))
    assert set(outcomes) == set(d.tests)
    assert all(o.status is Status.PASS for o in outcomes.values())
    # (Conv -> Relu -> Sigmoid is Conv -> @epilogue x2..3: it takes the BatchNorm as it
    # is, so the branch adds nothing here; the residual case below needs it)


# x -> Sigmoid -> Conv -> Add(Conv, x) -> Sigmoid: the Add reads two pattern ops, no
# @epilogue chain takes a BatchNorm between the Conv and it: only the branch does
CONV_ADD = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,32,32] inp, float[16,16,3,3] W_w, float[16] W_c) => (float[1,16,32,32] z)
{
  [pre] x = Sigmoid (inp)
  [conv] c = Conv <pads = [1, 1, 1, 1]> (x, W_w, W_c)
  [add] a = Add (c, x)
  [post] z = Sigmoid (a)
}
"""


def test_a_bn_branch_test_needs_the_branch(tmp_path):
    drafts, _ = _drafts(tmp_path, CONV_ADD)
    with_bn = [d for d in drafts if d.branches[1]]
    lines = [d.tests[f"positive_{BN_BRANCH}.onnxtxt"].splitlines()[3] for d in with_bn]
    assert "# match: sigmoid_0,conv_1,batchnormalization_bn0,add_2,sigmoid_3" in lines
    for d in with_bn:
        # the rule without its branch no longer finds the region as the keepbn export has it
        _assert_pass_and_need_branch(tmp_path, d, BN_BRANCH)


def test_a_noop_cast_branch_gets_a_test_that_passes_and_needs_the_branch(tmp_path):
    drafts, _ = _drafts(tmp_path, _chain("1"))
    (d,) = drafts
    assert d.branches[0] and not d.branches[1]
    positive = d.tests[f"positive_{NOOP_CAST_BRANCH}.onnxtxt"]
    negative = d.tests[f"negative_{NOOP_CAST_BRANCH}_link_cut.onnxtxt"]
    assert "# Branch: the pattern without its 1 no-op Cast op(s)" in positive
    assert "# match: matmul_0,relu_1,sigmoid_3,mul_4,matmul_5\n" in positive
    graph_text = positive.split("\n<", 1)[1]
    assert "Cast" not in graph_text  # its readers read the Relu
    assert "t3 = Relu (t2)" in graph_text
    assert "Sigmoid (t3)" in graph_text and "Mul (t5, t3)" in graph_text
    assert "cut_branch" in negative and "# no-match" in negative

    _assert_pass_and_need_branch(tmp_path, d, NOOP_CAST_BRANCH)


def test_narrowings_know_their_branches(tmp_path):
    """Each text of a draft (the one written and its narrowings) records its own branch
    units, so a narrowing the pruning picks gets its branch tests too."""
    drafts, _ = _drafts(tmp_path, _chain("1"))
    (d,) = drafts
    for _, text in d.narrower:
        has = "branches" in yaml.safe_load(text)["match"]
        assert (replace(d, text=text).branches != ((), ())) == has


def test_a_draft_whose_branch_does_not_match_gets_no_branch_tests(tmp_path):
    """A branch that does not find the region as its export has it is a finding: the
    draft is not taken with it (``branch_tested`` gives None)."""
    from ruleengine.suggest.draft_tests import branch_tested

    drafts, graphs = _drafts(tmp_path, _chain("1"))
    (d,) = drafts
    assert branch_tested(d, graphs) is not None
    text = _without_branches(d.text)
    broken = replace(d, text=text, branch_units={text: d.branches})
    assert branch_tested(broken, graphs) is None


def test_no_branch_no_branch_tests(tmp_path):
    drafts, graphs = _drafts(tmp_path, _chain("10"))  # to float16: not a no-op
    assert drafts
    for d in drafts:
        assert d.branches == ((), ())
        assert branch_tests(graphs[d.cluster.instances[0].model], d) == {}
        assert not any("branch" in name for name in d.tests)


def test_suggest_writes_branch_tests_that_autofusion_test_passes(tmp_path):
    rule = tmp_path / "nothing.yaml"
    rule.write_text(NOTHING_RULE)
    model = save(CONV_RELU, tmp_path / "m.onnx")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["suggest", str(model), "-r", str(rule), "-o", str(out)])
    assert res.exit_code == 0, res.output
    written = sorted(p.name for p in (out / "rules").glob("*.tests/*.onnxtxt"))
    assert f"positive_{BN_BRANCH}.onnxtxt" in written
    res = CliRunner().invoke(app, ["test", str(out / "rules"), "-f", "json"])
    assert res.exit_code == 0, res.output


def test_each_branched_draft_knows_its_forms_with_fewer_branches(tmp_path):
    """The forms with fewer branches, none last, each record their own branches."""
    drafts, graphs = _drafts(tmp_path, _chain("1"))
    (d,) = drafts
    fewer = d.fewer_branches[d.text]
    assert fewer
    assert "branches" not in yaml.safe_load(fewer[-1])["match"]
    assert replace(d, text=fewer[-1]).branches == ((), ())
    assert _tested_with_fewer(d, graphs).text == d.text  # its own branch passes: kept


def _tested_with_fewer(d, graphs):
    from ruleengine.suggest.draft_tests import tested

    return tested(d, graphs, fewer=True)


def test_a_draft_whose_branch_fails_is_taken_with_fewer_branches(tmp_path):
    """A branch that does not find the region as its export has it costs the draft that
    branch, not the draft: ``with_tests`` takes the same draft without it, its region
    tests passing, and the pruning's narrowings are still the ones after it."""
    from ruleengine.suggest.draft_tests import tested, with_tests

    drafts, graphs = _drafts(tmp_path, _chain("1"))
    (d,) = drafts
    text = _without_branches(d.text)  # claims a branch it does not write: its test fails
    plain = d.fewer_branches[d.text][-1]
    broken = replace(
        d,
        text=text,
        branch_units={text: d.branches},
        fewer_branches={text: (plain,)},
        narrower=(),
    )
    assert tested(broken, graphs) is None  # the pruning's view: this text fails
    taken = tested(broken, graphs, fewer=True)
    assert taken is not None and taken.text == plain
    assert not any("branch" in name for name in taken.tests)
    assert taken.tests["positive_region.onnxtxt"]
    later = replace(d, text=d.text + "\n# a narrowing\n")
    (kept,), failed = with_tests([[broken, later]], graphs)
    assert not failed and kept.text == plain
    assert [t for _, t in kept.narrower] == [later.text]
    outcomes = _run(tmp_path, kept.name, kept.text, dict(kept.tests))
    assert all(o.status is Status.PASS for o in outcomes.values())
