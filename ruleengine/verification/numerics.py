"""Numerical verification: run the original and the fused model in onnxruntime (CPU).

Inputs are seeded random tensors matching the model's input dtypes and shapes (token ids
are small non-negative integers bounded by the embedding table they index, masks are ones)
or the arrays of a user's ``.npz`` file. Each output passes when its cosine similarity is
>= 0.999 and its max absolute error is at most 1e-3 (fp16/bf16: 1e-2) of its largest
magnitude (integer and bool outputs: exactly equal). Safe mode finds a failing group by bisection,
drops it, and repeats until the fused model verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from ruleengine.errors import UsageError
from ruleengine.rewrite.model import FusedGroup, OutputCheck, Verification
from ruleengine.runtime import run_interruptibly

COSINE_THRESHOLD = 0.999
# Cosine alone misses a small wrong term added to a large residual stream, so the max
# absolute error relative to the output's largest magnitude is bounded too. A fused model
# runs the original subgraph, so only reordering round-off is expected.
REL_TOLERANCE = {"float64": 1e-3, "float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}
DEFAULT_INT_BOUND = 100
# Random inputs beyond this (all inputs together) would exhaust memory before onnxruntime
# even starts (e.g. --dim seq=100000): refuse with a hint instead of a MemoryError.
MAX_RANDOM_INPUT_BYTES = 1 << 30
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


# Integer inputs that size an output: random values up to 100 there make outputs of
# gigabytes (Tile repeats [87, 96, 14, 56] on a [2, 3, 4, 5] tensor: 3 GB, a minute of
# onnxruntime). (op, input port) -> the neutral value: repeat once, pad nothing.
_SIZE_PORTS = {
    ("Tile", 1): 1,
    ("Expand", 1): 1,
    ("Pad", 1): 0,
    ("ConstantOfShape", 0): 1,
    ("Upsample", 1): 1,
}


def _size_port_fill(model: onnx.ModelProto, name: str) -> int | None:
    """The neutral value of an integer input every consumer reads as a size (else None)."""
    fills = {
        _SIZE_PORTS.get((n.op_type, port))
        for n in model.graph.node
        if n.domain in ("", "ai.onnx")
        for port, t in enumerate(n.input)
        if t == name
    }
    if len(fills) == 1:
        return fills.pop()
    return None


def make_inputs(
    model: onnx.ModelProto, *, seed: int = 0, dims: Mapping[str, int] | None = None
) -> dict[str, object]:
    """Seeded random feeds for every graph input that is not an initializer.

    Tensors get arrays; sequence inputs a list of two tensors, optional inputs a present
    value (what onnxruntime takes for those types). Other types (maps, sparse tensors)
    cannot be made up: the user passes them with ``--inputs``.
    """
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, object] = {}
    budget = [MAX_RANDOM_INPUT_BYTES]
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        feeds[vi.name] = _random_value(model, vi.name, vi.type, rng, dims or {}, budget)
    return feeds


def _random_value(
    model: onnx.ModelProto,
    name: str,
    tp: onnx.TypeProto,
    rng: np.random.Generator,
    dims: Mapping[str, int],
    budget: list[int],
) -> object:
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        return [_random_value(model, name, elem, rng, dims, budget) for _ in range(2)]
    if kind == "optional_type":
        return _random_value(model, name, tp.optional_type.elem_type, rng, dims, budget)
    if kind != "tensor_type" or not tp.tensor_type.elem_type:
        raise UsageError(
            f"cannot make a random value for model input {name!r} "
            f"(type {kind or 'unknown'}); pass its value with --inputs FILE.npz"
        )
    tt = tp.tensor_type
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    shape = []
    for axis, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
        elif d.dim_param and d.dim_param != "?":  # "?": Paddle2ONNX's "unknown"
            shape.append(int(dims.get(d.dim_param, 1)))
        else:  # nameless or -1: bound by --input-shape or --dim x[0]=...
            shape.append(int(dims.get(f"{name}[{axis}]", 1)))
    size = int(np.prod(shape, dtype=object)) * max(np.dtype(np_dtype).itemsize, 8)
    budget[0] -= size
    if budget[0] < 0:
        raise UsageError(
            f"random verification inputs would need more than "
            f"{MAX_RANDOM_INPUT_BYTES >> 30} GiB (model input {name!r} has shape "
            f"{tuple(shape)}); bind smaller sizes with --dim or pass --inputs FILE.npz"
        )
    if np.dtype(np_dtype) == np.dtype(object):  # ONNX strings
        return rng.integers(0, 10, size=shape).astype(str).astype(object)
    if np_dtype == np.bool_ or "mask" in name.lower():
        return np.ones(shape, dtype=np_dtype)
    if np.issubdtype(np_dtype, np.integer):
        fill = _size_port_fill(model, name)
        if fill is not None:
            return np.full(shape, fill, dtype=np_dtype)
        bound = min(DEFAULT_INT_BOUND, _index_bound(model, name) or DEFAULT_INT_BOUND)
        return rng.integers(0, max(bound, 1), size=shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


def load_inputs(path: str | Path, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Feeds from a user's .npz file; every model input must be there, with the dtype,
    rank and static dims the model declares (so a wrong file is named as such, not
    reported as a model onnxruntime cannot run)."""
    import zipfile

    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read inputs file {path}: {exc}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UsageError(
            f"inputs file {path} is a single .npy array, not an .npz archive; "
            "write one with numpy.savez(path, input_name=array, ...)"
        )
    try:
        with loaded as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read inputs file {path}: {exc}") from None
    initializers = {t.name for t in model.graph.initializer}
    declared = {vi.name: vi for vi in model.graph.input if vi.name not in initializers}
    missing = [n for n in declared if n not in arrays]
    if missing:
        raise UsageError(
            f"inputs file {path} lacks model input(s) {', '.join(missing)}; "
            f"it has {', '.join(sorted(arrays)) or 'nothing'}"
        )
    for name, vi in declared.items():
        problem = _input_mismatch(arrays[name], vi.type)
        if problem:
            raise UsageError(f"inputs file {path}: array {name!r} {problem}")
    return {n: arrays[n] for n in declared}


