"""Matching benchmark: load, facts, Datalog and checks per model and per graph size.

    .venv/bin/python bench/run.py [--quick] [--layers 1,2,4,...] [--big 512]

Prints per-stage milliseconds and microseconds per node for the shared models (bundled
preset ``all``), for synthetic N-layer decoder stacks (the onnxscript-style four-pattern
rule set), and for the onnxscript-comparable 512-layer stack (~22k nodes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import ONNXSCRIPT_RULES, decoder_stack

from ruleengine.graph import graph_from_model, load_graph
from ruleengine.match import find_candidates
from ruleengine.rules import load_rule_set

MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"
HEADER = (
    f"{'case':34s} {'nodes':>6s} {'load ms':>8s} {'facts':>6s} {'facts ms':>9s} "
    f"{'datalog ms':>10s} {'check ms':>9s} {'match ms':>9s} {'cpu ms':>8s} {'us/node':>8s} "
    f"{'cands':>6s}"
)
# Wall-clock stages from find_candidates(stats=...); "cpu ms" is the process CPU time of
# the whole match (steadier than wall time on a shared machine); us/node uses cpu ms.


def _match(graph, rule_set):
    st: dict = {}
    c0 = time.process_time()
    res = find_candidates(graph, rule_set, stats=st)
    return res, st, time.process_time() - c0


def _row(name: str, graph, load_s: float, result, st: dict, cpu_s: float) -> str:
    n = len(graph.nodes)
    return (
        f"{name:34s} {n:6d} {load_s * 1e3:8.1f} {int(st['facts']):6d} "
        f"{(st['compile_s'] + st['facts_s']) * 1e3:9.1f} {st['datalog_s'] * 1e3:10.1f} "
        f"{st['check_s'] * 1e3:9.1f} {result.seconds * 1e3:9.1f} {cpu_s * 1e3:8.1f} "
        f"{cpu_s / n * 1e6:8.1f} {len(result.candidates):6d}"
    )


def bench_models(rule_set) -> None:
    print("shared models, preset all")
    print(HEADER)
    for path in sorted(MODELS.glob("*.onnx")):
        t = time.perf_counter()
        g = load_graph(path)
        load_s = time.perf_counter() - t
        res, st, cpu = _match(g, rule_set)
        print(_row(path.name, g, load_s, res, st, cpu))


def bench_synthetic(rule_set, layers: list[int], label: str) -> None:
    print(label)
    print(HEADER)
    for n in layers:
        m = decoder_stack(n)
        t = time.perf_counter()
        g = graph_from_model(m)
        load_s = time.perf_counter() - t
        res, st, cpu = _match(g, rule_set)
        print(_row(f"decoder x{n}", g, load_s, res, st, cpu), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes, no 512-layer case")
    ap.add_argument("--layers", default=None, help="comma-separated layer counts")
    ap.add_argument("--big", type=int, default=512, help="layers of the onnxscript case")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "onnxscript_rules.yaml"
        p.write_text(ONNXSCRIPT_RULES)
        four = load_rule_set([p])
    preset = load_rule_set([], preset="all")
    bench_models(preset)
    print()
    sizes = (
        [int(x) for x in args.layers.split(",")]
        if args.layers
        else ([1, 4, 16] if args.quick else [1, 2, 4, 8, 16, 32, 64])
    )
    bench_synthetic(four, sizes, "synthetic decoders, onnxscript's four patterns")
    print()
    bench_synthetic(preset, sizes, "synthetic decoders, preset all")
    if not args.quick and args.big:
        print()
        bench_synthetic(four, [args.big], "onnxscript-comparable case (their figure: ~0.45 s)")


if __name__ == "__main__":
    main()
