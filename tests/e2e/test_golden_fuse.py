"""Golden plan.json and report.txt for the bundled example with the golden test rules.

The rules live in tests/golden/fuse/rules (independent of the bundled library). Timings
are normalised; verification is off so the files do not depend on the CPU. Regenerate
after an intended change with ``AUTOFUSION_UPDATE_GOLDEN=1 pytest tests/e2e``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from ruleengine.pipeline import fuse
from ruleengine.resources import schema_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
GOLDEN = ROOT / "tests" / "golden" / "fuse"
UPDATE = bool(os.environ.get("AUTOFUSION_UPDATE_GOLDEN"))


def normalise_report(text: str) -> str:
    return re.sub(r"(solver: .*), [0-9.]+ (s|ms|us)$", r"\1, <time>", text, flags=re.M)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    # Graphviz on PATH would add graph.svg to the file list: keep the golden machine-free.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", str(tmp_path_factory.mktemp("no-graphviz")))
        return fuse(EXAMPLE, [GOLDEN / "rules"], verify=False)


@pytest.mark.parametrize("name", ["plan.json", "report.txt"])
def test_golden(result, name):
    got = result.files[name].decode()
    if name == "report.txt":
        got = normalise_report(got)
    path = GOLDEN / f"mlp_block.{name}"
    if UPDATE:
        path.write_text(got)
    assert got == path.read_text(), f"{name} differs from {path}; see the module docstring"


def test_golden_plan_is_valid(result):
    jsonschema.validate(
        json.loads(result.files["plan.json"]), json.loads(schema_path("plan").read_text())
    )


def test_every_decision_is_recorded(result):
    plan = json.loads(result.files["plan.json"])
    assert plan["summary"]["groups"] == len(plan["groups"]) == 5
    verdicts = {(r["rule"], r["verdict"]) for r in plan["rejected"]}
    assert ("golden_layernorm_matmul", "low_benefit") in verdicts
    assert ("golden_bias_gelu_head", "intermediate_escapes") in verdicts
    stats = {s["rule"]: (s["matched"], s["fused"]) for s in plan["rules"]}
    assert stats["golden_matmul_bias"] == (2, 2)
    assert stats["golden_bias_gelu_head"] == (1, 0)