def _input_mismatch(arr: np.ndarray, tp: onnx.TypeProto) -> str | None:
    """Why ``arr`` cannot feed a tensor input of type ``tp`` (None when it can)."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type:
        return None  # sequences, optionals, maps: onnxruntime checks those
    tt = tp.tensor_type
    try:
        want = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    except Exception:  # ONNX types numpy has no dtype for
        want = onnx.TensorProto.DataType.Name(tt.elem_type).lower()
    try:
        got_type = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except Exception:  # numpy dtypes ONNX has no name for
        got_type = None
    if got_type != tt.elem_type:
        return f"is {arr.dtype}, the model input wants {want}"
    if not tt.HasField("shape"):
        return None
    dims = [
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
        for d in tt.shape.dim
    ]
    shown = f"({', '.join(map(str, dims))})"
    if arr.ndim != len(dims) or any(
        isinstance(d, int) and d != n for d, n in zip(dims, arr.shape, strict=False)
    ):
        return f"has shape {tuple(arr.shape)}, the model input wants {shown}"
    return None


def run_model(
    model: onnx.ModelProto | str | Path,
    feeds: Mapping[str, object],
    external: Mapping[str, np.ndarray] | None = None,
) -> dict:
    """Run a model on CPU; returns output name -> array.

    ``external`` maps external data locations to memory maps of the files (weights.
    external_buffers): a model given as a proto then finds its weights without a path.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # kernel errors are raised; no colour log on stderr
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if external:
        names = list(external)
        buffers = [external[n] for n in names]
        options.add_external_initializers_from_files_in_memory(
            names, buffers, [len(b) for b in buffers]
        )
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    run_options = ort.RunOptions()

    def session_run() -> dict:
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds), run_options), strict=True))

    def stop() -> None:
        run_options.terminate = True  # (a session being built cannot be stopped: abandoned)

    # onnxruntime releases the GIL but holds off Ctrl-C/SIGTERM until it returns (building
    # a 1024-layer session: minutes): run beside the main thread, which answers them
    return run_interruptibly(session_run, stop)


def compare(
    reference: Mapping[str, object],
    fused: Mapping[str, object],
    threshold: float = COSINE_THRESHOLD,
) -> tuple[OutputCheck, ...]:
    """Cosine similarity and max absolute/relative error per output, in reference order.

    Sequence outputs (lists) compare element by element (the worst element counts);
    an absent optional output (None) passes only when the other is absent too.
    """
    return tuple(
        _compare_value(name, ref, fused.get(name), threshold) for name, ref in reference.items()
    )


def _compare_value(name: str, ref: object, got: object, threshold: float) -> OutputCheck:
    failed = OutputCheck(name, 0.0, float("inf"), float("inf"), False)
    if ref is None or got is None:
        return OutputCheck(name, 1.0, 0.0, 0.0, True) if ref is got else failed
    if isinstance(ref, list) or isinstance(got, list):
        if not (isinstance(ref, list) and isinstance(got, list)) or len(ref) != len(got):
            return failed
        parts = [_compare_value(name, r, g, threshold) for r, g in zip(ref, got, strict=True)]
        if not parts:
            return OutputCheck(name, 1.0, 0.0, 0.0, True)
        return OutputCheck(
            name,
            min(p.cosine for p in parts),
            max(p.max_abs_error for p in parts),
            max(p.max_rel_error for p in parts),
            all(p.ok for p in parts),
        )
    return _compare_arrays(name, np.asarray(ref), np.asarray(got), threshold)


