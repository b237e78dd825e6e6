"""One number for one thing: net and gross bytes saved, named as such, are equal across
explain, compare, fuse --format json, plan.json and report.json for the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rules.helpers import run_cli

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
KEYS = ("gross_bytes_saved", "overhead_bytes", "net_bytes_saved")


@pytest.mark.parametrize("name", ["resnet18-narrow.ts-keepbn.onnx", "bert-tiny.ts.onnx"])
def test_net_and_gross_bytes_agree_everywhere(tmp_path, name):
    model = MODELS / name
    explain = json.loads(run_cli("explain", model, "-f", "json").stdout)["summary"]
    compare = json.loads(run_cli("compare", model, "-f", "json").stdout)
    fused = run_cli("fuse", model, "-o", tmp_path / "out", "-f", "json")
    assert fused.exit_code == 0, fused.stderr
    fuse_json = json.loads(fused.stdout)["totals"]
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())["summary"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())["totals"]
    seen = {
        "explain": explain,
        "compare": compare["exact"],
        "fuse --format json": fuse_json,
        "plan.json": plan,
        "report.json": report,
    }
    figures = {where: tuple(doc[k] for k in KEYS) for where, doc in seen.items()}
    assert len(set(figures.values())) == 1, figures
    gross, overhead, net = figures["plan.json"]
    assert gross > 0 and overhead >= 0 and net == gross - overhead
    assert plan["hbm_bytes_before"] - plan["hbm_bytes_after"] == gross
    assert net == plan["objective"] == compare["exact"]["net_bytes_saved"]
    assert compare["model"] == str(model) and "gap" in compare
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "net saved:" in text and "gross saved" in text
