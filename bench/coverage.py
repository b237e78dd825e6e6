"""Coverage of the bundled rule library on real models, beside onnxruntime's own fusions.

For every model in ../shared/models, ../shared/models/families and ../shared/models/real
(its input shapes bound as real/README.md gives them: bench/real_models.json), every light model
shipped inside the ``onnx`` package (onnx/backend/test/data/light/*.onnx) and
LLaMA-7B-shaped synthetic decoder layers (shapes only, ``llama7b_shaped``) it reports:
fused groups per rule, nodes before/after, HBM traffic before/after (the cost model's
numbers on the target), the fraction of *fusable intermediate traffic* that the chosen
groups capture, the fuse-everything and epilogue-only ceilings of the traffic reduction,
whether the model meets its family's acceptance bars, and, beside it, what onnxruntime's
ORT_ENABLE_EXTENDED optimizer does on CPU (node count after, the fused op types it
introduced). ``--markdown`` prints the results table of README.md.

Family: a model is a *transformer* when a Softmax output reaches a MatMul/Gemm/Einsum
(the attention signature), else a *cnn*. Structural, so an export of a family nobody
listed is classified the same way. Bars (issue 11): transformer: coverage >= 80% and
traffic reduction >= min(30%, 0.8 x fuse-everything ceiling); cnn: traffic reduction >=
0.8 x epilogue-only ceiling (the Conv+BN(+activation) bar is in tests/library/test_bars.py).

Fusable intermediate traffic, coverage and the traffic ceilings are defined once, in
``ruleengine/coverage.py`` (its docstring gives the definitions the acceptance bars use);
``autofusion suggest`` measures with the same module.

Symbolic dims that the exporter left in ``value_info`` (TorchScript writes ``unk__N`` for
shapes computed by constant subgraphs) are resolved by the graph loader itself
(onnxruntime's symbolic shape inference), as for any user: nothing is bound by hand.

Run: ``.venv/bin/python bench/coverage.py [--json] [--solver exact|greedy] [MODEL...]``.
A MODEL that is a folder stands for its *.onnx (``bench/coverage.py models/families``);
``--repo-families`` adds the repo's own dev families (models/families, issue 40) to the models
measured. They are not in ``shared_models`` (the bars' corpus of tests/library/test_bars.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # real_models beside this file (also when imported)
import real_models  # noqa: E402

SHARED_MODELS = ROOT / ".." / "shared" / "models"
FAMILY_MODELS = SHARED_MODELS / "families"
REPO_FAMILIES = ROOT / "models" / "families"  # the repo's own exports (models/export.py)
CUBE_MATMULS = frozenset({"MatMul", "Gemm", "Einsum"})


def light_models() -> list[Path]:
    """The light CNN models that ship inside the onnx wheel."""
    base = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
    return sorted(base.glob("*.onnx"))


def shared_models() -> list[Path]:
    """Every model in ../shared/models and ../shared/models/families (the acceptance bars'
    corpus, tests/library/test_bars.py; real/ is measured beside it, ``main``)."""
    out: list[Path] = []
    for folder in (SHARED_MODELS, FAMILY_MODELS):
        if folder.is_dir():
            out += sorted(folder.resolve().glob("*.onnx"))
    return out


def repo_family_models() -> list[Path]:
    """The repo's own dev families, models/families/*.onnx (issue 40: fused projections,
    relative position bias, windowed attention); not part of ``shared_models``."""
    return sorted(REPO_FAMILIES.resolve().glob("*.onnx")) if REPO_FAMILIES.is_dir() else []


def expand(paths: list[Path]) -> list[Path]:
    """Model arguments as files: a folder stands for its *.onnx (sorted), so
    ``bench/coverage.py models/families`` measures every repo family."""
    out: list[Path] = []
    for path in paths:
        out += sorted(path.glob("*.onnx")) if path.is_dir() else [path]
    return out


def family(path: Path) -> str:
    """'transformer' when a Softmax output reaches a MatMul/Gemm/Einsum through non-cube
    ops (casts, NaN guards, dropout), else 'cnn'."""
    graph = onnx.load(str(path), load_external_data=False).graph
    consumers: dict[str, list] = collections.defaultdict(list)
    for node in graph.node:
        for t in node.input:
            consumers[t].append(node)
    for node in graph.node:
        if node.op_type != "Softmax":
            continue
        frontier, seen = list(node.output), 0
        while frontier and seen < 64:
            seen += 1
            for c in consumers.get(frontier.pop(), ()):
                if c.op_type in CUBE_MATMULS:
                    return "transformer"
                frontier.extend(c.output)
    return "cnn"


# ----------------------------------------------------------------------------- metric


@dataclass
class Coverage:
    model: str
    family: str
    nodes_before: int
    nodes_after: int
    hbm_before: int
    hbm_after: int
    fusable_bytes: int
    captured_bytes: int
    unknown_edges: int
    ceiling_fuse_everything: float
    ceiling_epilogue_only: float
    groups: dict[str, int]
    candidates: int
    verdicts: dict[str, int]
    solver_status: str
    seconds: float
    ort_nodes_after: int | None = None
    ort_fused_types: list[str] = field(default_factory=list)

    @property
    def captured(self) -> float:
        return self.captured_bytes / self.fusable_bytes if self.fusable_bytes else 1.0

    @property
    def hbm_reduction(self) -> float:
        return 1.0 - self.hbm_after / self.hbm_before if self.hbm_before else 0.0

    def bars(self) -> dict[str, bool]:
        """The acceptance bars of the model's family (issue 11, docs/rule-library.md)."""
        if self.family == "transformer":
            traffic_bar = min(0.30, 0.8 * self.ceiling_fuse_everything)
            return {
                "coverage": self.captured >= 0.80,
                "traffic": self.hbm_reduction >= traffic_bar - 1e-9,
            }
        return {"epilogue": self.hbm_reduction >= 0.8 * self.ceiling_epilogue_only - 1e-9}


