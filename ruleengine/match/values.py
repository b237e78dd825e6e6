"""The value check of a constant input (``value``, ``value_in``, ``tolerance``, ``shape``).

A rule says what a constant must hold: ``input1: {source_type: const, value: 3.0}``. The
constant is found as ``source_type: const`` finds it (through Identity, Cast, CastLike and
Transpose) and its values are the ones the model loader kept: constants of at most 64
elements (``graph.values.SMALL_CONST_NUMEL``); a weight's bytes are never read. Casts and
Transposes on the way are applied, so an fp16 constant cast to float32 is compared as
the float32 the consumer reads. A failed check raises ``Reject("const-value", ...)``: a
near miss that says which value was found and which was expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ruleengine.graph.model import Graph, Node
from ruleengine.graph.values import dtype_name
from ruleengine.match.binding import Reject
from ruleengine.match.tensors import const_source
from ruleengine.rules.model import ConstValue

NEAR_MISS_CODE = "const-value"

# Default relative tolerance by the narrowest float dtype on the way (a constant stored
# as float16 is only that close to the number the rule writes); integers compare exactly.
DEFAULT_REL = {"bfloat16": 1e-2, "float16": 1e-3}
DEFAULT_REL_FLOAT = 1e-4


def check_const_value(graph: Graph, spec: ConstValue, tensor: str, where: str) -> None:
    """Raise ``Reject`` unless constant ``tensor`` (read on ``where``) holds ``spec``."""
    t = graph.tensors[tensor]
    if spec.shape is not None and not _shape_ok(spec.shape, t.shape):
        raise Reject(
            NEAR_MISS_CODE,
            f"{where} has shape {_shape_text(t.shape)} (tensor {tensor!r}), the rule asks "
            f"for {_shape_text(spec.shape)}",
        )
    if not spec.checks_values:
        return
    got = const_values(graph, tensor)
    if got is None:
        size = f"{t.numel:,} elements" if t.numel is not None else "an unknown size"
        raise Reject(
            NEAR_MISS_CODE,
            f"{where}: the values of constant {tensor!r} ({size}) are not read (only "
            "constants of at most 64 elements are), so value/value_in cannot hold",
        )
    have, dtypes = got
    rel, abs_ = tolerance(spec, dtypes)
    if not _holds(spec, have, rel, abs_):
        raise Reject(
            NEAR_MISS_CODE,
            f"{where} is {_values_text(have)} (constant {tensor!r}), the rule asks for "
            f"{_want_text(spec)}{_tol_text(spec, rel, abs_)}{_fix_text(spec, have)}",
        )


def const_values(graph: Graph, tensor: str) -> tuple[list[float], tuple[str, ...]] | None:
    """The elements tensor ``tensor`` holds (in order, after the Casts and Transposes
    between it and its constant) and the dtypes on the way; None when it is no constant
    or its values were not kept."""
    src = const_source(graph, tensor)
    if src is None:
        return None
    base = graph.tensors[src[0]]
    if base.const_value is None:
        return None
    try:
        arr = np.asarray(base.const_value, dtype=_np_dtype(base.dtype))
    except (TypeError, ValueError):
        return None
    if base.is_static and base.numel == arr.size:
        arr = arr.reshape(tuple(int(d) for d in base.shape or ()))
    dtypes = [base.dtype or ""]
    for node in src[1]:
        arr = _apply(graph, node, arr, dtypes)
        if arr is None:
            return None
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    return [v for v in arr.reshape(-1).tolist()], tuple(dtypes)


def _apply(graph: Graph, node: Node, arr: np.ndarray, dtypes: list[str]) -> np.ndarray | None:
    """One pass-through op on the way from the constant: a Cast converts, a Transpose
    permutes (a value list is compared in the order the consumer reads)."""
    if node.op_type == "Cast":
        name = dtype_name(int(node.attributes.get("to", 0) or 0))
    elif node.op_type == "CastLike":
        like = graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
        name = like.dtype if like is not None else None
    elif node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        if arr.ndim < 2:
            return arr
        try:
            return np.transpose(arr, tuple(perm) if perm else None)
        except ValueError:
            return None
    else:  # Identity
        return arr
    if not name:
        return None
    dtypes.append(name)
    try:
        return arr.astype(_np_dtype(name))
    except (TypeError, ValueError):
        return None


def _np_dtype(name: str | None) -> np.dtype:
    """numpy's dtype for a tensor dtype name; float64 for one numpy lacks (bfloat16, the
    float8s: the values are compared as numbers, with that dtype's tolerance)."""
    try:
        return np.dtype(name or "float64")
    except TypeError:
        return np.dtype("float64")


