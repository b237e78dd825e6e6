"""``autofusion view MODEL [--plan plan.json]``: the plan on the graph, in Model Explorer.

Model Explorer (``ai-edge-model-explorer`` with the ``model-explorer-onnx`` adapter, the
optional extra ``pip install -e ".[view]"`` in the checkout) opens the original model with the
overlay loaded: each fused node coloured by its group, its value naming the group, rule,
kernel and bytes saved. Without ``--plan`` the plan is made here (as ``fuse`` would, the
default rules and target). Without Model Explorer: a clear message and exit 2.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer

from ruleengine.cli.app import app
from ruleengine.cli.common import EXIT_ERROR, PANEL_ANALYSIS, examples, fail, guarded

MISSING = (
    "Model Explorer is not installed: `pip install -e '.[view]'` in the autofusion checkout "
    "(ai-edge-model-explorer and model-explorer-onnx); or open model_explorer.json beside "
    "report.txt in Model Explorer yourself (docs/report.md)"
)


def model_explorer_available() -> bool:
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("model_explorer", "model_explorer_onnx")
    )


def overlay_file(model: Path, plan: Path | None, folder: Path) -> Path:
    """model_explorer.json for ``model``: from ``plan`` (plan.json) or a fuse plan made now."""
    from ruleengine.graph import load_graph
    from ruleengine.report.model_explorer import (
        node_keys,
        overlay,
        overlay_bytes,
        overlay_from_plan_json,
    )

    if plan is not None:
        document = json.loads(plan.read_text(encoding="utf-8"))
        data = overlay_from_plan_json(document, node_keys(load_graph(model)))
    else:
        from ruleengine.pipeline import analyze
        from ruleengine.report.files import analysis_plan

        analysis = analyze(model)
        data = overlay(analysis_plan(analysis, model), analysis.graph)
    path = folder / "model_explorer.json"
    path.write_bytes(overlay_bytes(data))
    return path


@app.command(
    "view",
    rich_help_panel=PANEL_ANALYSIS,
    epilog=examples(
        "autofusion view model.onnx --plan out/plan.json",
        "autofusion view model.onnx --port 8090 --no-browser",
    ),
)
def view_command(
    model: Path = typer.Argument(..., help="The original ONNX model (not the fused one)."),
    plan: Path | None = typer.Option(None, "--plan", help="plan.json written by fuse."),
    port: int = typer.Option(8080, "--port", help="Model Explorer's local server port."),
    browser: bool = typer.Option(True, "--browser/--no-browser", help="Open a browser tab."),
) -> None:
    """Open MODEL in Model Explorer with the fusion plan as an overlay (needs the
    optional extra "view": ai-edge-model-explorer and model-explorer-onnx)."""
    if not model_explorer_available():
        typer.echo(f"error: {MISSING}", err=True)
        raise typer.Exit(EXIT_ERROR)
    if not model.is_file():
        raise fail(f"no such model: {model}")
    if plan is not None and not plan.is_file():
        raise fail(f"no such plan: {plan}", hint="fuse writes plan.json to its output folder")

    def run() -> None:
        import model_explorer

        with tempfile.TemporaryDirectory(prefix="autofusion-view-") as tmp:
            path = overlay_file(model, plan, Path(tmp))
            config = model_explorer.config()
            config.add_model_from_path(str(model)).add_node_data_from_path(str(path))
            typer.echo(f"Model Explorer: {model} with {path.name} (Ctrl-C to stop)", err=True)
            model_explorer.visualize_from_config(
                config,
                port=port,
                extensions=["model_explorer_onnx"],
                no_open_in_browser=not browser,
            )

    guarded(run)
