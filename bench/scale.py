"""Speed at LLM scale (issue 13): whole processes, side by side, in one run.

    .venv/bin/python bench/scale.py [--layers 512,1024,2048] [--forms initializers,inputs,external]
                                    [--compare-at 1024] [--quick]

For each size and weight form (``synthetic.decoder_stack_weights``: own weights per
layer as initializers, as graph inputs, or as initializers in an external data file) the
model is written to a temporary folder and two processes run on it, each measured by
wall time and peak RSS (``os.wait4``):

- **floor**: ``onnx.load`` + ``onnx.shape_inference.infer_shapes`` + a topological walk
  of the same file (``bench/scale.py --floor FILE``);
- **fuse**: ``autofusion fuse FILE`` (bundled preset ``all``, default target and solver,
  compact plan), whose stage times are read from its report.json ("other": start-up,
  imports, rendering and writing the outputs, i.e. the wall time no stage accounts for).

Printed per case: nodes, both wall times and their ratio, both peak RSS and their ratio,
plan.json bytes per node and the stage times. Then the scaling exponent of every stage
(and of the whole fuse) between the smallest and the largest size,
log(t_large / t_small) / log(n_large / n_small): 1.0 is linear. Last, at
``--compare-at`` layers, ``autofusion match --rules <onnxscript's four patterns>``
against onnxscript's rewriter with the same four patterns (``bench/onnxscript_four.py``),
whole process each. The goals of issue 13 are printed beside each figure, measured, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

BIN = Path(sys.executable).parent
STAGES = ("rules", "graph", "match", "cost", "resolve", "rewrite", "check", "other")


def floor(path: str) -> None:
    """The floor process: read, infer shapes, walk the nodes in topological order."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    m = onnx.shape_inference.infer_shapes(m)
    nodes = m.graph.node
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    indeg = [0] * len(nodes)
    succ: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for t in n.input:
            j = producer.get(t)
            if j is not None:
                indeg[i] += 1
                succ[j].append(i)
    stack = [i for i, d in enumerate(indeg) if d == 0]
    walked = 0
    while stack:
        i = stack.pop()
        walked += 1
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    print(walked)


def run_measured(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Like ``run``, but the peak RSS of this child alone (fork + wait4)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    chunks = []
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read(1 << 16), b""):
        chunks.append(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, b"".join(chunks).decode()


def write_model(layers: int, form: str, folder: Path) -> tuple[Path, int]:
    import onnx
    from synthetic import decoder_stack_weights

    m = decoder_stack_weights(layers, form)
    path = folder / f"decoder{layers}-{form}.onnx"
    if form == "external":
        onnx.save(
            m,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
            size_threshold=0,
        )
    else:
        onnx.save(m, str(path))
    return path, len(m.graph.node)


def exponent(t0: float, t1: float, n0: int, n1: int) -> float:
    if t0 <= 0 or t1 <= 0:
        return float("nan")
    return math.log(t1 / t0) / math.log(n1 / n0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floor", help=argparse.SUPPRESS)
    ap.add_argument("--layers", default="512,1024,2048")
    ap.add_argument("--forms", default="initializers,inputs,external")
    ap.add_argument("--compare-at", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="64,128,256 layers, compare at 128")
    args = ap.parse_args()
    if args.floor:
        floor(args.floor)
        return
    layers = [int(x) for x in args.layers.split(",")]
    compare_at = args.compare_at
    if args.quick:
        layers, compare_at = [64, 128, 256], 128
    forms = args.forms.split(",")
    py = sys.executable
    print(
        f"{'form':12s} {'layers':>6s} {'nodes':>6s} {'floor s':>8s} {'fuse s':>8s} "
        f"{'ratio':>6s} {'floorMiB':>8s} {'fuseMiB':>8s} {'rss x':>6s} {'plan B/node':>11s}  "
        + " ".join(f"{s:>7s}" for s in STAGES)
    )
    rows: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for form in forms:
            for n in layers:
                path, nodes = write_model(n, form, folder)
                fl_s, fl_rss, _ = run_measured([py, __file__, "--floor", str(path)], folder)
                out = folder / f"out-{form}-{n}"
                fu_s, fu_rss, _ = run_measured(
                    [str(BIN / "autofusion"), "fuse", str(path), "-o", str(out)], folder
                )
                report = json.loads((out / "report.json").read_text())
                stages = dict(report.get("timings_s", {}))
                # start-up, imports, emit and writing: the wall time no stage accounts for
                stages["other"] = max(0.0, fu_s - sum(stages.values()))
                plan_bytes = (out / "plan.json").stat().st_size
                rows[(form, n)] = {"nodes": nodes, "fuse": fu_s, "stages": stages}
                print(
                    f"{form:12s} {n:6d} {nodes:6d} {fl_s:8.2f} {fu_s:8.2f} {fu_s / fl_s:6.1f} "
                    f"{fl_rss:8.0f} {fu_rss:8.0f} {fu_rss / fl_rss:6.2f} "
                    f"{plan_bytes / nodes:11.0f}  "
                    + " ".join(f"{stages.get(s, 0.0):7.2f}" for s in STAGES),
                    flush=True,
                )
        print("\ngoals: fuse/floor <= 10 at the largest size; rss x <= 3; plan <= 1024 B/node")
        lo, hi = layers[0], layers[-1]
        if hi != lo:
            print(f"\nscaling exponent {lo} -> {hi} layers (goal <= 1.05 for every stage)")
            print(f"{'form':12s} {'fuse':>6s} " + " ".join(f"{s:>7s}" for s in STAGES))
            for form in forms:
                a, b = rows[(form, lo)], rows[(form, hi)]
                ex = [
                    exponent(a["stages"].get(s, 0), b["stages"].get(s, 0), a["nodes"], b["nodes"])
                    for s in STAGES
                ]
                print(
                    f"{form:12s} {exponent(a['fuse'], b['fuse'], a['nodes'], b['nodes']):6.2f} "
                    + " ".join(f"{e:7.2f}" for e in ex)
                )
        try:
            import onnxscript  # noqa: F401
        except ImportError:
            print("\nonnxscript not installed (pip install -e .[bench]): comparison skipped")
            return
        from synthetic import ONNXSCRIPT_RULES

        rules = folder / "four.yaml"
        rules.write_text(ONNXSCRIPT_RULES)
        path, nodes = write_model(compare_at, "initializers", folder)
        ours, ours_rss, _ = run_measured(
            [str(BIN / "autofusion"), "match", str(path), "--rules", str(rules), "-f", "json"],
            folder,
        )
        theirs, theirs_rss, count = run_measured(
            [py, str(HERE / "onnxscript_four.py"), str(path)], folder
        )
        print(
            f"\nmatch vs onnxscript's rewriter, four patterns, {compare_at} layers ({nodes} "
            f"nodes), whole process each: {ours:.2f} s vs {theirs:.2f} s = {ours / theirs:.2f}x "
            f"(goal <= 0.5x); peak RSS {ours_rss:.0f} vs {theirs_rss:.0f} MiB; onnxscript "
            f"rewrites {count.strip()}"
        )


if __name__ == "__main__":
    main()
