"""../shared/models/real (third-party exports nobody tuned for) in the dev corpus: each
fused with the default preset, `fuse --verify` as a user runs it (issue 36).

The input bindings and the explicit inputs (silero's ``sr`` is 16000; 512 samples a row)
come from bench/real_models.json, the one table the bench scripts read too; the .npz is
written here with numpy. A model the table marks ``known`` (a contract failure, groups
inside control flow) is an xfail(strict=True) naming the issue item whose fix flips it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ruleengine.cli import app

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / ".." / "shared" / "models" / "real"


def _real_models():
    """bench/real_models.py (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("real_models", ROOT / "bench" / "real_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("real_models", module)
    spec.loader.exec_module(module)
    return module


RM = _real_models()
TABLE = RM.table()


def _params() -> list:
    out = []
    for name, entry in TABLE.items():
        known = entry.get("known")
        marks = [pytest.mark.xfail(strict=True, reason=known["reason"])] if known else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def test_the_table_lists_every_real_model() -> None:
    """Every model of real/README.md's table has its row, binding only its graph inputs."""
    import onnx

    readme = (REAL / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([^`]+\.onnx)` \|", readme, re.MULTILINE)
    assert sorted(listed) == sorted(TABLE)
    assert sorted(p.name for p in REAL.glob("*.onnx")) == sorted(TABLE)
    for name, entry in TABLE.items():
        inputs = {i.name for i in onnx.load(str(REAL / name), load_external_data=False).graph.input}
        assert set(entry.get("input_shapes", {})) <= inputs, name
        assert set(entry.get("inputs", {})) in (set(), inputs), name  # all of them, or none


def _fuse(name: str, tmp_path: Path):
    model = REAL / name
    argv = ["fuse", str(model), "-o", str(tmp_path / "out"), "--verify", "--jobs", "1"]
    for key, dims in (RM.input_shapes(model) or {}).items():
        argv += ["--input-shape", f"{key}:{','.join(map(str, dims))}"]
    npz = RM.write_inputs(model, tmp_path)
    if npz is not None:
        argv += ["--inputs", str(npz)]
    return CliRunner().invoke(app, argv)


@pytest.mark.parametrize("name", _params())
def test_real_model_fuses_and_verifies(name: str, tmp_path: Path) -> None:
    """`fuse --verify` exits 0 with groups, none failing its contract (AF406)."""
    res = _fuse(name, tmp_path)
    out = res.stdout + res.stderr
    assert res.exit_code == 0, out[-3000:]
    assert "AF406" not in out, out[-3000:]
    groups = re.search(r"Fused groups \((\d+)\)", out)
    assert groups is not None and int(groups[1]) > 0, f"{name}: no group fused"
    assert "Verification" in out and "PASSED" in out, out[-3000:]


def test_paddle_minus_one_batch_binds() -> None:
    """Issue 36 item 4: ``x [-1, 3, ?, ?]`` (Paddle's literal -1 batch) takes
    ``--input-shape x:1,3,48,192`` (it was AF514 "axis 0 is -1 in the model, not 1"), and
    ``--dim x[0]=1`` names the same axis."""
    from ruleengine.graph import load_graph

    cls = REAL / "ppocr-mobile-v2-cls.onnx"
    g = load_graph(cls)
    assert g.unbound_dims == ("x[0]", "x[2]", "x[3]")
    g = load_graph(cls, input_shapes={"x": (1, 3, 48, 192)})
    assert g.unbound_dims == () and g.tensor("x").shape == (1, 3, 48, 192)
    g = load_graph(cls, dims={"x[0]": 1, "x[2]": 48, "x[3]": 192})
    assert g.unbound_dims == () and not g.warnings
