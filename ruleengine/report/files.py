"""The report's output files, rendered in memory beside report.txt and report.json.

``fuse`` adds them to its file set (``render_report_files``); ``explain --html`` builds
the same page from an analysis (``analysis_plan``), nothing rewritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruleengine.graph.model import Graph
from ruleengine.report.data import report_document
from ruleengine.report.html import render_html
from ruleengine.report.model_explorer import overlay, overlay_bytes
from ruleengine.rewrite.model import Plan

HTML_NAME = "report.html"
OVERLAY_FILE = "model_explorer.json"


def render_report_files(
    plan: Plan, graph: Graph, *, detail: str = "compact", html: bool = True
) -> dict[str, bytes]:
    """report.html (unless ``html`` is off: ``--no-html``) and model_explorer.json."""
    files: dict[str, bytes] = {}
    if html:
        files[HTML_NAME] = render_html(report_document(plan, graph, detail))
    files[OVERLAY_FILE] = overlay_bytes(overlay(plan, graph))
    return files


def analysis_plan(analysis: Any, model: str | Path) -> Plan:
    """The plan record of an analysis (``pipeline.Analysis``: graph, rule set, target,
    match, scored, resolution), as fuse would number its groups, nothing rewritten."""
    from ruleengine.rewrite.plan import build_groups, build_plan

    groups = build_groups(analysis.graph, analysis.resolution.chosen, analysis.rule_set)
    return build_plan(
        model_name=Path(model).name,
        graph=analysis.graph,
        rule_set=analysis.rule_set,
        target=analysis.target,
        match=analysis.match,
        scored=analysis.scored,
        resolution=analysis.resolution,
        groups=groups,
    )


def explain_html(analysis: Any, model: str | Path) -> bytes:
    """``explain --html FILE``: the report page of an analysis, every rejection read
    (the page still shows at most a few dozen per group and per rule)."""
    plan = analysis_plan(analysis, model)
    return render_html(report_document(plan, analysis.graph, detail="full"))


def write_explain_html(path: str | Path, analysis: Any, model: str | Path) -> None:
    """Write ``explain_html`` to ``path`` (an OutputError, not a traceback, when it cannot)."""
    from ruleengine.rewrite.writer import output_error

    data = explain_html(analysis, model)
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise output_error(f"cannot write {path}: {exc.strerror or exc}", where=path) from None
