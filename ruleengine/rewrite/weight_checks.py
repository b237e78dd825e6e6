"""What fuse says about the model's external weight files, from their survey.

Fusion never reads a weight: the survey (``weights.survey``) lists the files the model
names, and these checks turn it into errors (a file that cannot be right; verification
without the weights) and warnings (a file missing; weights left outside OUTDIR).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location
from ruleengine.errors import GraphLoadError, UsageError
from ruleengine.rewrite.weights import Placement, WeightSurvey


def check_weight_files(found: WeightSurvey, path: Path) -> None:
    """AF542 for weight files that are there but cannot be right: too short for the
    tensors that name them, or outside the model's folder (absolute, ``..``)."""
    for f in found.files:
        inside = f.path == found.model_dir or found.model_dir in f.path.parents
        size = f.path.stat().st_size if f.present else None
        why = None
        if not inside:
            why = f"weights file {f.location!r} of {path.name} is outside the model's folder"
        elif size is not None and size < f.needed_bytes:
            why = (
                f"weights file {f.location} of {path.name} holds {size} bytes, its tensors "
                f"need {f.needed_bytes}"
            )
        if why is not None:
            raise GraphLoadError(
                why,
                (
                    codes.make(
                        "external-data-unreadable",
                        why,
                        Location(str(path)),
                        hint="keep every weight file the model names beside it, as exported",
                    ),
                ),
            )


def missing_weights(found: WeightSurvey, path: Path) -> tuple[Diagnostic, ...]:
    """AF520 for each weights file that is not there: the plan needs none of them."""
    return tuple(
        codes.make(
            "weights-missing",
            f"weights file {f.location} ({f.path}) not found: the plan and the fused graph "
            f"are written; its {f.tensors} external tensor(s) reference the same file",
            Location(str(path)),
            hint="put the weights file there to run or verify the fused model",
        )
        for f in found.missing
    )


def require_weights(found: WeightSurvey, path: Path) -> None:
    """AF521 when verification is asked for and a weights file is missing."""
    if not found.missing:
        return
    names = ", ".join(str(f.path) for f in found.missing)
    raise UsageError(
        f"--verify/--safe need the model's weights, and {names} is missing",
        (
            codes.make(
                "verify-needs-weights",
                f"weights file {names} not found: onnxruntime cannot run the model "
                "without it, so nothing can be verified",
                Location(str(path)),
                hint="put the weights file where the model references it, or fuse without "
                "--verify/--safe (the plan never needs a weight)",
            ),
        ),
    )


def outside_outdir(placements: Sequence[Placement], path: Path) -> tuple[Diagnostic, ...]:
    """AF524 for each weights file left outside OUTDIR (``--weights share``)."""
    return tuple(
        codes.make(
            "weights-outside-outdir",
            f"weights file {p.source} is outside the output directory and shared "
            f"(--weights share); the fused model references it as {p.new_location}, "
            "which onnx.checker and onnxruntime refuse",
            Location(str(path)),
            hint="drop --weights share (the default copies the weights), or write into "
            "the model's own folder (-o), which shares them at no cost",
        )
        for p in placements
        if p.how == "outside"
    )
