"""Render every output file in memory, then write them all atomically.

Nothing touches the disk until every file's bytes exist. Writing is two-phase: each file
goes to a temporary file beside its destination, and only when all temporaries are written
are they renamed into place (``os.replace``). On any error the temporaries (and any
directory this run created) are removed, so no partial output is left behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruleengine.errors import OutputError
from ruleengine.rewrite.model import PLAN_SCHEMA_VERSION
from ruleengine.rewrite.plan import safe_relpath


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def write_atomically(
    outdir: str | Path, files: Mapping[str, bytes], *, protect: tuple[Path, ...] = ()
) -> tuple[Path, ...]:
    """Write ``files`` (relative path -> bytes) under ``outdir``; all or nothing.

    ``protect`` lists paths (e.g. the input model) that must never be overwritten.
    """
    root = Path(outdir)
    targets: list[tuple[Path, bytes]] = []
    protected = {p.resolve() for p in protect}
    for rel, data in files.items():
        dest = root / safe_relpath(rel, "output file")
        if dest.resolve() in protected:
            raise OutputError(f"refusing to overwrite the input model {dest}")
        targets.append((dest, data))
    created_dirs: list[Path] = []
    temps: list[tuple[Path, Path]] = []
    try:
        for dest, data in targets:
            _makedirs(dest.parent, created_dirs)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
            temps.append((Path(tmp), dest))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, dest in temps:
            os.replace(tmp, dest)
    except OSError as exc:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        for d in reversed(created_dirs):
            try:
                d.rmdir()
            except OSError:
                pass
        raise OutputError(f"cannot write outputs to {root}: {exc}") from None
    return tuple(dest for dest, _ in targets)


def _makedirs(path: Path, created: list[Path]) -> None:
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise OSError(f"{p} exists and is not a directory")
    for d in reversed(missing):
        d.mkdir()
        created.append(d)


def render_files(
    *,
    model_stem: str,
    plan: Any,
    fused_model_bytes: bytes,
    graph: Any,
) -> dict[str, bytes]:
    """Every output file's bytes, keyed by path relative to OUTDIR (deterministic order)."""
    from ruleengine.rewrite.dot import render_dot, render_svg
    from ruleengine.rewrite.plan import group_json, plan_json
    from ruleengine.rewrite.report import report_json, report_text

    files: dict[str, bytes] = {f"{model_stem}.fused.onnx": fused_model_bytes}
    files["plan.json"] = json_bytes(plan_json(plan))
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
    files["report.txt"] = report_text(plan, names).encode()
    files["report.json"] = json_bytes(report_json(plan, names))
    return files
