"""Whole-analysis benchmark: per-stage timings of ``analyze`` on decoder stacks of growing size.

    .venv/bin/python bench/pipeline.py [--quick] [--layers 1,4,16,64,128,512] [--preset all]
                                       [--rules DIR ...] [--repeat 1] [--json]

For each synthetic LLaMA-shaped decoder stack (``bench/synthetic.py``, 43 nodes per
layer) the model is saved to a temporary file and ``ruleengine.pipeline.analyze`` runs on
it with the bundled preset (default ``all``) and the default target and solver. Printed
per size: nodes, candidates, near misses, chosen groups, the stage times (rules, graph,
match, cost, resolve; wall clock, as ``Analysis.timings`` records them), the total, and
microseconds per node for match, cost, resolve and the total.

The last lines check the near-linear claim of DESIGN.md ("cost growing near-linearly
with graph size"): the total microseconds per node of the largest stack divided by that
of the smallest stack with at least 32 layers (below that, fixed costs such as loading
OR-Tools dominate). A ratio near 1 is linear; it is printed, never asserted (timings
belong in a benchmark, not in unit tests). With ``--repeat N`` each size runs N times
and the fastest run is shown (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx
from synthetic import decoder_stack

from ruleengine import pipeline

STAGES = ("rules", "graph", "match", "cost", "resolve")
DEFAULT_LAYERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_LAYERS = (1, 4, 16, 64)


def run_one(path: Path, preset: str | None, rules: list[str]) -> dict:
    """One analyze run; stage seconds plus the sizes that explain them."""
    t0 = time.perf_counter()
    a = pipeline.analyze(path, rules, preset=None if rules else preset)
    total = time.perf_counter() - t0
    stages = dict(a.timings)
    return {
        "nodes": len(a.graph.nodes),
        "candidates": len(a.match.candidates),
        "near_misses": len(a.match.near_misses),
        "groups": len(a.resolution.chosen),
        "status": a.resolution.status,
        "seconds": {s: round(stages.get(s, 0.0), 4) for s in STAGES},
        "total": round(total, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=None, help="comma-separated layer counts")
    ap.add_argument("--quick", action="store_true", help=f"only {QUICK_LAYERS} layers")
    ap.add_argument("--preset", default="all", help="bundled rule preset (default: all)")
    ap.add_argument(
        "--rules",
        action="append",
        default=[],
        help="rule file or folder instead of the preset (several allowed); e.g. a frozen "
        "copy of rules/ to compare two versions of the code on the same rules",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per size; the fastest is shown")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = ap.parse_args()
    layers = (
        [int(x) for x in args.layers.split(",")]
        if args.layers
        else list(QUICK_LAYERS if args.quick else DEFAULT_LAYERS)
    )
    rows: list[dict] = []
    if not args.json:
        print(
            f"{'layers':>6s} {'nodes':>6s} {'cands':>6s} {'near':>6s} {'groups':>6s} "
            + " ".join(f"{s + ' s':>9s}" for s in STAGES)
            + f" {'total s':>8s} {'match':>7s} {'cost':>7s} {'resolve':>7s} {'total':>7s}"
        )
        print(f"{'':>6s} {'':>6s} {'':>6s} {'':>6s} {'':>6s} " + " " * 50 + " us/node:")
    with tempfile.TemporaryDirectory() as tmp:
        for n in layers:
            path = Path(tmp) / f"decoder{n}.onnx"
            onnx.save(decoder_stack(n), str(path))
            best = min(
                (run_one(path, args.preset, args.rules) for _ in range(max(1, args.repeat))),
                key=lambda r: r["total"],
            )
            best["layers"] = n
            per = {s: best["seconds"][s] / best["nodes"] * 1e6 for s in STAGES}
            best["us_per_node"] = {s: round(v, 1) for s, v in per.items()}
            best["us_per_node"]["total"] = round(best["total"] / best["nodes"] * 1e6, 1)
            rows.append(best)
            if not args.json:
                sec = best["seconds"]
                print(
                    f"{n:6d} {best['nodes']:6d} {best['candidates']:6d} "
                    f"{best['near_misses']:6d} {best['groups']:6d} "
                    + " ".join(f"{sec[s]:9.3f}" for s in STAGES)
                    + f" {best['total']:8.2f} {per['match']:7.1f} {per['cost']:7.1f} "
                    f"{per['resolve']:7.1f} {best['us_per_node']['total']:7.1f}",
                    flush=True,
                )
    base = next((r for r in rows if r["layers"] >= 32), rows[0] if rows else None)
    growth = None
    if base is not None and rows and rows[-1] is not base:
        last = rows[-1]
        growth = round(last["us_per_node"]["total"] / base["us_per_node"]["total"], 2)
    if args.json:
        what = {"rules": args.rules} if args.rules else {"preset": args.preset}
        print(json.dumps({**what, "rows": rows, "growth": growth}, indent=1))
    elif growth is not None and base is not None:
        last = rows[-1]
        print(
            f"\nus/node of the whole analysis: {base['us_per_node']['total']} at "
            f"{base['layers']} layers, {last['us_per_node']['total']} at {last['layers']} layers "
            f"(x{growth} for x{last['nodes'] / base['nodes']:.0f} nodes; 1.0 = linear)"
        )


if __name__ == "__main__":
    main()
