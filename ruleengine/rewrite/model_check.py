"""onnx.checker on the fused model: in memory after the rewrite, on its path once written.

A failure is our bug (``RewriteError``) unless the input model fails the checker too:
then the input is at fault (AF501). ``checking`` runs the in-memory check in a forked
child beside the rendering; its failure is reported by checking again here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Location
from ruleengine.errors import GraphLoadError

if TYPE_CHECKING:
    import onnx

    from ruleengine.rewrite.weights import Placement


def check_in_memory(fused: onnx.ModelProto, proto: onnx.ModelProto | None, path: Path) -> None:
    """onnx.checker (full_check) on the fused graph; the weights' files are checked on
    the written model's path (``check_on_path``). ``proto``: the input model, read again
    from ``path`` when None (rewritten in place) and only if the check fails."""
    from ruleengine.graph import onnxlite  # onnx's checker without importing onnx (0.6 s)
    from ruleengine.graph.loader import read_model
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import INLINE_LIMIT_BYTES
    from ruleengine.rewrite.onnx_rewrite import RewriteError

    try:
        onnxlite.check_model(weights.checkable(fused, INLINE_LIMIT_BYTES), full_check=True)
    except Exception as exc:  # a checker failure is our bug; say so
        if proto is None:
            proto = read_model(path)
        try:  # ... unless the input model fails it already: then the input is at fault
            onnxlite.check_model(weights.checkable(proto, INLINE_LIMIT_BYTES), full_check=True)
        except Exception as original:  # any checker failure
            first = str(original).strip().splitlines()[0] if str(original).strip() else ""
            raise GraphLoadError(
                f"the input model {path.name} fails onnx.checker ({first}), so no "
                "fused model written from it can pass",
                (
                    codes.make(
                        "unreadable-model",
                        f"onnx.checker: {first}",
                        Location(str(path)),
                        hint='fix the model (python -c "import onnx; '
                        "onnx.checker.check_model('MODEL', full_check=True)\" shows "
                        "what is wrong) and fuse again",
                    ),
                ),
            ) from None
        raise RewriteError(f"the fused model fails onnx.checker: {exc}") from None


def hard_linked(outdir: str | Path, placements: Sequence[Placement]) -> bool:
    """Whether a weights file the fused model references from ``outdir`` has more than one
    name: a link an earlier run made (placed ``inside`` when fusing into the same folder
    again) or one the user made. onnx.checker refuses those on the path as it refuses a
    link made now; the graph was checked in memory all the same."""
    root = Path(outdir)
    for p in placements:
        try:
            if os.stat(root / p.new_location).st_nlink > 1:
                return True
        except OSError:  # absent: the path check says so
            continue
    return False


def check_on_path(model: Path) -> None:
    """onnx.checker on the written file: its external data must resolve from its folder."""
    from ruleengine.graph import onnxlite
    from ruleengine.rewrite.onnx_rewrite import RewriteError

    try:
        onnxlite.check_model_path(str(model), full_check=True)
    except Exception as exc:  # our bug: the in-memory check passed
        raise RewriteError(f"the written fused model {model} fails onnx.checker: {exc}") from None
