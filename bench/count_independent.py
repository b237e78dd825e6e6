"""An independent count of coverage, to check bench/coverage.py (issue 40).

Coverage is defined once, in the docstring of ruleengine/coverage.py; this script reads that
docstring as a specification and counts again with its own code. It imports nothing from
``ruleengine``: the model is read with ``onnx``, tensor sizes come from the model and
onnxruntime's symbolic shape inference, and the groups are the ones that
``autofusion explain MODEL --format json`` chooses (its candidates with a ``group`` number;
``nodes`` names each group's nodes), run as a subprocess. Beside it the script runs
``bench/coverage.py --json`` on the same model, right after, so both counts see the same
rule library, and prints both coverages, their difference and the 80% transformer bar by
each count. Two honest counts of one thing must agree: a difference of more than 0.1 point,
or a bar met by one count and missed by the other, is a bug in one of them.

The definition, as read here:
- an *edge* is (producer node, consumer node, tensor) where the tensor is computed at run
  time: it depends on a graph input and no compiler can fold it (initializers, Constant
  outputs, Shape/Size of a tensor of static shape, and every output of a deterministic
  standard op whose inputs all fold, are compile-time);
- view ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity) move no data: an edge is traced
  back through them to the node that produced the storage, and edges into a view are not
  counted on their own;
- an edge is not counted when both ends are cube ops, or either end is opaque (control
  flow, ops with data-dependent output shapes or random outputs, sequences and optionals),
  shape-like (its output is metadata or a constant) or of a domain other than ONNX's;
- its bytes are the tensor's size (an edge whose size is unknown is counted apart);
  it is captured when both ends are in the same group. Coverage = captured / fusable.

Run: ``.venv/bin/python bench/count_independent.py [--json] MODEL|FOLDER...``
(a folder stands for its *.onnx; models of a folder named ``real`` take their input shapes
from bench/real_models.json, as bench/coverage.py does). Exit status 1 when the two counts
disagree on some model.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
REAL_MODELS = ROOT / "bench" / "real_models.json"
BAR = 0.80  # the transformer coverage bar (issue 11)
TOLERANCE = 0.001  # 0.1 point

# The three ways a node can fall outside the metric, and the two that matter inside it.
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
CUBE_OPS = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "ConvTranspose",
        "Einsum",
        "MatMulInteger",
        "ConvInteger",
        "QLinearMatMul",
        "QLinearConv",
    }
)
SHAPE_LIKE_OPS = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike"})
RANDOM_OPS = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)
OPAQUE_OPS = RANDOM_OPS | frozenset(
    {
        "If",
        "Loop",
        "Scan",
        # output shape depends on the data
        "NonZero",
        "NonMaxSuppression",
        "Unique",
        "Compress",
        "TopK",
        # sequences and optionals are not tensors
        "SequenceConstruct",
        "SequenceAt",
        "SequenceInsert",
        "SequenceErase",
        "SequenceLength",
        "SequenceEmpty",
        "SplitToSequence",
        "ConcatFromSequence",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
    }
)
ONNX_DOMAINS = ("", "ai.onnx")


# ----------------------------------------------------------------------------- the model


def real_input_shapes(path: Path) -> dict[str, list[int]]:
    """The input shapes bench/real_models.json gives a model of ``real/`` (else none)."""
    if path.parent.name != "real" or not REAL_MODELS.is_file():
        return {}
    entry = json.loads(REAL_MODELS.read_text())["models"].get(path.name, {})
    return {k: list(v) for k, v in entry.get("input_shapes", {}).items()}


def node_names(graph: onnx.GraphProto) -> list[str]:
    """The names explain gives the nodes: the model's own, ``<op_type>_<index>`` for a
    nameless node, ``__<k>`` appended to a name taken twice (docs/report.md)."""
    given = [n.name for n in graph.node]
    taken = {n for n in given if n}
    if len(taken) == len(given):
        return given
    seen: set[str] = set()
    out: list[str] = []
    for i, node in enumerate(graph.node):
        base = node.name or f"{node.op_type}_{i}"
        name, k = base, 1
        if name in seen or (not node.name and name in taken):
            while name in seen or name in taken:
                k += 1
                name = f"{base}__{k}"
        seen.add(name)
        out.append(name)
    return out


def with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
    """Set whole graph-input shapes (the --input-shape bindings of a real model)."""
    for vi in model.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[vi.name]:
                dims.add().dim_value = int(d)


def inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with value_info from onnxruntime's symbolic shape inference (or ONNX's own
    when that fails), so every intermediate has a dtype and, where it is known, a shape."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    try:
        out = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)
        if out is not None:
            return out
    except Exception as exc:  # any failure falls back to ONNX's inference
        print(f"  symbolic shape inference failed ({exc}); ONNX's instead", file=sys.stderr)
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # the model's own value_info is all there is
        print(f"  ONNX shape inference failed too ({exc})", file=sys.stderr)
        return model


def tensor_sizes(model: onnx.ModelProto) -> dict[str, int | None]:
    """Tensor name -> bytes (None: a dim or the dtype is not known)."""
    sizes: dict[str, int | None] = {}
    g = model.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            sizes.setdefault(vi.name, None)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        try:
            item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            item = None
        known = item is not None and all(d is not None and d >= 0 for d in dims)
        size = math.prod(dims) * item if known else None
        if sizes.get(vi.name) is None:
            sizes[vi.name] = size
    return sizes


def has_body(node: onnx.NodeProto) -> bool:
    return any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    )


def outer_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's bodies read from the enclosing graph (a body's free tensors)."""
    out: set[str] = set()
    for attr in node.attribute:
        bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        if attr.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            continue
        for body in bodies:
            defined = {i.name for i in body.input} | {i.name for i in body.initializer}
            for inner in body.node:
                out |= {t for t in inner.input if t and t not in defined}
                out |= outer_reads(inner) - defined
                defined |= set(inner.output)
    return out


