"""``autofusion view``: a clear message and exit 2 without Model Explorer; with it, the
overlay it would load (made from plan.json) is valid node data for the original model."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ruleengine.report.model_explorer import validate_overlay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlp_block.onnx"


def _app():
    import ruleengine.cli.view  # noqa: F401 - attaches the command
    from ruleengine.cli.app import app

    return app


def test_view_without_model_explorer_says_how_to_install(monkeypatch) -> None:
    import ruleengine.cli.view as view

    monkeypatch.setattr(view, "model_explorer_available", lambda: False)
    result = CliRunner().invoke(_app(), ["view", str(EXAMPLE)])
    assert result.exit_code == 2
    assert "pip install -e '.[view]'" in result.output


def test_view_overlay_from_plan_json(tmp_path, fused_result) -> None:
    from ruleengine.cli.view import overlay_file

    result = fused_result("cnn")
    plan = tmp_path / "plan.json"
    plan.write_bytes(result.files["plan.json"])
    path = overlay_file(result.model_path, plan, tmp_path)
    data = json.loads(path.read_text())
    assert validate_overlay(data) == []
    assert len(data["results"]) == sum(len(g.nodes) for g in result.plan.groups)


def test_view_overlay_without_plan(tmp_path) -> None:
    from ruleengine.cli.view import overlay_file
    from ruleengine.pipeline import fuse

    path = overlay_file(EXAMPLE, None, tmp_path)
    data = json.loads(path.read_text())
    assert validate_overlay(data) == []
    expected = fuse(EXAMPLE).plan.groups
    assert len(data["results"]) == sum(len(g.nodes) for g in expected)
