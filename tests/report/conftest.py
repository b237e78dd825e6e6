"""Fused outputs of a CNN, a transformer and a 2048-layer decoder stack (88k nodes), made
once per session, with report.html and model_explorer.json beside plan.json."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared"
MODELS = {
    "cnn": SHARED / "models" / "resnet18-narrow.dynamo.onnx",
    "transformer": SHARED / "models" / "gpt2-tiny.dynamo.onnx",
    "mlp": ROOT / "examples" / "mlp_block.onnx",
}
STACK_LAYERS = 2048  # 43 nodes a layer: 88,064 nodes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium (/usr/bin/chromium)")


def _stack_model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import onnx
        from synthetic import decoder_stack
    finally:
        sys.path.remove(str(ROOT / "bench"))
    path = folder / f"stack{STACK_LAYERS}.onnx"
    onnx.save(decoder_stack(STACK_LAYERS), path)
    return path


@pytest.fixture(scope="session")
def fused_result(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """``fused_result(name)``: the ``FuseResult`` of ``name`` (cnn, transformer, mlp or
    stack), made on first use and kept for the session."""
    from ruleengine.pipeline import fuse

    made: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in made:
            if name == "stack":
                model = _stack_model(tmp_path_factory.mktemp("stack-model"))
            else:
                model = MODELS[name]
            made[name] = fuse(model)
        return made[name]

    return get


@pytest.fixture(scope="session")
def fused_outputs(
    tmp_path_factory: pytest.TempPathFactory, fused_result: Callable[[str], Any]
) -> Callable[[str], Path]:
    """``fused_outputs(name)``: a folder holding the fuse outputs of ``name`` (plan.json,
    report.json, report.html, model_explorer.json)."""
    from ruleengine.report import render_report_files

    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name in made:
            return made[name]
        folder = tmp_path_factory.mktemp(f"report-{name}")
        result = fused_result(name)
        files = dict(result.files)
        if "report.html" not in files:  # fuse not wired yet: render them here
            files.update(render_report_files(result.plan, result.analysis.graph))
        for rel in ("plan.json", "report.json", "report.html", "model_explorer.json"):
            (folder / rel).write_bytes(files[rel])
        made[name] = folder
        return folder

    return get


@pytest.fixture(scope="session")
def chromium_binary() -> str:
    """The Chromium binary (with playwright), or a skip; never a skip in CI (CI=true)."""
    missing = []
    binary = "/usr/bin/chromium"
    if not os.path.exists(binary):
        missing.append(f"{binary} (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package (pip install playwright)")
    if missing:
        message = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; .ci/run installs them", pytrace=False)
        pytest.skip(message)
    return binary