def kind(node: onnx.NodeProto) -> str:
    """opaque, cube, view or vector."""
    if (
        node.domain not in ONNX_DOMAINS
        or node.op_type in OPAQUE_OPS
        or node.op_type in SHAPE_LIKE_OPS
        or has_body(node)
    ):
        return "opaque"
    if node.op_type in CUBE_OPS:
        return "cube"
    return "view" if node.op_type in VIEW_OPS else "vector"


def run_time(model: onnx.ModelProto, shapes: Mapping[str, Sequence]) -> set[str]:
    """Tensors computed at run time: reached from a graph input, and not foldable."""
    g = model.graph
    weights = {t.name for t in g.initializer}
    folded = set(weights)
    live = {i.name for i in g.input if i.name not in weights}
    for node in g.node:  # ONNX requires topological order
        ins = [t for t in node.input if t]
        reads = ins + sorted(outer_reads(node)) if has_body(node) else ins
        if node.op_type == "Constant" and node.domain in ONNX_DOMAINS:
            folded.update(node.output)
            continue
        if (
            ins
            and node.domain in ONNX_DOMAINS
            and not has_body(node)
            and node.op_type not in RANDOM_OPS
        ):
            if node.op_type in ("Shape", "Size"):
                dims = shapes.get(ins[0])
                foldable = dims is not None and all(isinstance(d, int) for d in dims)
            else:
                foldable = all(t in folded for t in ins)
            if foldable:
                folded.update(t for t in node.output if t)
                continue
        if any(t in live for t in reads):
            live.update(t for t in node.output if t)
    return live - folded


