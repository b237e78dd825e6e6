"""kernels.bind's memo of ``at_opset``: the same answer as the plain call, per call
attributes (a value absence does not imply is a different key), lists never shared."""

from __future__ import annotations

from ruleengine.kernels.bind import _at_opset
from ruleengine.kernels.catalog import at_opset, bundled_catalog


def test_at_opset_memo_answers_as_the_plain_call():
    form = next(
        f for f in bundled_catalog().get("ConvReluMaxPool").forms if f.name == "conv_relu_maxpool"
    )
    memo: dict = {}
    implied = (("pool_dilations", [1, 1]), ("pool_ceil_mode", 0))
    asked = (("pool_dilations", [2, 2]),)
    for attrs in (implied, asked, implied, asked):
        got = _at_opset(form, 9, attrs, memo)
        want = at_opset(form, 9, dict(attrs))
        assert got[0].function == want[0].function and got[1] == want[1]
    assert len(memo) == 2  # one entry per distinct (form, opset, attributes)
    _, problems = _at_opset(form, 9, asked, memo)
    assert problems and "MaxPool dilations" in problems[0]
    problems.append("changed by a caller")
    assert _at_opset(form, 9, asked, memo)[1] == at_opset(form, 9, dict(asked))[1]
    assert _at_opset(form, 10, asked, memo)[0] is form  # another opset, another entry
