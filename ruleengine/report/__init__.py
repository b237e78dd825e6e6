"""report.html and the Model Explorer overlay: renderings of the plan for a person."""

from ruleengine.report.data import report_document
from ruleengine.report.files import render_report_files
from ruleengine.report.html import render_html
from ruleengine.report.model_explorer import overlay, overlay_from_plan_json

__all__ = [
    "overlay",
    "overlay_from_plan_json",
    "render_html",
    "render_report_files",
    "report_document",
]
