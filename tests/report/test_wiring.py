"""The report files in the command line: ``fuse`` writes report.html and
model_explorer.json beside report.txt (``--no-html``: no page), ``explain --html FILE``
writes the page of an analysis."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ruleengine.cli import app
from ruleengine.report.model_explorer import validate_overlay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"


def test_fuse_writes_the_page_and_the_overlay(tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["fuse", str(EXAMPLE), "-o", str(out), "-j", "1"])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert validate_overlay(json.loads((out / "model_explorer.json").read_text())) == []
    listed = json.loads((out / "report.json").read_text())["files"]
    assert {"report.html", "model_explorer.json"} <= set(listed)


def test_no_html_leaves_the_page_out(tmp_path) -> None:
    out = tmp_path / "out"
    args = ["fuse", str(EXAMPLE), "-o", str(out), "-j", "1", "--no-html"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert not (out / "report.html").exists()
    assert (out / "model_explorer.json").is_file()
    assert "report.html" not in json.loads((out / "report.json").read_text())["files"]


def test_explain_html(tmp_path) -> None:
    page = tmp_path / "explain.html"
    result = CliRunner().invoke(app, ["explain", str(EXAMPLE), "--html", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and 'id="af-data"' in text
