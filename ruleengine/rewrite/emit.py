"""Render every output file in memory, then write them all as one set.

Nothing touches the disk until every file's bytes exist. Writing stages the whole set in a
folder beside OUTDIR and swaps it in (ruleengine/rewrite/writer.py); on any error, Ctrl-C
or SIGTERM nothing partial and no temporary is left behind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruleengine.graph import onnxlite
from ruleengine.jsontext import json_bytes
from ruleengine.rewrite.model import PLAN_SCHEMA_VERSION
from ruleengine.rewrite.outpaths import safe_relpath
from ruleengine.rewrite.weights import Placement, WeightSource
from ruleengine.rewrite.writer import output_error

if TYPE_CHECKING:
    import onnx

# Protobuf cannot serialise 2 GiB; leave headroom for the graph around the weights.
INLINE_LIMIT_BYTES = 1_800_000_000


def serialize_model(
    model: onnx.ModelProto, name: str, placements: Sequence[Placement] = ()
) -> dict[str, bytes]:
    """The fused model's file(s), keyed by path relative to OUTDIR.

    External tensors keep their references, rewritten per ``placements`` (weights.place)
    so they resolve from OUTDIR; no weight byte is read. Inline tensors stay inline unless
    the model would not fit one protobuf message: then they go to ``name.data``.
    """
    from ruleengine.rewrite.weights import externalize_inline, rewrite_locations

    moved = {p.location: p.new_location for p in placements if p.location != p.new_location}
    # serialized once and measured (protobuf's ByteSize serializes the message too)
    if not moved:  # as it is: no copy needed
        data = model.SerializeToString()
        if len(data) < INLINE_LIMIT_BYTES:
            return {name: data}
        del data
    copy = onnxlite.ModelProto()
    copy.CopyFrom(model)
    rewrite_locations(copy, moved)
    data = copy.SerializeToString()
    if len(data) < INLINE_LIMIT_BYTES:
        return {name: data}
    del data
    data_name = f"{name}.data"
    data = externalize_inline(copy, data_name)
    return {name: copy.SerializeToString(), data_name: data}


def write_atomically(
    outdir: str | Path,
    files: Mapping[str, bytes],
    *,
    protect: tuple[Path, ...] = (),
    sources: Mapping[str, WeightSource] | None = None,
) -> tuple[Path, ...]:
    """Write ``files`` (relative path -> bytes) under ``outdir`` as one set: all or nothing.

    ``protect`` lists paths (e.g. the input model) that must never be overwritten. The set
    is staged beside OUTDIR and swapped in, under a lock (ruleengine/rewrite/writer.py).
    ``sources`` are files made from existing ones (relative path -> ``WeightSource``):
    weights, copied (reflink or sparse copy) or hard-linked into the staged set without
    passing through memory; a failed copy leaves nothing behind, like any other file.
    """
    from ruleengine.rewrite.writer import write_set

    everything: dict[str, bytes | WeightSource] = {**files, **(sources or {})}
    normalised = {safe_relpath(rel, "output file"): data for rel, data in everything.items()}
    return write_set(outdir, normalised, protect=protect)


def render_files(
    *,
    plan: Any,
    fused_model_files: Mapping[str, bytes],
    graph: Any,
    detail: str = "compact",
    extra_names: Sequence[str] = (),
    weight_files: Sequence[str] = (),
    before_reports: Callable[[Any], Any] | None = None,
    dot: Any = None,
) -> dict[str, bytes]:
    """Every output file's bytes, keyed by path relative to OUTDIR (deterministic order).

    ``fused_model_files`` comes from ``serialize_model`` (the model, maybe its weights).
    The report's list of files written names ``weight_files`` (weights copied or linked
    into OUTDIR, written by ``write_atomically``) after them, ``extra_names`` last.
    ``before_reports`` is called with the plan once everything else is rendered; the
    reports are rendered from the plan it returns (``fuse``: the forked check's verdict
    and times are awaited there). ``dot``: a ``dot.PendingDot`` of ``plan.groups`` begun
    earlier (the DOT graph rendering in a forked child), else it is rendered here.
    """
    from ruleengine.rewrite.dot import dot_bytes, render_svg
    from ruleengine.rewrite.plan_json import group_json, plan_json
    from ruleengine.rewrite.report import report_json, report_text

    files: dict[str, bytes] = dict(fused_model_files)
    files["plan.json"] = json_bytes(plan_json(plan, detail))
    files["graph.dot"] = dot.result() if dot is not None else dot_bytes(graph, plan.groups)
    svg = render_svg(files["graph.dot"])
    if svg is not None:
        files["graph.svg"] = svg
    # Per-rule outputs from the rules' ``output`` sections (paths already checked).
    kernels: dict[str, list] = {}
    rule_dots: dict[str, list] = {}
    for g in plan.groups:
        if g.kernel.file_path:
            path = f"{g.kernel.file_path}/{g.kernel.kernel_name}.kernel.json"
            kernels.setdefault(safe_relpath(path, "kernel spec"), []).append(g)
        if g.kernel.gen_dot_graph:
            base = g.kernel.dot_graph_path or "."
            path = f"{base}/{g.kernel.kernel_name}.dot"
            rule_dots.setdefault(safe_relpath(path, "rule DOT graph"), []).append(g)
    reserved = {*files, "report.txt", "report.json", "graph.svg"}
    for path, groups in [*kernels.items(), *rule_dots.items()]:
        parts = path.split("/")
        clash = next(
            (
                "/".join(parts[:i])
                for i in range(1, len(parts) + 1)
                if "/".join(parts[:i]) in reserved
            ),
            None,
        )
        if clash is not None:
            raise output_error(
                f"rule {groups[0].rule}: output file {path} would overwrite the fuse "
                f"output {clash}",
                name="reserved-output-path",
                hint="change output.kernel_name, output.file_path or output.dot_graph_path",
            )
    for path, groups in sorted(kernels.items()):
        files[path] = json_bytes(
            {
                "schema_version": PLAN_SCHEMA_VERSION,
                "kernel_name": groups[0].kernel.kernel_name,
                "model": plan.model,
                "target": plan.target,
                "groups": [group_json(g) for g in groups],
            }
        )
    for path, groups in sorted(rule_dots.items()):
        files[path] = dot_bytes(graph, groups, only_groups=True)
    if before_reports is not None:
        plan = before_reports(plan)
    names = [*fused_model_files, *weight_files]
    names += [n for n in files if n not in fused_model_files]
    names += [*extra_names, "report.txt", "report.json"]
    files["report.txt"] = report_text(plan, names, detail=detail).encode()
    files["report.json"] = json_bytes(report_json(plan, names))
    return files
