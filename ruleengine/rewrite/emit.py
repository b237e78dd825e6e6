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

import onnx

from ruleengine.errors import OutputError
from ruleengine.rewrite.model import PLAN_SCHEMA_VERSION
from ruleengine.rewrite.plan import safe_relpath


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _default_mode()
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
        if dest.is_dir():  # found now, not at os.replace after other files were replaced
            raise OutputError(
                f"cannot write {dest}: a directory of that name is in the way; "
                "remove it or choose another -o"
            )
        targets.append((dest, data))
    created_dirs: list[Path] = []
    temps: list[tuple[Path, Path]] = []
    try:
        for dest, data in targets:
            _makedirs(dest.parent, created_dirs)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
            temps.append((Path(tmp), dest))
            os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600; outputs are ordinary files
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, dest in temps:
            os.replace(tmp, dest)
    except BaseException as exc:  # also Ctrl-C: never leave temporaries behind
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        for d in reversed(created_dirs):
            try:
                d.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write outputs to {root}: {exc}") from None
        raise
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
    plan: Any,
    fused_model_files: Mapping[str, bytes],
    graph: Any,
) -> dict[str, bytes]:
    """Every output file's bytes, keyed by path relative to OUTDIR (deterministic order).

    ``fused_model_files`` comes from ``serialize_model`` (the model, maybe its weights).
    """
    from ruleengine.rewrite.dot import render_dot, render_svg
    from ruleengine.rewrite.plan import group_json, plan_json
    from ruleengine.rewrite.report import report_json, report_text

    files: dict[str, bytes] = dict(fused_model_files)
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
    reserved = {*files, "report.txt", "report.json", "graph.svg"}
    for path, groups in [*kernels.items(), *rule_dots.items()]:
        if path in reserved:
            raise OutputError(
                f"rule {groups[0].rule}: output file {path} would overwrite the fuse "
                f"output of the same name; change output.kernel_name or its path"
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
    files["report.txt"] = report_text(plan, names).encode()
    files["report.json"] = json_bytes(report_json(plan, names))
    return files
