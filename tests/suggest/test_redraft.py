"""Drafting again (``REDRAFT_ROUNDS``): with the drafted rules in use, what is still left
is drafted too, and the round is kept only where the summed coverage rises."""

from __future__ import annotations

import pytest

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
    from ruleengine.suggest import _draft, _measure_after, _redraft

    model = save(TWO, tmp_path / "two.onnx")
    given = tmp_path / "given"
    given.mkdir()
    (given / "nothing.yaml").write_text(NOTHING_RULE)
    rules, target = [given], "ascend910b"

    def quiet(_m: str) -> None:
        return None

    baseline, drafts, _, graphs = _draft([model], rules, None, target, None, 0, None, quiet)
    mm = [d for d in drafts if "mm" in d.cluster.instances[0].region.nodes]
    assert mm and len(mm) < len(drafts)
    # round 1 kept only the MatMul piece's rule: the Sigmoid piece is left unfused
    kept, _, report = _measure_after(baseline, mm, rules, None, target, None, quiet, graphs)
    assert report[0].after < report[0].reach == pytest.approx(1.0)
    again = _redraft(
        model, "two.onnx", baseline, kept, report, rules, None, target, None, 0, quiet, graphs
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
    full, _, report3 = _measure_after(baseline, drafts2, rules, None, target, None, quiet, graphs)
    assert (
        _redraft(
            model, "two.onnx", baseline, full, report3, rules, None, target, None, 0, quiet, graphs
        )
        is None
    )
