"""Render every output file in memory, then write them all as one set.

Nothing touches the disk until every file's bytes exist. Writing stages the whole set in a
folder beside OUTDIR and swaps it in (ruleengine/rewrite/writer.py); on any error, Ctrl-C
or SIGTERM nothing partial and no temporary is left behind.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from ruleengine.rewrite.model import PLAN_SCHEMA_VERSION
from ruleengine.rewrite.plan import safe_relpath
from ruleengine.rewrite.writer import output_error

# Protobuf cannot serialise 2 GiB; leave headroom for the graph around the weights.
INLINE_LIMIT_BYTES = 1_800_000_000


def serialize_model(
    model: onnx.ModelProto, name: str, *, external: bool = False
) -> dict[str, bytes]:
    """The fused model's file(s): inline, or ``name`` + ``name.data`` with external weights.

    Weights go to an external data file when the input model kept them outside
    (``external``) or when the model is too large for one protobuf message.
    """
    if not external and model.ByteSize() < INLINE_LIMIT_BYTES:
        return {name: model.SerializeToString()}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    data_name = f"{name}.data"
    with tempfile.TemporaryDirectory(prefix="autofusion-") as tmp:
        onnx.save_model(
            copy,
            str(Path(tmp) / name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_name,
            size_threshold=1024,
        )
        files = {name: (Path(tmp) / name).read_bytes()}
        data = Path(tmp) / data_name
        if data.exists():
            files[data_name] = data.read_bytes()
    return files


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def write_atomically(
    outdir: str | Path, files: Mapping[str, bytes], *, protect: tuple[Path, ...] = ()
) -> tuple[Path, ...]:
    """Write ``files`` (relative path -> bytes) under ``outdir`` as one set: all or nothing.

    ``protect`` lists paths (e.g. the input model) that must never be overwritten. The set
    is staged beside OUTDIR and swapped in, under a lock (ruleengine/rewrite/writer.py).
    """
    from ruleengine.rewrite.writer import write_set

    normalised = {safe_relpath(rel, "output file"): data for rel, data in files.items()}
    return write_set(outdir, normalised, protect=protect)


def render_files(
    *,
    plan: Any,
    fused_model_files: Mapping[str, bytes],
    graph: Any,
    detail: str = "compact",
) -> dict[str, bytes]:
    """Every output file's bytes, keyed by path relative to OUTDIR (deterministic order).

    ``fused_model_files`` comes from ``serialize_model`` (the model, maybe its weights).
    """
    from ruleengine.rewrite.dot import render_dot, render_svg
    from ruleengine.rewrite.plan import group_json, plan_json
    from ruleengine.rewrite.report import report_json, report_text

    files: dict[str, bytes] = dict(fused_model_files)
    files["plan.json"] = json_bytes(plan_json(plan, detail))
    dot_text = render_dot(graph, plan.groups)
    files["graph.dot"] = dot_text.encode()
    svg = render_svg(dot_text)
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
        files[path] = render_dot(graph, groups, only_groups=True).encode()
    names = [*files, "report.txt", "report.json"]
    files["report.txt"] = report_text(plan, names, detail=detail).encode()
    files["report.json"] = json_bytes(report_json(plan, names))
    return files
