"""--dim name=value: sizes an ONNX dim can hold, one size per name."""

from __future__ import annotations

import pytest

from ruleengine.cli.common import parse_dims
from ruleengine.errors import UsageError


@pytest.mark.parametrize(
    "value",
    ["batch=99999999999999999999", "batch=2_0", "batch=\uff11", "batch=0", "batch=", "batch"],
)
def test_dim_values_that_are_not_an_int64_size_are_refused(value):
    """A 20-digit --dim used to be an internal error (ValueError from onnx)."""
    with pytest.raises(UsageError, match="bad --dim"):
        parse_dims([value])


def test_dim_given_twice_must_agree():
    assert parse_dims(["batch=2", " batch = 2 "]) == {"batch": 2}
    with pytest.raises(UsageError, match="given twice"):
        parse_dims(["batch=1", "batch=2"])
