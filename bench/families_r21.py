"""Today's bars on the repo's own dev families (models/families, issue 40), and what is
left unfused on each.

    .venv/bin/python bench/families_r21.py [MODEL_OR_FOLDER ...] [--verify]

Default: every models/families/*.onnx. Per model it prints the measurement of
``bench/coverage.py`` (coverage of the fusable intermediate traffic, traffic reduction
against its bar min(30%, 0.8 x fuse-everything ceiling), both bars) and the fusable
traffic that no chosen group captures, summed per (producer op -> consumer op) edge kind
(views traced through, as ``ruleengine/coverage.py`` defines edges) with its share of the
fusable bytes: that is the structure left unfused. ``--verify`` also runs
``autofusion fuse MODEL --verify`` on each (the fused model against the original in
onnxruntime) and prints its result.

Why a separate script: coverage.py gives the figures; the rule writers of issue 40 also
need to see *which* edges stay outside every group, per model, without reading each
report.txt.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import coverage as bench  # noqa: E402  (bench/coverage.py, beside this file)


def left_unfused(analysis, top: int = 6) -> tuple[list[tuple[str, float]], float]:
    """The uncaptured fusable bytes per 'producer op -> consumer op' (largest first, as a
    share of all fusable bytes), and the uncaptured share in total."""
    from ruleengine import coverage

    graph = analysis.graph
    ops = {n.name: n.op_type for n in graph.nodes}
    group_of = {n: i for i, sc in enumerate(analysis.resolution.chosen) for n in sc.candidate.nodes}
    edges = coverage.fusable_edges(graph)
    total = sum(e.nbytes for e in edges.edges) or 1
    kinds: collections.Counter[str] = collections.Counter()
    for e in edges.edges:
        g = group_of.get(e.producer)
        if g is not None and group_of.get(e.consumer) == g:
            continue
        via = "".join(f">{ops[v]}" for v in e.via)
        kinds[f"{ops[e.producer]}{via}>{ops[e.consumer]}"] += e.nbytes
    rows = [(k, b / total) for k, b in kinds.most_common(top)]
    return rows, sum(kinds.values()) / total


def verify(path: Path) -> str:
    """``autofusion fuse --verify`` on the model: PASSED/FAILED line, or the error."""
    exe = ROOT / ".venv" / "bin" / "autofusion"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [str(exe), "fuse", str(path), "-o", tmp, "--verify"],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("Verification"):
            return f"rc={proc.returncode} {line.split(': ')[-1]}"
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return f"rc={proc.returncode} {tail[0][:160]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path, help="default: models/families")
    ap.add_argument("--verify", action="store_true", help="also autofusion fuse --verify")
    args = ap.parse_args(argv)
    models = bench.expand(args.models) or bench.repo_family_models()
    print(
        f"{'model':34} {'family':11} {'coverage':>8} {'traffic':>8} {'bar':>7} {'ceiling':>8}  bars"
    )
    details = []
    for path in models:
        cov, analysis = bench.measure(path)
        bars = cov.bars()
        bar = min(0.30, 0.8 * cov.ceiling_fuse_everything)
        verdict = ", ".join(f"{k} {'ok' if v else 'MISS'}" for k, v in bars.items())
        print(
            f"{path.name:34} {cov.family:11} {cov.captured:8.1%} {-cov.hbm_reduction:8.1%} "
            f"{-bar:7.1%} {-cov.ceiling_fuse_everything:8.1%}  {verdict}",
            flush=True,
        )
        rows, missed = left_unfused(analysis)
        lines = [f"{path.name}: {missed:.1%} of fusable bytes uncaptured; groups {cov.groups}"]
        lines += [f"    {share:6.1%}  {kind}" for kind, share in rows]
        if args.verify:
            lines.append(f"    fuse --verify: {verify(path)}")
        details.append("\n".join(lines))
    print("\nLeft unfused (uncaptured fusable bytes by producer>consumer op, views traced):")
    print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