def tolerance(spec: ConstValue, dtypes: tuple[str, ...]) -> tuple[float, float]:
    """(relative, absolute) tolerance: the rule's, else the default of the narrowest
    float dtype the constant passed through (0 for integers: exact)."""
    if spec.rel is not None or spec.abs is not None:
        return float(spec.rel or 0.0), float(spec.abs or 0.0)
    floats = [d for d in dtypes if d.startswith(("float", "bfloat"))]
    if not floats:
        return 0.0, 0.0
    return max(DEFAULT_REL.get(d, DEFAULT_REL_FLOAT) for d in floats), 0.0


def close(have: float, want: float, rel: float, abs_: float) -> bool:
    """|have - want| <= max(abs, rel * max(|have|, |want|)); NaN is close to nothing."""
    if have == want:
        return True
    if math.isnan(have) or math.isnan(want):
        return False
    return abs(have - want) <= max(abs_, rel * max(abs(have), abs(want)))


def _holds(spec: ConstValue, have: list[float], rel: float, abs_: float) -> bool:
    if isinstance(spec.value, tuple):
        return len(have) == len(spec.value) and all(
            close(h, w, rel, abs_) for h, w in zip(have, spec.value, strict=True)
        )
    if spec.value is not None:
        return bool(have) and all(close(h, spec.value, rel, abs_) for h in have)
    wants = spec.value_in or ()
    return bool(have) and all(any(close(h, w, rel, abs_) for w in wants) for h in have)


def _shape_ok(want: tuple[int, ...] | str, have: tuple | None) -> bool:
    if have is None:
        return False
    if want == "scalar":
        return all(d == 1 for d in have)
    return tuple(have) == tuple(want)


def _shape_text(shape: Any) -> str:
    if shape == "scalar":
        return "scalar (one element)"
    if shape is None:
        return "unknown"
    return "[" + ", ".join(map(str, shape)) + "]"


def _num(v: float) -> str:
    return repr(int(v)) if isinstance(v, int) else f"{v:.8g}"


def _values_text(have: list[float]) -> str:
    if len(set(have)) == 1:
        return _num(have[0]) if len(have) == 1 else f"{_num(have[0])} (x{len(have)})"
    shown = ", ".join(_num(v) for v in have[:8])
    return f"[{shown}{', ...' if len(have) > 8 else ''}]"


def _want_text(spec: ConstValue) -> str:
    if isinstance(spec.value, tuple):
        return "[" + ", ".join(_num(v) for v in spec.value) + "]"
    if spec.value is not None:
        return _num(spec.value)
    return "one of " + ", ".join(_num(v) for v in spec.value_in or ())


def _fix_text(spec: ConstValue, have: list[float]) -> str:
    """How the rule would match this node: the value it holds, if it is one value."""
    if len(set(have)) != 1 or isinstance(spec.value, tuple):
        return ""
    key = "value" if spec.value is not None else "value_in"
    shown = _num(have[0]) if key == "value" else f"[..., {_num(have[0])}]"
    return f"; `{key}: {shown}` would match it"


def _tol_text(spec: ConstValue, rel: float, abs_: float) -> str:
    if not rel and not abs_:
        return ""
    parts = [f"rel {rel:g}"] if rel else []
    parts += [f"abs {abs_:g}"] if abs_ else []
    return f" (tolerance {', '.join(parts)}{'' if spec.rel or spec.abs else ', the default'})"