def measure(
    path: Path, *, preset: str = "all", target: str = "ascend910b", solver: str = "exact"
) -> tuple[Coverage, object]:
    """Analyse one model with the bundled library; return its coverage and the Analysis."""
    from ruleengine import coverage
    from ruleengine.pipeline import analyze

    t0 = time.perf_counter()
    shapes = real_models.input_shapes(path) if path.parent.name == "real" else None
    analysis = analyze(path, preset=preset, target=target, solver=solver, input_shapes=shapes)
    seconds = time.perf_counter() - t0
    graph = analysis.graph
    chosen = analysis.resolution.chosen
    edges = coverage.fusable_edges(graph)
    figures = coverage.measure(graph, (sc.candidate.nodes for sc in chosen), edges)
    ceilings = coverage.ceilings(graph, edges)
    before = ceilings.hbm_before
    saved = sum(sc.cost.bytes_saved for sc in chosen if sc.cost is not None)
    fused_nodes = sum(len(sc.candidate.node_set) for sc in chosen)
    cov = Coverage(
        model=path.name,
        family=family(path),
        nodes_before=len(graph.nodes),
        nodes_after=len(graph.nodes) - fused_nodes + len(chosen),
        hbm_before=before,
        hbm_after=before - saved,
        fusable_bytes=figures.fusable_bytes,
        captured_bytes=figures.captured_bytes,
        unknown_edges=figures.unknown_edges,
        ceiling_fuse_everything=ceilings.fuse_everything,
        ceiling_epilogue_only=ceilings.epilogue_only,
        groups=dict(sorted(collections.Counter(sc.candidate.rule for sc in chosen).items())),
        candidates=len(analysis.scored),
        verdicts=dict(
            sorted(collections.Counter(s.verdict.value for s in analysis.scored).items())
        ),
        solver_status=analysis.resolution.status,
        seconds=seconds,
    )
    return cov, analysis


def ort_extended(path: Path) -> tuple[int, list[str]]:
    """onnxruntime ORT_ENABLE_EXTENDED on CPU: node count after, fused op types it made."""
    import onnxruntime as ort

    original = onnx.load(str(path), load_external_data=False)
    before_types = {(n.domain or "", n.op_type) for n in original.graph.node}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "optimized.onnx"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = str(out)
        opts.log_severity_level = 3
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        optimized = onnx.load(str(out), load_external_data=False)
    counts = collections.Counter(
        (n.domain or "", n.op_type)
        for n in optimized.graph.node
        if (n.domain or "", n.op_type) not in before_types
    )
    fused = [f"{d + '.' if d else ''}{op} x{c}" for (d, op), c in sorted(counts.items())]
    return len(optimized.graph.node), fused


# ----------------------------------------------------------------------------- LLaMA-7B shape


