"""Numerical verification: run the original and the fused model in onnxruntime (CPU).

Inputs are seeded random tensors matching the model's input dtypes and shapes (token ids
are small non-negative integers bounded by the embedding table they index, masks are ones)
or the arrays of a user's ``.npz`` file. Each output is compared by cosine similarity
(pass: >= 0.999) and max absolute error. Safe mode finds a failing group by bisection,
drops it, and repeats until the fused model verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from ruleengine.errors import UsageError
from ruleengine.rewrite.model import FusedGroup, OutputCheck, Verification

COSINE_THRESHOLD = 0.999
DEFAULT_INT_BOUND = 100
_PASS_THROUGH = {"Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Expand"}


def _index_bound(model: onnx.ModelProto, name: str) -> int | None:
    """Smallest first-dimension of an embedding table ``name`` indexes via Gather (if any)."""
    g = model.graph
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    shapes = {t.name: list(t.dims) for t in g.initializer}
    bound: int | None = None
    frontier, seen = [name], {name}
    while frontier:
        t = frontier.pop()
        for n in consumers.get(t, ()):
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == t:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                dims = shapes.get(n.input[0])
                if dims and -len(dims) <= axis < len(dims):
                    size = int(dims[axis])
                    bound = size if bound is None else min(bound, size)
            elif n.op_type in _PASS_THROUGH and n.input and n.input[0] == t:
                for o in n.output:
                    if o and o not in seen:
                        seen.add(o)
                        frontier.append(o)
    return bound


def make_inputs(
    model: onnx.ModelProto, *, seed: int = 0, dims: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(int((dims or {}).get(d.dim_param, 1)))
        if np_dtype == np.bool_ or "mask" in vi.name.lower():
            arr = np.ones(shape, dtype=np_dtype)
        elif np.issubdtype(np_dtype, np.integer):
            bound = min(DEFAULT_INT_BOUND, _index_bound(model, vi.name) or DEFAULT_INT_BOUND)
            arr = rng.integers(0, max(bound, 1), size=shape).astype(np_dtype)
        else:
            arr = rng.standard_normal(shape).astype(np_dtype)
        feeds[vi.name] = arr
    return feeds


def load_inputs(path: str | Path, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Feeds from a user's .npz file; every model input must be there."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inputs file {path}: {exc}") from None
    initializers = {t.name for t in model.graph.initializer}
    wanted = [vi.name for vi in model.graph.input if vi.name not in initializers]
    missing = [n for n in wanted if n not in arrays]
    if missing:
        raise UsageError(
            f"inputs file {path} lacks model input(s) {', '.join(missing)}; "
            f"it has {', '.join(sorted(arrays)) or 'nothing'}"
        )
    return {n: arrays[n] for n in wanted}


def run_model(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]) -> dict:
    """Run a model on CPU; returns output name -> array."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def compare(
    reference: Mapping[str, np.ndarray],
    fused: Mapping[str, np.ndarray],
    threshold: float = COSINE_THRESHOLD,
) -> tuple[OutputCheck, ...]:
    """Cosine similarity and max absolute/relative error per output, in reference order."""
    checks: list[OutputCheck] = []
    for name, ref in reference.items():
        got = fused.get(name)
        if got is None or got.shape != ref.shape:
            checks.append(OutputCheck(name, 0.0, float("inf"), float("inf"), False))
            continue
        a = np.asarray(ref, dtype=np.float64).ravel()
        b = np.asarray(got, dtype=np.float64).ravel()
        fa, fb = np.isfinite(a), np.isfinite(b)
        same_nonfinite = bool(np.array_equal(fa, fb)) and bool(
            np.array_equal(a[~fa], b[~fb], equal_nan=True)
        )
        a, b = a[fa & fb], b[fa & fb]
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        if na == 0.0 and nb == 0.0:
            cosine = 1.0
        elif na == 0.0 or nb == 0.0:
            cosine = 0.0
        else:
            cosine = float(np.dot(a, b) / (na * nb))
        max_abs = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        max_rel = max_abs / scale if scale > 0 else max_abs
        ok = same_nonfinite and cosine >= threshold
        checks.append(OutputCheck(name, round(cosine, 9), max_abs, max_rel, ok))
    return tuple(checks)


def verify(
    reference: Mapping[str, np.ndarray],
    fused_model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    inputs_source: str,
    threshold: float = COSINE_THRESHOLD,
) -> Verification:
    """Run the fused model and compare it with the reference outputs."""
    try:
        got = run_model(fused_model, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types; all mean "fails"
        return Verification(False, inputs_source, (), threshold, runs=1, error=_short(exc))
    checks = compare(reference, got, threshold)
    return Verification(all(c.ok for c in checks), inputs_source, checks, threshold, runs=1)


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def bisect_failures(
    groups: Sequence[FusedGroup],
    passes: Callable[[Sequence[FusedGroup]], bool],
    on_step: Callable[[str], None] | None = None,
) -> tuple[tuple[FusedGroup, ...], tuple[FusedGroup, ...], int]:
    """Drop failing groups one at a time, each found by bisection, until the rest passes.

    ``passes(subset)`` rewrites the model with only ``subset`` and verifies it. Returns
    (kept groups, dropped groups, number of checks run). Assumes the full set failed.
    """
    kept = list(groups)
    dropped: list[FusedGroup] = []
    runs = 0
    while kept:
        suspects = list(kept)
        while len(suspects) > 1:
            half = suspects[: len(suspects) // 2]
            runs += 1
            if not passes(half):
                suspects = half
            else:
                suspects = suspects[len(suspects) // 2 :]
        culprit = suspects[0]
        kept.remove(culprit)
        dropped.append(culprit)
        if on_step:
            on_step(f"safe mode: dropping group {culprit.id} ({culprit.rule})")
        runs += 1
        if passes(kept):
            break
    return tuple(kept), tuple(dropped), runs