def static_shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Tensor name -> dims (an int, or None where symbolic)."""
    g = model.graph
    out: dict[str, list] = {}
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for t in g.initializer:
        out[t.name] = list(t.dims)
    return out


@dataclass
class EdgeCount:
    producer: str
    consumer: str
    tensor: str
    nbytes: int | None


def edges(model: onnx.ModelProto) -> list[EdgeCount]:
    """Every fusable producer -> consumer edge (nbytes None: size unknown)."""
    g = model.graph
    names = node_names(g)
    node_of = dict(zip(names, g.node, strict=True))
    kinds = {name: kind(n) for name, n in node_of.items()}
    producer = {t: name for name, n in node_of.items() for t in n.output if t}
    live = run_time(model, static_shapes(model))
    sizes = tensor_sizes(model)

    def storage(tensor: str) -> str | None:
        """The non-view node whose output ``tensor`` is a view of."""
        for _ in range(1000):
            p = producer.get(tensor)
            if p is None or kinds[p] != "view":
                return p
            data = node_of[p].input
            if not data or not data[0]:
                return p
            tensor = data[0]
        return None

    out: list[EdgeCount] = []
    for name, node in node_of.items():
        ck = kinds[name]
        if ck in ("view", "opaque"):
            continue
        for t in dict.fromkeys(x for x in node.input if x):
            if t not in live:
                continue
            p = storage(t)
            if p is None or kinds[p] == "opaque" or (kinds[p] == ck == "cube"):
                continue
            out.append(EdgeCount(p, name, t, sizes.get(t)))
    return out


# ----------------------------------------------------------------------------- the groups


def explain_groups(path: Path, shapes: Mapping[str, Sequence[int]]) -> tuple[list[set[str]], int]:
    """The groups ``autofusion explain --format json`` chooses (node-name sets) and the bytes
    they save by its cost model (``summary.gross_bytes_saved``)."""
    cmd = [str(VENV_BIN / "autofusion"), "explain", str(path), "--format", "json"]
    for name, dims in shapes.items():
        cmd += ["--input-shape", f"{name}:{','.join(map(str, dims))}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"explain failed on {path.name}: {done.stderr.strip()[-500:]}")
    report = json.loads(done.stdout)
    groups: dict[int, set[str]] = {}
    for cand in report["candidates"]:
        if cand.get("group") is not None:
            groups.setdefault(int(cand["group"]), set()).update(cand["nodes"])
    return list(groups.values()), int(report["summary"]["gross_bytes_saved"])


def bench_row(path: Path) -> dict:
    """bench/coverage.py's JSON row for one model (its own run, --no-ort)."""
    cmd = [sys.executable, str(ROOT / "bench" / "coverage.py"), "--json", "--no-ort", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench/coverage.py failed on {path.name}: {done.stderr[-500:]}")
    return json.loads(done.stdout)["models"][0]


@dataclass
class Count:
    """Our count of one model's coverage."""

    fusable_bytes: int
    captured_bytes: int
    unknown_edges: int
    edges: list[EdgeCount] = field(default_factory=list, repr=False)

    @property
    def coverage(self) -> float:
        return self.captured_bytes / self.fusable_bytes if self.fusable_bytes else 1.0


def count(model: onnx.ModelProto, groups: Iterable[Iterable[str]]) -> Count:
    """Coverage of ``groups`` on ``model`` (already shape-inferred)."""
    group_of = {n: i for i, g in enumerate(groups) for n in g}
    all_edges = edges(model)
    known = [e for e in all_edges if e.nbytes is not None]
    captured = sum(
        e.nbytes
        for e in known
        if e.producer in group_of and group_of[e.producer] == group_of.get(e.consumer)
    )
    fusable = sum(e.nbytes for e in known)
    return Count(fusable, captured, len(all_edges) - len(known), all_edges)


def load(path: Path, shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """The model, its input shapes set (``shapes``) and its intermediates shape-inferred;
    what inference leaves unknown is observed in one onnxruntime run (``observe``)."""
    model = onnx.load(str(path))
    if shapes:
        with_input_shapes(model, shapes)
    return load_model(model, real_inputs(path))


def load_model(model: onnx.ModelProto, inputs: Mapping[str, dict] | None = None) -> onnx.ModelProto:
    """``load`` of a model in memory (``inputs``: explicit inputs for the observing run)."""
    model = inferred(model)
    branching = behind_opaque(model)
    unknown = [
        t for t, dims in intermediate_shapes(model).items() if dims is None and t not in branching
    ]
    if unknown:
        observe(model, unknown, inputs or {})
    return model


def intermediate_shapes(model: onnx.ModelProto) -> dict[str, list[int] | None]:
    """Every node output of the main graph -> its static dims (None: not all known)."""
    shapes = static_shapes(model)
    out: dict[str, list[int] | None] = {}
    for node in model.graph.node:
        for t in node.output:
            if t:
                dims = shapes.get(t)
                out[t] = dims if dims is not None and None not in dims else None
    return out


def behind_opaque(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from an opaque node's output (an If's branch, a NonZero): their
    shapes are not static, so one run does not give them."""
    out: set[str] = set()
    for node in model.graph.node:
        if kind(node) == "opaque" and node.op_type not in SHAPE_LIKE_OPS:
            out.update(t for t in node.output if t)
        elif any(t in out for t in node.input):
            out.update(t for t in node.output if t)
    return out


def real_inputs(path: Path) -> dict[str, dict]:
    """The explicit inputs bench/real_models.json gives a real model (silero's sr)."""
    if path.parent.name != "real" or not REAL_MODELS.is_file():
        return {}
    return json.loads(REAL_MODELS.read_text())["models"].get(path.name, {}).get("inputs", {})


def _feed(model: onnx.ModelProto, spec: Mapping[str, dict]) -> dict[str, np.ndarray]:
    """Inputs for one run: ``spec``'s where given, else zeros (integers) or a seeded normal
    x0.1 (floats) of the input's static shape."""
    rng = np.random.default_rng(0)
    weights = {t.name for t in model.graph.initializer}
    feed: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        given = spec.get(vi.name, {})
        if "value" in given:
            feed[vi.name] = np.asarray(given["value"], dtype=given.get("dtype", dtype))
            continue
        dims = given.get("zeros") or given.get("normal") or [d.dim_value for d in tt.shape.dim]
        if dtype.kind == "f" and "zeros" not in given:
            feed[vi.name] = (0.1 * rng.standard_normal(dims)).astype(dtype)
        else:
            feed[vi.name] = np.zeros(dims, dtype)
    return feed


def observe(model: onnx.ModelProto, tensors: Sequence[str], spec: Mapping[str, dict]) -> None:
    """Fill the shapes of ``tensors`` that inference left unknown from one onnxruntime run
    on seeded inputs (every graph input has a static shape: bound or declared). Shapes
    computed by constant subgraphs (a Pad whose sizes come from Shape arithmetic) are
    static, but onnxruntime's symbolic inference does not evaluate such subgraphs."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in tensors if t not in known)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(probe.SerializeToString(), opts, ["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = dict(zip(names, session.run(names, _feed(model, spec)), strict=True))
    except Exception as exc:  # no run, no observation: the sizes stay unknown
        print(f"  onnxruntime could not run the model ({str(exc)[:200]})", file=sys.stderr)
        return
    infos = {vi.name: vi for vi in model.graph.value_info}
    for t in tensors:
        value = values.get(t)
        if not isinstance(value, np.ndarray):
            continue
        vi = infos.get(t)
        if vi is None:
            vi = model.graph.value_info.add()
            vi.name = t
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        vi.type.tensor_type.elem_type = elem
        dims = vi.type.tensor_type.shape.dim
        del dims[:]
        for d in value.shape:
            dims.add().dim_value = int(d)


# ----------------------------------------------------------------------------- report


@dataclass
class Row:
    model: str
    family: str
    ours: float
    bench: float
    fusable_ours: int
    fusable_bench: int
    captured_ours: int
    captured_bench: int
    unknown_ours: int
    unknown_bench: int
    saved_explain: int
    saved_bench: int

    @property
    def difference(self) -> float:
        return self.ours - self.bench

    def bar(self, coverage: float) -> bool | None:
        return coverage >= BAR if self.family == "transformer" else None

    @property
    def agree(self) -> bool:
        return abs(self.difference) <= TOLERANCE and self.bar(self.ours) == self.bar(self.bench)


def compare(path: Path) -> Row:
    """Both counts of one model, back to back."""
    shapes = real_input_shapes(path)
    groups, saved = explain_groups(path, shapes)
    ours = count(load(path, shapes), groups)
    bench = bench_row(path)
    return Row(
        model=path.name,
        family=bench["family"],
        ours=ours.coverage,
        bench=bench["captured_bytes"] / bench["fusable_bytes"] if bench["fusable_bytes"] else 1.0,
        fusable_ours=ours.fusable_bytes,
        fusable_bench=bench["fusable_bytes"],
        captured_ours=ours.captured_bytes,
        captured_bench=bench["captured_bytes"],
        unknown_ours=ours.unknown_edges,
        unknown_bench=bench["unknown_edges"],
        saved_explain=saved,
        saved_bench=bench["hbm_before"] - bench["hbm_after"],
    )


def _bar(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "NOT")


def render(rows: list[Row]) -> str:
    head = (
        f"{'model':40} {'fam':4} {'ours':>7} {'bench':>7} {'diff':>6} {'bar ours':>8} "
        f"{'bar bench':>9} {'fusable ours/bench':>21} {'same groups':>11} agree"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.model:40} {r.family[:4]:4} {r.ours:>7.2%} {r.bench:>7.2%} "
            f"{100 * r.difference:>+6.2f} {_bar(r.bar(r.ours)):>8} {_bar(r.bar(r.bench)):>9} "
            f"{r.fusable_ours:>10}/{r.fusable_bench:<10} "
            f"{'yes' if r.saved_explain == r.saved_bench else 'NO':>11} "
            f"{'yes' if r.agree else 'NO'}"
        )
    trans = [r for r in rows if r.family == "transformer"]
    lines.append(
        f"{sum(r.agree for r in rows)}/{len(rows)} models agree; transformers at the bar: "
        f"{sum(bool(r.bar(r.ours)) for r in trans)}/{len(trans)} by ours, "
        f"{sum(bool(r.bar(r.bench)) for r in trans)}/{len(trans)} by bench/coverage.py"
    )
    return "\n".join(lines)


def expand(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out += sorted(p.glob("*.onnx")) if p.is_dir() else [p]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path, help="models or folders of models")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.models if not p.exists()]
    if missing:
        ap.error(f"no such model or folder: {', '.join(missing)}")
    rows, failed = [], []
    for path in expand(args.models):
        try:
            row = compare(path)
        except RuntimeError as exc:  # explain or the bench refused the model: said, not counted
            print(f"  {path.name}: {exc}", file=sys.stderr)
            failed.append(path.name)
            continue
        rows.append(row)
        print(f"  {path.name}: {row.ours:.2%} / {row.bench:.2%}", file=sys.stderr)
    if failed:
        print(f"not measured (explain or the bench failed): {', '.join(failed)}", file=sys.stderr)
    if args.json:
        out = [
            {
                **asdict(r),
                "difference": r.difference,
                "agree": r.agree,
                "bar_ours": r.bar(r.ours),
                "bar_bench": r.bar(r.bench),
            }
            for r in rows
        ]
        print(json.dumps({"schema_version": 1, "models": out}, indent=2))
    else:
        print(render(rows))
    return 0 if all(r.agree for r in rows) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
