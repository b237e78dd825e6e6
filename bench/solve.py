"""Solver benchmark: exact (CP-SAT) against greedy on every shared model and on
synthetic N-layer decoder stacks.

    .venv/bin/python bench/solve.py [--quick] [--layers 1,4,16,64] [--json]

Per case: nodes, candidates scored, viable candidates, independent components, cost
stage time, exact solve time and status, greedy time, net HBM bytes saved by each, and
the gap (exact - greedy). Shared models' ``unk__N`` dims are resolved by the graph loader
itself (as in ``bench/coverage.py``), so that every candidate can be costed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import real_models
from coverage import family, shared_models
from synthetic import decoder_stack

from ruleengine.cost import load_target, score_candidates
from ruleengine.graph import graph_from_model, load_graph
from ruleengine.match import find_candidates
from ruleengine.resolve import resolve
from ruleengine.rules import load_rule_set

HEADER = (
    f"{'case':32s} {'nodes':>6s} {'cands':>6s} {'viable':>6s} {'comps':>5s} {'cost ms':>8s} "
    f"{'exact ms':>9s} {'status':>8s} {'exact B':>10s} {'greedy ms':>9s} {'greedy B':>10s} "
    f"{'gap B':>7s}"
)


def solve_case(name: str, graph, rule_set, target) -> dict:
    match = find_candidates(graph, rule_set)
    t = time.perf_counter()
    scored = score_candidates(graph, match, rule_set, target)
    cost_s = time.perf_counter() - t
    exact = resolve(graph, scored, solver="exact")
    greedy = resolve(graph, scored, solver="greedy")
    return {
        "case": name,
        "nodes": len(graph.nodes),
        "candidates": len(scored),
        "viable": sum(s.viable for s in scored),
        "components": exact.components,
        "cost_s": cost_s,
        "exact_s": exact.seconds,
        "exact_status": exact.status,
        "exact_bytes": exact.objective,
        "exact_groups": len(exact.chosen),
        "greedy_s": greedy.seconds,
        "greedy_bytes": greedy.objective,
        "greedy_groups": len(greedy.chosen),
        "gap_bytes": exact.objective - greedy.objective,
    }


def row(r: dict) -> str:
    return (
        f"{r['case']:32s} {r['nodes']:6d} {r['candidates']:6d} {r['viable']:6d} "
        f"{r['components']:5d} {r['cost_s'] * 1e3:8.1f} {r['exact_s'] * 1e3:9.1f} "
        f"{r['exact_status']:>8s} {r['exact_bytes']:10d} {r['greedy_s'] * 1e3:9.1f} "
        f"{r['greedy_bytes']:10d} {r['gap_bytes']:7d}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer synthetic sizes")
    ap.add_argument("--layers", default=None, help="comma-separated decoder layer counts")
    ap.add_argument("--target", default="ascend910b")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = ap.parse_args()
    target = load_target(args.target)
    presets = {p: load_rule_set([], preset=p) for p in ("cnn", "transformer", "all")}
    rows: list[dict] = []
    emit = (lambda r: None) if args.json else (lambda r: print(row(r), flush=True))
    if not args.json:
        print(f"shared models (family preset, target {target.name})")
        print(HEADER)
    for path in [*shared_models(), *real_models.models()]:
        graph = load_graph(path, input_shapes=real_models.input_shapes(path))
        rows.append(solve_case(path.name, graph, presets[family(path)], target))
        emit(rows[-1])
    sizes = (
        [int(x) for x in args.layers.split(",")]
        if args.layers
        else ([1, 4, 16] if args.quick else [1, 4, 16, 64])
    )
    if not args.json:
        print(f"\nsynthetic decoder stacks (preset all, target {target.name})")
        print(HEADER)
    for n in sizes:
        graph = graph_from_model(decoder_stack(n))
        rows.append(solve_case(f"decoder x{n}", graph, presets["all"], target))
        emit(rows[-1])
    if args.json:
        print(json.dumps({"schema_version": 1, "target": target.name, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
