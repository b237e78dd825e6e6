"""Speed at LLM scale (issue 13): whole processes, side by side, in one run.

    .venv/bin/python bench/scale.py [--layers 512,1024,2048] [--forms initializers,inputs,external]
                                    [--compare-at 1024] [--quick] [--repeat 3]
    .venv/bin/python bench/scale.py --models [PATH ...] [--repeat 3]

For each size and weight form (``synthetic.decoder_stack_weights``: own weights per
layer as initializers, as graph inputs, or as initializers in an external data file) the
model is written to a temporary folder and two processes run on it, each measured by
wall time and peak RSS (``os.wait4``):

- **floor**: ``onnx.load`` + ``onnx.shape_inference.infer_shapes`` + a topological walk
  of the same file (``bench/scale.py --floor FILE``);
- **fuse**: ``autofusion fuse FILE`` (bundled preset ``all``, default target and solver,
  compact plan), whose stage times are read from its report.json ("other": start-up,
  imports, rendering and writing the outputs, i.e. the wall time no stage accounts for).

Each case runs ``--repeat`` times (default 3) and every time, stage time and ratio below
is the least over those runs (peak RSS: the most): on a shared 2-core machine one pair of
runs moved a stage's exponent by +-0.1 (bench/results/, docs/speed.md). The runs of one
weight form go in rounds, every size once per round, the order reversed every other round,
so that a host that slows down during the run weighs on every size alike; each exponent
is printed with its spread over the rounds taken one at a time.

Printed per case: nodes, both wall times and their ratio, the ratio of their CPU times
(user + system of the process and the workers it waited for: steadier than wall time on a
shared machine), both peak RSS and their ratio, plan.json bytes per node and the stage
times; below it both CPU times and each stage's CPU seconds (report.json ``cpu_s``).
Then, per weight form, the doubling ratio of every stage (t(2n) / t(n) between
consecutive sizes; 2.0 is linear) and its scaling exponent between the smallest and the
largest size, log(t_large / t_small) / log(n_large / n_small) (1.0 is linear), once in
wall seconds and once in CPU seconds (a stage that waited for a core on a loaded machine
shows in the first only). Then, at
``--compare-at`` layers, ``autofusion match --rules <onnxscript's four patterns>``
against onnxscript's rewriter with the same four patterns (``bench/onnxscript_four.py``),
whole process each. Last, the done-when table of issue 13: each goal, the measured figure
and whether it is met (measured, never asserted).

``--models``: instead of the stacks, the same floor and fuse processes on real exports
(the .onnx files under the given paths; none given: every model of ../shared/models,
families included), one row each and the least / median / most of every ratio: on graphs
of 10^2-10^3 nodes start-up (imports: ~170 MiB and ~1 s for fuse) is most of both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

BIN = Path(sys.executable).parent
# "plan": what the compact plan lists and counts, read before the per-candidate records
# are let go; "other": start-up and imports, rendering plan/report/DOT and writing the
# files (the wall time no stage of report.json accounts for: the report is rendered
# inside emit)
STAGES = ("rules", "graph", "match", "cost", "resolve", "plan", "rewrite", "check", "other")
# Stages shorter than this at the smallest size are left out of the exponent goal: their
# ratios are timer and scheduling noise (start-up reads ~20 rule files whatever the size).
NOISE_S = 0.05
# Issue 13's goals
GOAL_RATIO, GOAL_RSS, GOAL_EXPONENT, GOAL_PLAN, GOAL_ONNXSCRIPT = 10.0, 3.0, 1.05, 1024, 0.5


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


def run_measured(cmd: list[str], cwd: Path) -> tuple[float, float, str, float]:
    """Wall seconds, peak RSS (MiB), stdout and CPU seconds of one child process (and the
    children it waited for), from ``os.wait4``."""
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
    cpu = usage.ru_utime + usage.ru_stime
    return wall, usage.ru_maxrss / 1024, b"".join(chunks).decode(), cpu


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


def measure_case(py: str, path: Path, out: Path, folder: Path) -> dict:
    """One floor process and one fuse process on ``path``: their wall, CPU and peak RSS,
    fuse's stage times (wall and CPU) from its report.json, and plan.json's size."""
    fl_s, fl_rss, _, fl_cpu = run_measured([py, __file__, "--floor", str(path)], folder)
    fu_s, fu_rss, _, fu_cpu = run_measured(
        [str(BIN / "autofusion"), "fuse", str(path), "-o", str(out)], folder
    )
    report = json.loads((out / "report.json").read_text())
    stages = dict(report.get("timings_s", {}))
    stages["other"] = max(0.0, fu_s - sum(stages.values()))
    cpu_stages = dict(report.get("cpu_s", {}))
    cpu_stages["other"] = max(0.0, fu_cpu - sum(cpu_stages.values()))
    plan_bytes = (out / "plan.json").stat().st_size
    shutil.rmtree(out, ignore_errors=True)
    return {
        "floor": fl_s,
        "floor_cpu": fl_cpu,
        "floor_rss": fl_rss,
        "fuse": fu_s,
        "fuse_cpu": fu_cpu,
        "fuse_rss": fu_rss,
        "stages": stages,
        "cpu_stages": cpu_stages,
        "plan_bytes": plan_bytes,
    }


def exponent(t0: float, t1: float, n0: int, n1: int) -> float:
    if t0 <= 0 or t1 <= 0:
        return float("nan")
    return math.log(t1 / t0) / math.log(n1 / n0)


def sizes_arg(ap: argparse.ArgumentParser, text: str, flag: str = "--layers") -> list[int]:
    """Layer counts from ``512,2048``, smallest first; a usage error otherwise."""
    try:
        sizes = sorted({int(x) for x in text.split(",")})
    except ValueError:
        ap.error(f"{flag} takes layer counts separated by commas (e.g. 512,2048), got {text!r}")
    if sizes[0] < 1:
        ap.error(f"{flag}: layer counts must be at least 1, got {text!r}")
    return sizes


def forms_arg(ap: argparse.ArgumentParser, text: str, allow_none: bool = False) -> list[str]:
    """Weight forms from ``initializers,inputs``; a usage error for any other name."""
    from synthetic import WEIGHT_FORMS

    if allow_none and text == "none":
        return []
    forms = text.split(",")
    bad = [f for f in forms if f not in WEIGHT_FORMS]
    if bad:
        choices = ", ".join(WEIGHT_FORMS) + (", or none alone" if allow_none else "")
        ap.error(f"--forms: unknown weight form {', '.join(map(repr, bad))}; choose from {choices}")
    return forms


def shared_models(paths: list[str]) -> list[Path]:
    """The .onnx files under ``paths`` (files or folders, searched recursively); with no
    path, every model of ``../shared/models`` beside the checkout, families included."""
    roots = [Path(p) for p in paths] or [HERE.parent.parent / "shared" / "models"]
    found: list[Path] = []
    for root in roots:
        if not root.exists():
            raise SystemExit(f"{root}: no such file or folder")
        found += [root] if root.is_file() else sorted(root.rglob("*.onnx"))
    if not found:
        raise SystemExit(f"no .onnx file under {', '.join(map(str, roots))}")
    return found


def measure_models(models: list[Path], repeat: int, py: str) -> None:
    """fuse vs floor, whole process each, on real exports (not the synthetic stacks): the
    least of ``repeat`` runs per figure (peak RSS: the most), then the spread over all."""
    import statistics

    import onnx

    print(
        f"{'model':44s} {'nodes':>6s} {'floor s':>8s} {'fuse s':>8s} {'ratio':>6s} "
        f"{'cpu x':>6s} {'floorMiB':>8s} {'fuseMiB':>8s} {'rss x':>6s} {'plan B/node':>11s}"
    )
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for path in models:
            name = f"families/{path.name}" if path.parent.name == "families" else path.name
            nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
            try:
                runs = [measure_case(py, path, folder / "out", folder) for _ in range(repeat)]
            except SystemExit as exc:  # one model's failure is a row, not the end of the run
                failed.append(name)
                print(f"{name:44s} {nodes:6d}  failed: {exc}", flush=True)
                continue
            fl_s, fu_s = min(r["floor"] for r in runs), min(r["fuse"] for r in runs)
            fl_cpu, fu_cpu = min(r["floor_cpu"] for r in runs), min(r["fuse_cpu"] for r in runs)
            fl_rss, fu_rss = max(r["floor_rss"] for r in runs), max(r["fuse_rss"] for r in runs)
            row = {
                "ratio": fu_s / fl_s,
                "cpu": fu_cpu / fl_cpu,
                "rss": fu_rss / fl_rss,
                "plan": max(r["plan_bytes"] for r in runs) / max(nodes, 1),
            }
            rows.append(row)
            print(
                f"{name:44s} {nodes:6d} {fl_s:8.2f} {fu_s:8.2f} {row['ratio']:6.1f} "
                f"{row['cpu']:6.1f} {fl_rss:8.0f} {fu_rss:8.0f} {row['rss']:6.2f} "
                f"{row['plan']:11.0f}",
                flush=True,
            )
    print(
        f"\n{len(rows)} models measured, {len(failed)} failed{': ' if failed else ''}"
        + ", ".join(failed)
    )
    if rows:
        print(f"{'':22s} {'least':>8s} {'median':>8s} {'most':>8s}")
        for key, what in (
            ("ratio", "fuse/floor, wall"),
            ("cpu", "fuse/floor, CPU"),
            ("rss", "peak RSS x floor"),
            ("plan", "plan.json B/node"),
        ):
            vals = [r[key] for r in rows]
            print(f"{what:22s} {min(vals):8.2f} {statistics.median(vals):8.2f} {max(vals):8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floor", help=argparse.SUPPRESS)
    ap.add_argument("--layers", default="512,1024,2048")
    ap.add_argument("--forms", default="initializers,inputs,external")
    ap.add_argument("--compare-at", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="64,128,256 layers, compare at 128")
    ap.add_argument(
        "--models",
        nargs="*",
        metavar="PATH",
        help="instead of the stacks: fuse vs floor on these .onnx files or folders (none "
        "given: every model of ../shared/models, families included)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="run floor and fuse this many times per case and keep each figure's least "
        "(peak RSS: the most); one pair of runs moves a stage's exponent by +-0.1 here",
    )
    args = ap.parse_args()
    if args.floor:
        floor(args.floor)
        return
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.models is not None:
        measure_models(shared_models(args.models), args.repeat, sys.executable)
        return
    layers = sizes_arg(ap, args.layers)
    compare_at = args.compare_at
    if args.quick:
        layers, compare_at = [64, 128, 256], 128
    forms = forms_arg(ap, args.forms)
    py = sys.executable
    print(
        f"{'form':12s} {'layers':>6s} {'nodes':>6s} {'floor s':>8s} {'fuse s':>8s} "
        f"{'ratio':>6s} {'cpu x':>6s} {'floorMiB':>8s} {'fuseMiB':>8s} {'rss x':>6s} "
        f"{'plan B/node':>11s}  " + " ".join(f"{s:>7s}" for s in STAGES)
    )
    rows: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for form in forms:
            cases = {n: write_model(n, form, folder) for n in layers}
            runs_of: dict[int, list[dict]] = {n: [] for n in layers}
            for rep in range(args.repeat):
                # sizes interleaved, the order reversed every other round: a machine that
                # slows down or speeds up during the run then weighs on every size alike
                # instead of on the sizes measured last (the exponent compares them)
                for n in layers if rep % 2 == 0 else layers[::-1]:
                    path = cases[n][0]
                    out = folder / f"out-{form}-{n}"
                    runs_of[n].append(measure_case(py, path, out, folder))
            for n in layers:
                nodes, runs = cases[n][1], runs_of[n]
                # the least of each figure over the runs (timeit's rule: noise only adds);
                # peak RSS the most (the memory goal is an upper bound)
                fl_s, fu_s = min(r["floor"] for r in runs), min(r["fuse"] for r in runs)
                fl_cpu = min(r["floor_cpu"] for r in runs)
                fu_cpu = min(r["fuse_cpu"] for r in runs)
                fl_rss = max(r["floor_rss"] for r in runs)
                fu_rss = max(r["fuse_rss"] for r in runs)
                plan_bytes = max(r["plan_bytes"] for r in runs)
                stages = {s: min(r["stages"].get(s, 0.0) for r in runs) for s in STAGES}
                cpu_stages = {s: min(r["cpu_stages"].get(s, 0.0) for r in runs) for s in STAGES}
                rows[(form, n)] = row = {
                    "nodes": nodes,
                    "runs": runs,
                    "fuse": fu_s,
                    "fuse_cpu": fu_cpu,
                    "ratio": fu_s / fl_s,
                    "cpu": fu_cpu / fl_cpu if fl_cpu else float("nan"),
                    "rss": fu_rss / fl_rss,
                    "plan": plan_bytes / nodes,
                    "stages": stages,
                    "cpu_stages": cpu_stages,
                }
                print(
                    f"{form:12s} {n:6d} {nodes:6d} {fl_s:8.2f} {fu_s:8.2f} {row['ratio']:6.1f} "
                    f"{row['cpu']:6.1f} {fl_rss:8.0f} {fu_rss:8.0f} {row['rss']:6.2f} "
                    f"{row['plan']:11.0f}  "
                    + " ".join(f"{stages.get(s, 0.0):7.2f}" for s in STAGES),
                    flush=True,
                )
                print(
                    f"{'':12s} {'':6s} {'':6s} {fl_cpu:8.2f} {fu_cpu:8.2f} {'cpu s':>6s} "
                    f"{'':6s} {'':8s} {'':8s} {'':6s} {'':11s}  "
                    + " ".join(f"{cpu_stages.get(s, 0.0):7.2f}" for s in STAGES),
                    flush=True,
                )
        worst = scaling(rows, forms, layers, "stages", "wall")
        worst_cpu = scaling(rows, forms, layers, "cpu_stages", "CPU")
        compared = compare_onnxscript(folder, compare_at, py)
    done_when(rows, forms, layers, {"CPU": worst_cpu, "wall": worst}, compared)


def scaling(
    rows: dict, forms: list[str], layers: list[int], key: str = "stages", what: str = "wall"
) -> dict[str, tuple[float, str]]:
    """Print each stage's doubling ratios and exponent per form, in ``what`` seconds
    (``key``: the rows' wall or CPU stage times); return each form's worst exponent (and
    its stage) over the stages above the noise floor. The fuse column is the process's
    time of the same kind."""
    worst: dict[str, tuple[float, str]] = {}
    lo, hi = layers[0], layers[-1]
    if hi == lo:
        return worst
    total = "fuse" if key == "stages" else "fuse_cpu"
    print(
        f"\nscaling per stage, {what} seconds: t(2n)/t(n) between consecutive sizes (2.0 = "
        f"linear), then the exponent {lo} -> {hi} layers (1.0 = linear; goal <= "
        f"{GOAL_EXPONENT}) from each stage's least time, then the spread of that exponent "
        f"over the rounds taken one at a time (largest less least: this run's noise)"
    )
    for form in forms:
        print(f"{form:12s} {'fuse':>7s} " + " ".join(f"{s:>7s}" for s in STAGES))
        for a, b in zip(layers, layers[1:], strict=False):
            ra, rb = rows[(form, a)], rows[(form, b)]
            ratios = [
                rb[key].get(s, 0.0) / ra[key][s] if ra[key].get(s) else math.nan for s in STAGES
            ]
            label = f"  {a}->{b}"
            print(
                f"{label:12s} {rb[total] / ra[total]:7.2f} " + " ".join(f"{r:7.2f}" for r in ratios)
            )
        a, b = rows[(form, lo)], rows[(form, hi)]
        ex = {
            s: exponent(a[key].get(s, 0), b[key].get(s, 0), a["nodes"], b["nodes"]) for s in STAGES
        }
        print(
            f"{'  exponent':12s} {exponent(a[total], b[total], a['nodes'], b['nodes']):7.2f} "
            + " ".join(f"{ex[s]:7.2f}" for s in STAGES)
        )
        # the same exponent from each round alone (the sizes of one round measured one
        # after the other): how far one round's figure moves, the noise of this run
        rounds = list(zip(a["runs"], b["runs"], strict=True))
        spread = {
            s: _spread(
                [
                    exponent(ra[key].get(s, 0), rb[key].get(s, 0), a["nodes"], b["nodes"])
                    for ra, rb in rounds
                ]
            )
            for s in STAGES
        }
        spread_total = _spread(
            [exponent(ra[total], rb[total], a["nodes"], b["nodes"]) for ra, rb in rounds]
        )
        print(
            f"{'  spread':12s} {spread_total:7.2f} " + " ".join(f"{spread[s]:7.2f}" for s in STAGES)
        )
        counted = {
            s: e
            for s, e in ex.items()
            if s != "other" and a[key].get(s, 0) >= NOISE_S and not math.isnan(e)
        }
        if counted:
            stage = max(counted, key=counted.__getitem__)
            worst[form] = (counted[stage], stage)
    return worst


def _spread(values: list[float]) -> float:
    """The largest less the least of ``values`` (NaN left out; 0 for fewer than two)."""
    real = [v for v in values if not math.isnan(v)]
    return max(real) - min(real) if len(real) > 1 else 0.0


def onnxscript_pair(folder: Path, layers: int, py: str) -> tuple[list[str], list[str], int] | None:
    """The two whole processes to compare, on the ``layers``-layer stack (initializers)
    written to ``folder``: ``autofusion match`` with onnxscript's four patterns as rules,
    and onnxscript's rewriter with the same four; and the stack's node count. None when
    onnxscript (the bench extra) is not installed."""
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        print("\nonnxscript not installed (pip install -e .[bench]): comparison skipped")
        return None
    from synthetic import ONNXSCRIPT_RULES

    rules = folder / "four.yaml"
    rules.write_text(ONNXSCRIPT_RULES)
    path, nodes = write_model(layers, "initializers", folder)
    ours = [py, "-m", "ruleengine", "match", str(path), "--rules", str(rules), "-f", "json"]
    return ours, [py, str(HERE / "onnxscript_four.py"), str(path)], nodes


def compare_onnxscript(folder: Path, compare_at: int, py: str) -> tuple[float, str] | None:
    """``autofusion match`` vs onnxscript's rewriter, four patterns, whole process each."""
    pair = onnxscript_pair(folder, compare_at, py)
    if pair is None:
        return None
    ours_cmd, theirs_cmd, nodes = pair
    ours, ours_rss, _, _ = run_measured(ours_cmd, folder)
    theirs, theirs_rss, count, _ = run_measured(theirs_cmd, folder)
    print(
        f"\nmatch vs onnxscript's rewriter, four patterns, {compare_at} layers ({nodes} "
        f"nodes), whole process each: {ours:.2f} s vs {theirs:.2f} s = {ours / theirs:.2f}x "
        f"(goal <= {GOAL_ONNXSCRIPT}x); peak RSS {ours_rss:.0f} vs {theirs_rss:.0f} MiB; "
        f"onnxscript rewrites {count.strip()}"
    )
    return ours / theirs, f"{ours:.2f} s vs {theirs:.2f} s at {compare_at} layers"


def done_when(
    rows: dict,
    forms: list[str],
    layers: list[int],
    worst: dict[str, dict[str, tuple[float, str]]],
    compared: tuple[float, str] | None,
) -> None:
    """Issue 13's done-when items, each with the figure measured in this run."""
    hi = layers[-1]
    table: list[tuple[str, str, bool | None]] = []
    for form in forms:
        r = rows[(form, hi)]
        table.append(
            (
                f"fuse/floor <= {GOAL_RATIO:g}x, {form}, {hi} layers",
                f"{r['ratio']:.1f}x wall ({r['cpu']:.1f}x CPU)",
                r["ratio"] <= GOAL_RATIO,
            )
        )
    for form in forms:
        r = rows[(form, hi)]
        table.append(
            (f"peak RSS <= {GOAL_RSS:g}x floor, {form}", f"{r['rss']:.2f}x", r["rss"] <= GOAL_RSS)
        )
    for what, by_form in worst.items():
        for form in forms:
            if form in by_form:
                e, stage = by_form[form]
                table.append(
                    (
                        f"exponent <= {GOAL_EXPONENT} every stage ({what}), {form}, "
                        f"{layers[0]}->{hi}",
                        f"worst {e:.2f} ({stage})",
                        e <= GOAL_EXPONENT,
                    )
                )
    plan = max(rows[(form, hi)]["plan"] for form in forms)
    table.append((f"plan.json <= {GOAL_PLAN} B/node", f"{plan:.0f} B/node", plan <= GOAL_PLAN))
    if compared is not None:
        table.append(
            (
                f"match <= {GOAL_ONNXSCRIPT}x onnxscript's rewriter",
                f"{compared[0]:.2f}x ({compared[1]})",
                compared[0] <= GOAL_ONNXSCRIPT,
            )
        )
    else:
        table.append(("match vs onnxscript's rewriter", "not measured (no onnxscript)", None))
    width = max(len(g) for g, _, _ in table)
    print(f"\ndone when (issue 13), measured in this run\n{'goal':{width}s}  measured  status")
    for goal, figure, ok in table:
        status = "n/a" if ok is None else ("met" if ok else "NOT MET")
        print(f"{goal:{width}s}  {figure}  {status}")


if __name__ == "__main__":
    main()
