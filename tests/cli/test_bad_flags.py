"""Flags with values that make no sense: a usage error (exit 2), never silently used or an
internal error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"


@pytest.mark.parametrize("command", ["fuse", "explain", "compare"])
@pytest.mark.parametrize(
    "flag",
    [
        ["--benefit-threshold", "nan"],
        ["--benefit-threshold", "-0.5"],
        ["--benefit-threshold", "7"],
        ["--time-limit", "-1"],
        ["--time-limit", "0"],
        ["--time-limit", "nan"],
        ["--dim", "batch=99999999999999999999"],
    ],
)
def test_out_of_range_flags_exit_2_and_write_nothing(tmp_path, command, flag):
    """--benefit-threshold nan/7 and --time-limit -1 used to be accepted silently."""
    model = tmp_path / "m.onnx"
    shutil.copy(EXAMPLE, model)
    out = tmp_path / "out"
    extra = ["-o", str(out)] if command == "fuse" else []
    res = CliRunner().invoke(app, [command, str(model), *extra, *flag])
    assert res.exit_code == 2, res.output
    assert "internal error" not in res.stderr and "Traceback" not in res.output
    assert not out.exists()