def _external_init(name: str, dims: list[int], dtype: int) -> onnx.TensorProto:
    """An initializer with its shape only: its data lives in a weight file that is absent
    (the loader never reads weights, so a 7B-shaped model costs a few kilobytes)."""
    t = onnx.TensorProto(name=name, data_type=dtype, dims=dims)
    t.data_location = onnx.TensorProto.EXTERNAL
    size = int(np.prod(dims)) * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dtype)).itemsize
    for key, value in (("location", "absent-weights.bin"), ("offset", "0"), ("length", str(size))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def llama7b_shaped(
    seq: int, layers: int = 2, hidden: int = 4096, heads: int = 32, inter: int = 11008
) -> onnx.ModelProto:
    """LLaMA-7B-shaped decoder layers (fp16) as the dynamo exporter writes them: RMSNorm
    (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul), Q/K/V projections with head split,
    rotate-half RoPE, masked softmax attention, head merge, o_proj + residual, SwiGLU MLP +
    residual. Weights are shape-only (external data that does not exist)."""
    from onnx import TensorProto, helper, numpy_helper

    hd = hidden // heads
    f16 = TensorProto.FLOAT16

    def const(name: str, value, dtype) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)

    inits = [
        const("two", 2.0, np.float16),
        const("eps", 1e-6, np.float16),
        const("scale", 1 / np.sqrt(hd), np.float16),
        const("axes", [-1], np.int64),
        const("split", [1, seq, heads, hd], np.int64),
        const("merge", [1, seq, hidden], np.int64),
        const("s0", [0], np.int64),
        const("half", [hd // 2], np.int64),
        const("end", [2**62], np.int64),
        const("ax3", [3], np.int64),
        const("one", [1], np.int64),
        _external_init("cos", [1, 1, seq, hd], f16),
        _external_init("sin", [1, 1, seq, hd], f16),
        _external_init("mask", [1, 1, seq, seq], f16),
    ]
    nodes: list[onnx.NodeProto] = []

    def add(op: str, ins: list[str], **attrs) -> str:
        out = f"{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def rmsnorm(x: str, w: str) -> str:
        ms = add("ReduceMean", [add("Pow", [x, "two"]), "axes"], keepdims=1)
        inv = add("Reciprocal", [add("Sqrt", [add("Add", [ms, "eps"])])])
        return add("Mul", [w, add("Mul", [x, inv])])

    def heads_of(h: str, w: str) -> str:
        r = add("Reshape", [add("MatMul", [h, w]), "split"])
        return add("Transpose", [r], perm=[0, 2, 1, 3])

    def rope(x: str) -> str:
        x1 = add("Slice", [x, "s0", "half", "ax3", "one"])
        x2 = add("Slice", [x, "half", "end", "ax3", "one"])
        rot = add("Concat", [add("Neg", [x2]), x1], axis=-1)
        return add("Add", [add("Mul", [x, "cos"]), add("Mul", [rot, "sin"])])

    x = "x"
    for i in range(layers):
        shapes = {"n1": [hidden], "n2": [hidden], "q": [hidden, hidden], "k": [hidden, hidden]}
        shapes |= {"v": [hidden, hidden], "o": [hidden, hidden], "g": [hidden, inter]}
        shapes |= {"u": [hidden, inter], "d": [inter, hidden]}
        inits += [_external_init(f"l{i}_{n}", d, f16) for n, d in shapes.items()]
        h = rmsnorm(x, f"l{i}_n1")
        q, k, v = rope(heads_of(h, f"l{i}_q")), rope(heads_of(h, f"l{i}_k")), heads_of(h, f"l{i}_v")
        scores = add("MatMul", [q, add("Transpose", [k], perm=[0, 1, 3, 2])])
        probs = add("Softmax", [add("Add", [add("Mul", [scores, "scale"]), "mask"])], axis=-1)
        ctx = add("Transpose", [add("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        x = add("Add", [x, add("MatMul", [add("Reshape", [ctx, "merge"]), f"l{i}_o"])])
        h = rmsnorm(x, f"l{i}_n2")
        gate = add("MatMul", [h, f"l{i}_g"])
        act = add(
            "Mul", [add("Mul", [gate, add("Sigmoid", [gate])]), add("MatMul", [h, f"l{i}_u"])]
        )
        x = add("Add", [x, add("MatMul", [act, f"l{i}_d"])])
    graph = helper.make_graph(
        nodes,
        f"llama7b_shaped_seq{seq}",
        [helper.make_tensor_value_info("x", f16, [1, seq, hidden])],
        [helper.make_tensor_value_info(x, f16, [1, seq, hidden])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def synthetic_models(directory: Path, seqs: tuple[int, ...] = (128, 512, 2048)) -> list[Path]:
    """Write the LLaMA-7B-shaped models (2 layers) for the given sequence lengths."""
    out = []
    for seq in seqs:
        path = directory / f"llama7b-shaped-2layer-seq{seq}.onnx"
        onnx.save(llama7b_shaped(seq), path)
        out.append(path)
    return out


# ----------------------------------------------------------------------------- report


def _kb(n: int) -> str:
    return f"{n / 1024:.1f}K"


def render(rows: list[Coverage]) -> str:
    head = (
        f"{'model':40} {'fam':4} {'nodes':>11} {'ORT':>4} {'HBM before->after':>20} "
        f"{'less':>6} {'ceiling':>7} {'epi':>6} {'fusable':>8} {'captured':>8} bars "
        " groups per rule / ORT fused op types"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        groups = ", ".join(f"{k} {v}" for k, v in r.groups.items()) or "-"
        lines.append(
            f"{r.model:40} {r.family[:4]:4} {r.nodes_before:>5}->{r.nodes_after:<5} "
            f"{r.ort_nodes_after if r.ort_nodes_after is not None else '-':>4} "
            f"{_kb(r.hbm_before):>9}->{_kb(r.hbm_after):<9} {r.hbm_reduction:>6.1%} "
            f"{r.ceiling_fuse_everything:>7.1%} {r.ceiling_epilogue_only:>6.1%} "
            f"{_kb(r.fusable_bytes):>8} {r.captured:>8.1%} "
            f"{'met' if all(r.bars().values()) else 'NOT'}  {groups}"
        )
        if r.ort_fused_types:
            lines.append(f"{'':40} ORT: {', '.join(r.ort_fused_types)}")
    return "\n".join(lines)


def render_markdown(rows: list[Coverage]) -> str:
    """The results table of README.md (one row per model)."""
    lines = [
        "| model | family | nodes -> after (ORT) | HBM less | ceiling / epilogue-only "
        "| captured | bars |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        missed = [name for name, ok in r.bars().items() if not ok]
        ort = r.ort_nodes_after if r.ort_nodes_after is not None else "-"
        lines.append(
            f"| {r.model.removesuffix('.onnx')} | {r.family} | "
            f"{r.nodes_before} -> {r.nodes_after} ({ort}) | {r.hbm_reduction:.1%} | "
            f"{r.ceiling_fuse_everything:.1%} / {r.ceiling_epilogue_only:.1%} | "
            f"{r.captured:.1%} | {'met' if not missed else 'not met: ' + ', '.join(missed)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "models",
        nargs="*",
        type=Path,
        help="models or folders of models (default: shared + families + light)",
    )
    ap.add_argument(
        "--repo-families", action="store_true", help="add the repo's models/families/*.onnx"
    )
    ap.add_argument("--preset", default="all")
    ap.add_argument("--target", default="ascend910b")
    ap.add_argument("--solver", default="exact", choices=("exact", "greedy"))
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--markdown", action="store_true", help="print README's results table")
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime's optimizer")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the LLaMA-7B-shaped models")
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory()
    default = [*shared_models(), *real_models.models(), *light_models()]
    models = expand(args.models) if args.models else default  # an empty folder is no fallback
    if args.repo_families:
        models = [*models, *repo_family_models()]
    synthetic = [] if args.models or args.no_synthetic else synthetic_models(Path(tmp.name))
    rows = []
    for path in [*models, *synthetic]:
        cov, _ = measure(path, preset=args.preset, target=args.target, solver=args.solver)
        if not args.no_ort and path not in synthetic:  # no weights: ORT cannot load them
            cov.ort_nodes_after, cov.ort_fused_types = ort_extended(path)
        rows.append(cov)
        print(f"  {path.name}: {cov.seconds:.2f}s", file=sys.stderr)
    if args.json:
        out = [
            {
                **asdict(r),
                "captured": round(r.captured, 4),
                "hbm_reduction": round(r.hbm_reduction, 4),
                "bars": r.bars(),
            }
            for r in rows
        ]
        print(json.dumps({"schema_version": 1, "target": args.target, "models": out}, indent=2))
    elif args.markdown:
        print(render_markdown(rows))
    else:
        print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
