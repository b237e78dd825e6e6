"""Shape-resolution benchmark: tensors of unknown size per model, before and after, and
the time of the shape stage.

    .venv/bin/python bench/shapes.py [--models DIR] [--ort]

Every shared model (../shared/models and families/) is first written the way a fresh
export of a large model arrives: no inferred ``value_info`` and every tensor over 1 KiB in
an external data file beside the model (torch's threshold). The run happens from an
unrelated, empty working directory. Printed per model:

- ``onnx``: tensors of unknown size after ONNX's own shape inference with data
  propagation (what the loader used before, without onnxruntime's tool);
- ``ort-cwd``/``ort-dir`` (with ``--ort``): the same after onnxruntime's symbolic shape
  inference, run from the neutral directory and from the model's own directory (it
  reads external data relative to the working directory);
- ``ours``: after ``ruleengine.graph`` (``propagate.resolve_shapes``), and ``dyn``: the
  candidates of the bundled preset that come out ``dynamic_shape``, ``unbound``: the
  graph-input axes reported unbound;
- the milliseconds of each shape stage.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx
from onnx.external_data_helper import convert_model_to_external_data

from ruleengine import pipeline
from ruleengine.graph import load_graph

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"


def _unknown(model: onnx.ModelProto) -> int:
    """Tensors (node outputs) without a fully static shape in ``model``'s value_info."""
    known = {}
    for vi in (*model.graph.value_info, *model.graph.output):
        s = vi.type.tensor_type.shape
        known[vi.name] = vi.type.tensor_type.HasField("shape") and all(
            d.HasField("dim_value") for d in s.dim
        )
    outs = [t for n in model.graph.node for t in n.output if t]
    return sum(1 for t in outs if not known.get(t, False))


def _ort(model_path: Path, cwd: Path) -> tuple[int, float]:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    m = onnx.load(str(model_path), load_external_data=False)
    old = os.getcwd()
    os.chdir(cwd)
    logging.getLogger("onnxruntime.tools.symbolic_shape_infer").setLevel(logging.CRITICAL)
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            out = SymbolicShapeInference.infer_shapes(m, auto_merge=True)
    except Exception:  # what the old loader did: give up quietly
        out = None
    finally:
        os.chdir(old)
    dt = time.perf_counter() - t
    return (_unknown(out) if out is not None else _unknown(m)), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=SHARED)
    ap.add_argument("--ort", action="store_true", help="also onnxruntime's symbolic inference")
    args = ap.parse_args()
    paths = sorted(args.models.glob("*.onnx")) + sorted((args.models / "families").glob("*.onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        folder, neutral = Path(tmp) / "models", Path(tmp) / "neutral"
        folder.mkdir()
        neutral.mkdir()
        os.chdir(neutral)
        head = f"{'model':40s} {'nodes':>5s} {'onnx':>5s} {'ms':>6s}"
        if args.ort:
            head += f" {'ort-cwd':>7s} {'ort-dir':>7s} {'ms':>6s}"
        print(head + f" {'ours':>5s} {'ms':>6s} {'dyn':>4s} {'unbound':>7s}")
        totals = [0, 0, 0, 0, 0, 0]
        for src in paths:
            m = onnx.load(str(src))
            del m.graph.value_info[:]
            convert_model_to_external_data(
                m, all_tensors_to_one_file=True, location=src.name + ".data", size_threshold=1024
            )
            path = folder / src.name
            onnx.save(m, str(path))
            bare = onnx.load(str(path), load_external_data=False)
            t = time.perf_counter()
            before = _unknown(onnx.shape_inference.infer_shapes(bare, data_prop=True))
            onnx_ms = (time.perf_counter() - t) * 1e3
            row = f"{src.name:40s} {len(bare.graph.node):5d} {before:5d} {onnx_ms:6.1f}"
            if args.ort:
                ort_cwd, _ = _ort(path, neutral)
                ort_dir, ort_s = _ort(path, folder)
                row += f" {ort_cwd:7d} {ort_dir:7d} {ort_s * 1e3:6.1f}"
                totals[3] += ort_cwd
                totals[4] += ort_dir
            t = time.perf_counter()
            g = load_graph(path)
            ours_ms = (time.perf_counter() - t) * 1e3
            after = sum(1 for n in g.nodes for o in n.outputs if o and not g.tensors[o].is_static)
            a = pipeline.analyze(path)
            dyn = sum(1 for s in a.scored if s.verdict.value == "dynamic_shape")
            row += f" {after:5d} {ours_ms:6.1f} {dyn:4d} {len(g.unbound_dims):7d}"
            print(row, flush=True)
            totals[0] += before
            totals[1] += after
            totals[2] += dyn
            totals[5] += len(g.unbound_dims)
        print(
            f"total over {len(paths)} models: unknown-size tensors {totals[0]} (onnx) -> "
            f"{totals[1]} (ours); dynamic_shape candidates {totals[2]}; unbound dims {totals[5]}"
            + (
                f"; ort from a neutral cwd {totals[3]}, from the model's dir {totals[4]}"
                if args.ort
                else ""
            )
        )


if __name__ == "__main__":
    main()