def _compare_arrays(name: str, ref: np.ndarray, got: np.ndarray, threshold: float) -> OutputCheck:
    if got.shape != ref.shape:
        return OutputCheck(name, 0.0, float("inf"), float("inf"), False)
    if ref.dtype.kind in "OSU" or got.dtype.kind in "OSU":  # strings: exactly equal
        same = bool(np.array_equal(ref, got))
        return OutputCheck(name, 1.0 if same else 0.0, 0.0, 0.0, same)
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
    rtol = REL_TOLERANCE.get(ref.dtype.name, 0.0)  # other dtypes: exact
    ok = same_nonfinite and cosine >= threshold and max_rel <= rtol
    return OutputCheck(name, round(cosine, 9), max_abs, max_rel, ok)


def verify(
    reference: Mapping[str, np.ndarray],
    fused_model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    inputs_source: str,
    threshold: float = COSINE_THRESHOLD,
    external: Mapping[str, np.ndarray] | None = None,
) -> Verification:
    """Run the fused model and compare it with the reference outputs."""
    try:
        got = run_model(fused_model, feeds, external)
    except MemoryError:
        raise
    except Exception as exc:  # onnxruntime raises many types; all mean "fails"
        if is_out_of_memory(exc):
            raise MemoryError(str(exc)) from None
        return Verification(False, inputs_source, (), threshold, runs=1, error=_short(exc))
    checks = compare(reference, got, threshold)
    return Verification(all(c.ok for c in checks), inputs_source, checks, threshold, runs=1)


def is_out_of_memory(exc: BaseException) -> bool:
    """onnxruntime reports a failed allocation as a generic error; tell it apart."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or any(
        k in text for k in ("bad_alloc", "bad allocation", "failed to allocate")
    )


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


def isolate_failures(
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    groups: Sequence[FusedGroup],
    feeds: Mapping[str, np.ndarray],
    threshold: float = COSINE_THRESHOLD,
    *,
    model_dir: Path | None = None,
    external: Mapping[str, np.ndarray] | None = None,
) -> tuple[tuple[FusedGroup, ...], int]:
    """Check each fused node on its own: feed it the original model's values of its inputs
    and compare its outputs with the original's values. Returns (failing groups, runs).

    Exact and linear in the number of groups (bisection needs O(k log n) whole-model runs
    for k failures); a failure only visible in combination is left to bisection.
    """
    from ruleengine.rewrite.weights import tensor_array

    wanted: list[str] = []
    for g in groups:
        wanted += [*g.inputs, *g.outputs]
    probe = _with_outputs(original, wanted)
    values = dict(feeds)
    needed = set(wanted)
    base = model_dir or Path(".")
    values.update(
        {t.name: tensor_array(t, base) for t in original.graph.initializer if t.name in needed}
    )
    values.update(run_model(probe, feeds, external))
    values.update(_constant_values(original))
    by_name = {n.name: n for n in fused.graph.node}
    bad: list[FusedGroup] = []
    runs = 1
    for g in groups:
        node = by_name.get(f"{g.target_op}_g{g.id}") or next(
            (n for n in fused.graph.node if _meta_value(n, "autofusion.group_id") == str(g.id)),
            None,
        )
        if node is None or any(t not in values for t in g.inputs):
            continue
        if any(t not in values for t in node.input if t):
            continue
        feed = {t: np.asarray(values[t]) for t in node.input if t}
        try:
            got = run_model(_single_node_model(fused, node, feed), feed)
        except Exception:  # a fused node that does not even run has failed
            bad.append(g)
            runs += 1
            continue
        runs += 1
        ref = {t: values[t] for t in g.outputs if t in values}
        if not all(c.ok for c in compare(ref, got, threshold)):
            bad.append(g)
    return tuple(bad), runs


def _meta_value(node: onnx.NodeProto, key: str) -> str | None:
    return next((e.value for e in node.metadata_props if e.key == key), None)


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out: dict[str, np.ndarray] = {}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the named intermediate tensors."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    g = probe.graph
    have = {o.name for o in g.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    produced = {t for n in g.node for t in n.output if t}
    extra = [t for t in dict.fromkeys(names) if t not in have and t in produced]
    for t in extra:
        g.output.append(onnx.ValueInfoProto(name=t))
    return probe


def _single_node_model(
    fused: onnx.ModelProto, node: onnx.NodeProto, inputs: Mapping[str, np.ndarray]
) -> onnx.ModelProto:
    """A model holding one fused node (and the model's functions), inputs as graph inputs."""
    from onnx import helper

    call = onnx.NodeProto()
    call.CopyFrom(node)
    graph = helper.make_graph(
        [call],
        "isolated",
        [
            helper.make_tensor_value_info(
                t, helper.np_dtype_to_tensor_dtype(inputs[t].dtype), inputs[t].shape
            )
            for t in dict.fromkeys(call.input)  # a tensor feeding two ports is one input
            if t
        ],
        [onnx.ValueInfoProto(name=t) for t in call.output if t],
    )
    model = helper.make_model(graph, opset_imports=list(fused.opset_import))
    model.ir_version = fused.ir_version
    model.functions.extend(fused.functions)
    return model
