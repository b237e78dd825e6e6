"""The repo's own dev families (models/families, issue 40): the files match their records
and README, and bench/coverage.py finds them (folders as model arguments,
``repo_family_models``). Nothing is fused here; the bars are measured by the benches."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import onnx
import pytest

REPO = Path(__file__).resolve().parents[2]
FAMILIES = REPO / "models" / "families"
MAX_BYTES = 2 * 1024 * 1024  # tiny configs: every file stays under ~2 MB


def _load_coverage():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(
        "coverage_bench_rf", REPO / "bench" / "coverage.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


coverage = _load_coverage()
FILES = sorted(FAMILIES.glob("*.onnx"))
RECORDS = json.loads((FAMILIES / "results.json").read_text())


def test_the_families_are_in_the_checkout():
    """models/families is committed (no export at test time): a missing file is a bug."""
    assert len(FILES) >= 19, [p.name for p in FILES]


def test_expand_turns_a_folder_into_its_models(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.onnx", "a.onnx", "notes.txt", "sub/c.onnx"):
        (tmp_path / name).write_bytes(b"")
    single = tmp_path / "x.onnx"
    got = coverage.expand([tmp_path, single])
    assert got == [tmp_path / "a.onnx", tmp_path / "b.onnx", single]


def test_repo_family_models_are_the_folders_onnx_files():
    assert coverage.repo_family_models() == [p.resolve() for p in FILES]
    shared = {p.name for p in coverage.shared_models()}
    assert not shared & {p.name for p in FILES}, "repo families stay out of shared_models"


def test_every_file_has_its_record_and_readme_row():
    readme = (REPO / "models" / "README.md").read_text()
    for path in FILES:
        record = RECORDS[path.name]
        assert "error" not in record
        assert record["bytes"] == path.stat().st_size, f"{path.name}: re-run models/export.py"
        assert f"`{path.name}`" in readme
    for name, record in RECORDS.items():
        assert ("error" in record) != (FAMILIES / name).exists(), name


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file_is_small_valid_and_static(path):
    assert path.stat().st_size < MAX_BYTES
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    inits = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in inits:
            continue
        dims = value.type.tensor_type.shape.dim
        assert dims and all(d.HasField("dim_value") for d in dims), f"{value.name} not static"
    assert len(model.graph.value_info) > 0, "value_info inferred"
