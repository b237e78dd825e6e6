"""Speed at LLM scale (issue 13) in instructions: per-stage work counted by callgrind.

    .venv/bin/python bench/scale_instructions.py [--layers 512,2048]
                                                 [--forms initializers,inputs,external]
                                                 [--onnxscript-at 1024] [--keep DIR]
    .venv/bin/python bench/scale_instructions.py --keep DIR --forms FORM --compare STAGE

``bench/scale.py`` measures each stage in seconds; on this shared 2-core machine a
sub-2-second stage's exponent moves by +-0.1-0.2 between runs of the same code (load,
caches, frequency). Here the same models (``scale.write_model``) are fused under
``valgrind --tool=callgrind``, which counts the instructions each stage executes exactly
and the same whatever the load (the Python hash seed is fixed: ``PYTHONHASHSEED=0``).

How the stages are cut: ``autofusion fuse FILE -o OUT --jobs 1`` runs in a wrapper
(``--marked-fuse``, this file) that wraps the pipeline's lap recorder
(``ruleengine.laps.Laps``): where analyze's laps begin (the end of start-up) and
after each ``lap(stage)`` it calls ``os.getsid(0)``, which nothing else calls, and
callgrind runs with ``--dump-before=getsid``: each call writes the instructions counted
since the previous dump to a new part file (``callgrind.out.PID.N``) and zeroes the
counters; the part written at exit is the rest. Part k is the stage of the k-th mark;
the first and the last are "other" (start-up and imports; emit, i.e. rendering plan,
reports and DOT and writing the files, and exit), as in ``scale.py``. The part files'
``totals:`` are summed per stage and the sum checked against callgrind's own count of
the whole process (``Collected :`` in its log).

With one job nothing is forked (every fork of the pipeline needs ``jobs`` > 1:
``procs.forkable``, ``match.parallel``, ``match.memo``), and ``dot`` is run only
to draw graph.svg when Graphviz is installed. Should a process be forked or run all the
same, callgrind follows it (``--trace-children=yes``, one file per process id;
``--dump-before=fork`` zeroes the parent's counters before a fork, so a child's file
holds its own work only) and the child's instructions count in the stage during which
its file was written (its end: where the pipeline would reap it), by file time.

``fuse`` gets ``--time-limit 100000``: CP-SAT's limit is wall time, which callgrind
stretches 30-100x (another answer, other work, if it were reached); natively no solve of
these stacks comes near the default 30 s. The plan's summary (groups, status, objective)
is printed per case to compare with a run without callgrind.

The floor (``scale.py --floor FILE``: onnx.load, shape inference, a topological walk)
runs under callgrind too, whole process.

Printed per form: instructions per stage at each size (millions), the ratio between
consecutive sizes (2.0 per doubling is linear) and the exponent
log(I_large / I_small) / log(n_large / n_small) between the smallest and largest size,
then the done-when table of issue 13: fuse/floor at the largest size and the exponent
(<= 1.05 every stage but "other") in instructions, plan.json bytes per node, and peak
RSS of fuse (default jobs) and floor run once more natively (under valgrind its own
memory would count), and the onnxscript ratio below: measured, never asserted.
Callgrind runs 30-100x slower than the process alone; each case's wall and CPU time
under it is printed. Counts do not depend on the
load: run it at the lowest share (``setsid bash -c 'echo 19 > /proc/self/autogroup;
exec nice -n 19 CMD'``). With ``--keep DIR`` the models, dumps, logs and each case's
figures (``results.jsonl``, written as measured) stay in DIR; run again with the same
DIR, the cases in its results.jsonl are not measured again (an interrupted run goes on).

Then, at ``--onnxscript-at`` layers (initializers; 0 or ``--forms none`` with it alone),
``autofusion match --rules <onnxscript's four patterns> -f json`` (default jobs: it may
fork) against onnxscript's rewriter with the same four patterns
(``bench/onnxscript_four.py``, needs the bench extra), whole process each under
callgrind: every process's instructions summed (with ``--dump-before=fork`` a child's
file holds only its own work; without it a child's count would repeat everything its
parent did before the fork), the started process's parts checked against callgrind's own
count. Their ratio is the goal "match <= 0.5x onnxscript's rewriter" by instructions.

``--compare STAGE`` (no run) reads a kept run and lists, per C function (the
interpreter's, onnx's, protobuf's...), STAGE's self instructions at the smallest and the
largest size, sorted by excess over linear growth: I_large - I_small * n_large / n_small.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from scale import (  # noqa: E402
    GOAL_EXPONENT,
    GOAL_ONNXSCRIPT,
    GOAL_PLAN,
    GOAL_RATIO,
    GOAL_RSS,
    STAGES,
    exponent,
    forms_arg,
    onnxscript_pair,
    run_measured,
    sizes_arg,
    write_model,
)

MARK = "getsid"  # the libc function whose calls cut the stages (os.getsid)
TIME_LIMIT = "100000"  # fuse --time-limit, seconds (see ``measure``)
# lap names of the pipeline not in STAGES: where their instructions go
FOLDED = {"emit": "other"}


def marked_fuse(labels_path: str, argv: list[str]) -> None:
    """``autofusion *argv`` with a mark (``os.getsid``) at each stage boundary; the
    stage of each mark is written to ``labels_path`` (JSON list) at the end."""
    from ruleengine.laps import Laps

    labels: list[str] = []
    init, lap = Laps.__init__, Laps.lap

    def marked_init(self, wall=(), cpu=(), progress=None) -> None:
        init(self, wall, cpu, progress)
        if not wall:  # analyze's laps begin: start-up ends here
            labels.append("other")
            os.getsid(0)

    def marked_lap(self, stage: str) -> None:
        lap(self, stage)
        labels.append(stage)
        os.getsid(0)

    Laps.__init__ = marked_init
    Laps.lap = marked_lap
    from ruleengine.cli import main

    sys.argv = ["autofusion", *argv]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        Path(labels_path).write_text(json.dumps(labels))
    sys.exit(code)


_FIELD = re.compile(r"^(pid|part|totals|summary|desc: Trigger):\s*(.*)$")


def read_dump(text: str) -> dict:
    """The header fields of one callgrind dump: pid, part (1 for a file without one),
    trigger (what made the dump, e.g. ``--dump-before=getsid``, ``Program termination``)
    and total (``totals:``, else ``summary:``, first event: Ir)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m and m.group(1) not in found:
            found[m.group(1)] = m.group(2).strip()
    total = found.get("totals", found.get("summary"))
    if total is None or "pid" not in found:
        raise ValueError("not a callgrind dump: no pid or no totals/summary line")
    return {
        "pid": int(found["pid"]),
        "part": int(found.get("part", "1")),
        "trigger": found.get("desc: Trigger", ""),
        "total": int(total.split()[0]),
    }


def assign_stages(dumps: list[dict], labels: list[str], parent: int) -> list[tuple[dict, str]]:
    """Each dump of one run (``read_dump``'s fields and ``mtime``) with its stage, the
    parent's marks labelled in order by ``labels``.

    The parent's parts in order: each belongs to the stage of the next mark (a dump made
    by a fork, not a mark, belongs to the stage it was made in); the part written at
    exit to "other". A child's dump belongs to the stage during which it was written."""
    own = sorted((d for d in dumps if d["pid"] == parent), key=lambda d: d["part"])
    marks = [d for d in own if d["trigger"] == f"--dump-before={MARK}"]
    if len(marks) != len(labels):
        raise ValueError(f"{len(marks)} marks dumped but {len(labels)} stage boundaries")
    assigned: list[tuple[dict, str]] = []
    pending: list[dict] = []
    seen = 0
    for d in own:
        pending.append(d)
        is_mark = d["trigger"] == f"--dump-before={MARK}"
        if is_mark or d is own[-1]:
            stage = labels[seen] if is_mark else "other"
            assigned += [(p, FOLDED.get(stage, stage)) for p in pending]
            seen += is_mark
            pending = []
    ends = [(d["mtime"], stage) for d, stage in assigned]  # in the order written
    for d in dumps:
        if d["pid"] != parent:
            later = [stage for t, stage in ends if t >= d["mtime"]]
            assigned.append((d, later[0] if later else "other"))
    return assigned


def stage_counts(
    dumps: list[dict], labels: list[str], parent: int
) -> tuple[dict[str, int], int, int]:
    """Instructions per stage (``assign_stages``), the number of child processes and
    the parent's total."""
    counts = {s: 0 for s in STAGES}
    for d, stage in assign_stages(dumps, labels, parent):
        counts[stage] = counts.get(stage, 0) + d["total"]
    children = {d["pid"] for d in dumps if d["pid"] != parent}
    return counts, len(children), sum(d["total"] for d in dumps if d["pid"] == parent)


def callgrind(cmd: list[str], folder: Path, log: Path) -> tuple[float, float]:
    """Run ``cmd`` under callgrind, its dumps in ``folder``; wall and CPU seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONHASHSEED="0")
    t = time.perf_counter()
    proc = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--dump-before={MARK}",
            "--dump-before=fork",
            "--trace-children=yes",
            f"--callgrind-out-file={folder}/callgrind.out.%p",
            f"--log-file={log}.%p",
            *cmd,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{cmd} failed under callgrind (exit {code}): {log}.*")
    return wall, usage.ru_utime + usage.ru_stime


def dumps_in(folder: Path, written: bool = False) -> list[dict]:
    """``read_dump`` of every dump file in ``folder`` (``written``: only those written
    whole so far, as by a run under way: a process's last file is empty until it ends)."""
    out = []
    for f in sorted(folder.glob("callgrind.out.*")):
        if written and f.stat().st_size == 0:
            continue
        d = read_dump(_head(f) + "\n" + _tail(f))
        d["mtime"] = f.stat().st_mtime_ns
        d["path"] = str(f)
        out.append(d)
    return out


def _head(path: Path, size: int = 20000) -> str:
    """The first bytes of a dump (its header: pid, part, trigger)."""
    with open(path, "rb") as fh:
        return fh.read(size).decode(errors="replace")


def _tail(path: Path, size: int = 4096) -> str:
    """The last bytes of a dump (its ``totals:`` line is at the end)."""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - size))
        return fh.read().decode(errors="replace")


def collected(log: Path) -> dict[int, int]:
    """Callgrind's whole count per process (``Collected :`` in its logs, LOG.PID)."""
    found = {}
    text = "".join(p.read_text(errors="replace") for p in log.parent.glob(log.name + ".*"))
    for line in text.splitlines():
        m = re.match(r"==(\d+)== Collected : (\d+)", line)
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def parent_pids(log: Path) -> dict[int, int]:
    """Each process's parent process id (``Parent PID:`` in its log, LOG.PID)."""
    found = {}
    for p in log.parent.glob(log.name + ".*"):
        m = re.search(r"==(\d+)== Parent PID: (\d+)", p.read_text(errors="replace"))
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def measure(path: Path, folder: Path, tag: str) -> dict:
    """Floor and fuse of one model under callgrind: instructions per stage, totals."""
    py = sys.executable
    fl_dir, fu_dir = folder / f"cg-floor-{tag}", folder / f"cg-fuse-{tag}"
    fl_log, fu_log = folder / f"cg-floor-{tag}.log", folder / f"cg-fuse-{tag}.log"
    for old in (fl_dir, fu_dir):  # an interrupted run's files: not this run's
        shutil.rmtree(old, ignore_errors=True)
    for old in (*folder.glob(fl_log.name + ".*"), *folder.glob(fu_log.name + ".*")):
        old.unlink()
    labels = folder / f"labels-{tag}.json"
    out = folder / f"out-{tag}"
    # --time-limit: CP-SAT's limit is wall time, and callgrind's 30-100x would reach the
    # default 30 s where the process alone does not (another answer, other work); no
    # solve of these stacks comes near it natively, so the work counted is fuse's own
    argv = ["fuse", str(path), "-o", str(out), "--jobs", "1", "--time-limit", TIME_LIMIT]
    fu_wall, fu_cpu = callgrind(
        [py, __file__, "--marked-fuse", str(labels), "--", *argv], fu_dir, fu_log
    )
    summary = json.loads((out / "plan.json").read_text())["summary"]
    plan_bytes = (out / "plan.json").stat().st_size
    shutil.rmtree(out, ignore_errors=True)
    dumps = dumps_in(fu_dir)
    whole = collected(fu_log)
    # the started process: the one that dumped at the marks
    parent = next(d["pid"] for d in dumps if d["trigger"] == f"--dump-before={MARK}")
    counts, children, own = stage_counts(dumps, json.loads(labels.read_text()), parent)
    if own != whole[parent]:
        raise SystemExit(
            f"{tag}: the parts sum to {own} instructions, callgrind counted {whole[parent]}"
        )
    fl_wall, fl_cpu = callgrind([py, str(HERE / "scale.py"), "--floor", str(path)], fl_dir, fl_log)
    fl_total = sum(d["total"] for d in dumps_in(fl_dir))
    # peak RSS natively, fuse with its default jobs as in scale.py (under valgrind its own
    # memory would count): the load moves seconds, not what a process holds at its peak
    _, fl_rss, _, _ = run_measured([py, str(HERE / "scale.py"), "--floor", str(path)], folder)
    _, fu_rss, _, _ = run_measured(
        [py, "-m", "ruleengine", "fuse", str(path), "-o", str(out)], folder
    )
    shutil.rmtree(out, ignore_errors=True)
    return {
        "floor": fl_total,
        "floor_wall": fl_wall,
        "floor_cpu": fl_cpu,
        "fuse_cpu": fu_cpu,
        "fuse": sum(counts.values()),
        "fuse_wall": fu_wall,
        "stages": counts,
        "children": children,
        "plan_bytes": plan_bytes,
        "floor_rss": fl_rss,
        "fuse_rss": fu_rss,
        # the decisions (the same as a run without callgrind: compare plan.json)
        "plan": {k: summary.get(k) for k in ("groups", "status", "objective", "nodes_after")},
    }


def whole_process(cmd: list[str], folder: Path, tag: str) -> dict:
    """Instructions of ``cmd`` and every process it forked or ran, under callgrind:
    the sum of every dump's ``totals`` (a child's file, fork-zeroed, holds its own work
    only), the started process's parts checked against callgrind's own count."""
    case, log = folder / f"cg-{tag}", folder / f"cg-{tag}.log"
    shutil.rmtree(case, ignore_errors=True)  # an interrupted run's files: not this run's
    for old in folder.glob(log.name + ".*"):
        old.unlink()
    wall, cpu = callgrind(cmd, case, log)
    dumps = dumps_in(case)
    whole = collected(log)
    started = [pid for pid, ppid in parent_pids(log).items() if ppid == os.getpid()]
    if len(started) != 1:
        raise SystemExit(f"{tag}: {len(started)} processes started by this one in {log}.*")
    parent = started[0]
    own = sum(d["total"] for d in dumps if d["pid"] == parent)
    if own != whole[parent]:
        raise SystemExit(
            f"{tag}: the parts sum to {own} instructions, callgrind counted {whole[parent]}"
        )
    return {
        "total": sum(d["total"] for d in dumps),
        "parent": own,
        "processes": len({d["pid"] for d in dumps}),
        "wall": wall,
        "cpu": cpu,
    }


def compare_onnxscript(folder: Path, layers: int) -> dict | None:
    """``autofusion match`` and onnxscript's rewriter, four patterns, on the same
    ``layers``-layer stack (initializers), each under callgrind, whole process."""
    pair = onnxscript_pair(folder, layers, sys.executable)
    if pair is None:
        return None
    ours_cmd, theirs_cmd, nodes = pair
    ours = whole_process(ours_cmd, folder, f"match-{layers}")
    theirs = whole_process(theirs_cmd, folder, f"onnxscript-{layers}")
    return {"nodes": nodes, "ours": ours, "theirs": theirs}


def print_onnxscript(r: dict, layers: int) -> None:
    ours, theirs = r["ours"], r["theirs"]
    print(
        f"\nmatch vs onnxscript's rewriter, four patterns, {layers} layers ({r['nodes']} "
        f"nodes), whole process each, instructions (millions, every process summed): "
        f"{ours['total'] / 1e6:,.0f} ({ours['processes']} processes, the started one "
        f"{ours['parent'] / 1e6:,.0f}) vs {theirs['total'] / 1e6:,.0f} "
        f"({theirs['processes']}) = {ours['total'] / theirs['total']:.2f}x "
        f"(goal <= {GOAL_ONNXSCRIPT}x); callgrind s: {ours['wall']:.0f}/{ours['cpu']:.0f} "
        f"vs {theirs['wall']:.0f}/{theirs['cpu']:.0f} wall/CPU"
    )


def self_costs(lines) -> dict[str, int]:
    """Self instructions per function ("name [object]") of one callgrind dump, read from
    its cost lines (``callgrind_annotate`` 3.19 gives part files of ``--dump-before``
    inclusive figures even with ``--inclusive=no``: its self costs sum to many times the
    part's total). A cost line after ``calls=`` is the call's inclusive cost: skipped."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    ob, fn, after_call = "", "", False
    costs: dict[str, int] = {}
    for line in lines:
        if not line or line[0] in "#\n":
            continue
        called = line[:4] in ("cob=", "cfn=")  # names may be defined in a call's context
        head = line[1:4] if called else line[:3]
        if head in ("ob=", "fn="):
            key = head[:2]
            value = line[3 + called :].rstrip("\n")
            if value.startswith("("):
                ref, _, name = value.partition(")")
                name = name.strip()
                if name:
                    names[key][ref] = name
                else:
                    name = names[key].get(ref, ref + ")")
            else:
                name = value
            if called:
                continue
            if key == "ob":
                ob = name
            else:
                fn = f"{name} [{ob.rsplit('/', 1)[-1]}]"
            continue
        if line.startswith("calls="):
            after_call = True
            continue
        c = line[0]
        if c.isdigit() or c in "+-*":
            if after_call:
                after_call = False
                continue
            parts = line.split()
            if len(parts) > 1:
                costs[fn] = costs.get(fn, 0) + int(parts[1])
    return costs


def function_costs(path: str) -> dict[str, int]:
    """``self_costs`` of the dump file at ``path``."""
    with open(path, errors="replace") as fh:
        return self_costs(fh)


def compare(folder: Path, form: str, stage: str, layers: list[int], top: int) -> None:
    """Per function, one stage's instructions at the smallest and the largest size of a
    kept run (``--keep``), sorted by the excess over linear growth:
    I_large - I_small * n_large / n_small (the functions that make the exponent)."""
    lo, hi = layers[0], layers[-1]
    nodes = {lo: lo, hi: hi}  # a case still under way: by layers (43 nodes each, + a few)
    if (folder / "results.jsonl").exists():
        for line in (folder / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["form"] == form and r["layers"] in nodes and all(n in nodes for n in (lo, hi)):
                nodes[r["layers"]] = r["nodes"]
    if sum(1 for n in (lo, hi) if nodes[n] != n) == 1:  # one known: both by layers
        nodes = {lo: lo, hi: hi}
    per: dict[int, dict[str, int]] = {}
    for n in (lo, hi):
        tag = f"{form}-{n}"
        case = folder / f"cg-fuse-{tag}"
        if (folder / f"labels-{tag}.json").exists():
            dumps = dumps_in(case)
            labels = json.loads((folder / f"labels-{tag}.json").read_text())
            parent = next(d["pid"] for d in dumps if d["trigger"] == f"--dump-before={MARK}")
            assigned = assign_stages(dumps, labels, parent)
        else:  # under way: the parts dumped at a mark so far, in lap order
            dumps = dumps_in(case, written=True)
            assigned = [
                (d, LAP_ORDER[d["part"] - 1])
                for d in dumps
                if d["trigger"] == f"--dump-before={MARK}"
            ]
        per[n] = {}
        for d, s in assigned:
            if s == stage:
                for fn, c in function_costs(d["path"]).items():
                    per[n][fn] = per[n].get(fn, 0) + c
    scale = nodes[hi] / nodes[lo]
    a_total, b_total = sum(per[lo].values()), sum(per[hi].values())
    print(
        f"{form}, {stage}, self instructions per function, {lo} -> {hi} layers "
        f"(nodes x{scale:.3f}); stage total {a_total:,} -> {b_total:,} = "
        f"x{b_total / a_total:.3f}, excess over linear {b_total - a_total * scale:,.0f}"
    )
    print(f"{'at ' + str(lo):>14s} {'at ' + str(hi):>14s} {'ratio':>7s} {'excess':>14s}  function")
    rows = [
        (per[hi].get(fn, 0) - per[lo].get(fn, 0) * scale, fn) for fn in set(per[lo]) | set(per[hi])
    ]
    for excess, fn in sorted(rows, reverse=True)[:top]:
        i0, i1 = per[lo].get(fn, 0), per[hi].get(fn, 0)
        ratio = f"{i1 / i0:7.2f}" if i0 else f"{'new':>7s}"
        print(f"{i0:14,d} {i1:14,d} {ratio} {excess:14,.0f}  {fn[:150]}")


# the laps of ``fuse --jobs 1`` without verification, in order (what ``--progress`` reads
# a run's parts by before its labels are written at the end)
LAP_ORDER = (
    *("other", "rules", "graph", "match", "cost", "resolve", "plan", "rewrite", "check"),
    "emit",
)


def progress(folders: list[Path]) -> None:
    """The stages a run still under way (or stopped) has counted: its parent's parts
    dumped at a mark so far, in lap order (``LAP_ORDER``; no fork dumps expected), per
    case folder ``cg-fuse-FORM-LAYERS`` of each kept folder."""
    found: dict[tuple[str, int], dict[str, int]] = {}
    for folder in folders:
        for case in sorted(folder.glob("cg-fuse-*")):
            m = re.fullmatch(r"cg-fuse-(\w+)-(\d+)", case.name)
            if not m or not case.is_dir():
                continue
            marks = f"--dump-before={MARK}"
            dumps = [d for d in dumps_in(case, written=True) if d["trigger"] == marks]
            if any(d["pid"] != dumps[0]["pid"] for d in dumps):
                raise SystemExit(f"{case}: dumps of more than one process")
            stages = {}
            for d in sorted(dumps, key=lambda d: d["part"]):
                stages[LAP_ORDER[d["part"] - 1]] = d["total"]
            found[(m.group(1), int(m.group(2)))] = stages
    print("instructions per stage counted so far, millions (parts dumped at a mark)")
    print(f"{'form':12s} {'layers':>6s} " + " ".join(f"{s:>8s}" for s in LAP_ORDER))
    for (form, n), stages in sorted(found.items()):
        print(
            f"{form:12s} {n:6d} "
            + " ".join(
                f"{stages[s] / 1e6:8.1f}" if s in stages else f"{'-':>8s}" for s in LAP_ORDER
            )
        )
    forms = sorted({f for f, _ in found})
    for form in forms:
        sizes = sorted(n for f, n in found if f == form)
        if len(sizes) < 2:
            continue
        lo, hi = sizes[0], sizes[-1]
        a, b = found[(form, lo)], found[(form, hi)]
        # layers for nodes: 43 nodes a layer and a handful of others (synthetic.py)
        ex = [
            f"{exponent(a[s], b[s], lo, hi):8.3f}" if s in a and s in b else f"{'-':>8s}"
            for s in LAP_ORDER
        ]
        print(f"{form:12s} {f'{lo}->{hi}':>6s} " + " ".join(ex) + "  (exponent, by layers)")


def main() -> None:  # noqa: C901, PLR0915 - a bench script, read top to bottom
    if "--marked-fuse" in sys.argv:
        i = sys.argv.index("--marked-fuse")
        rest = sys.argv[i + 2 :]
        marked_fuse(sys.argv[i + 1], rest[1:] if rest[:1] == ["--"] else rest)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="512,2048")
    ap.add_argument("--forms", default="initializers,inputs,external", help="weight forms, or none")
    ap.add_argument(
        "--onnxscript-at",
        type=int,
        default=1024,
        metavar="LAYERS",
        help="match vs onnxscript's rewriter at this many layers (0: not measured)",
    )
    ap.add_argument("--keep", help="keep the models, dumps and logs in this folder")
    ap.add_argument(
        "--compare",
        metavar="STAGE",
        help="no run: per function, STAGE's instructions at the smallest and largest "
        "--layers of the run kept in --keep (one --forms), by excess over linear",
    )
    ap.add_argument("--top", type=int, default=25, help="--compare: functions shown")
    ap.add_argument(
        "--progress",
        nargs="+",
        metavar="DIR",
        help="no run: the stages counted so far by the runs kept in these folders "
        "(under way or stopped), and the exponents between their sizes",
    )
    args = ap.parse_args()
    if args.progress:
        progress([Path(d) for d in args.progress])
        return
    if args.compare:
        if not args.keep:
            ap.error("--compare reads a kept run: give its --keep folder")
        layers = sizes_arg(ap, args.layers)
        compare(Path(args.keep), forms_arg(ap, args.forms)[0], args.compare, layers, args.top)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    layers = sizes_arg(ap, args.layers)
    forms = forms_arg(ap, args.forms, allow_none=True)
    tmp = None
    if args.keep:
        folder = Path(args.keep)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory()
        folder = Path(tmp.name)
    rows: dict[tuple[str, int], dict] = {}
    worst: dict[str, tuple[float, str]] = {}
    # the cases a run in the same --keep folder measured already (counts do not change:
    # an interrupted run goes on where it stopped; delete results.jsonl to measure again)
    kept: dict[tuple[str, int], dict] = {}
    if args.keep and (folder / "results.jsonl").exists():
        for line in (folder / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            kept[(r["form"], r["layers"])] = r

    def keep(form: str, n: int, r: dict) -> None:  # each case as it is measured
        if args.keep and (form, n) not in kept:
            with open(folder / "results.jsonl", "a") as fh:
                fh.write(json.dumps({"form": form, "layers": n, **r}) + "\n")

    compared = None
    try:
        for form in forms:
            print(
                f"\n{form}: instructions per stage, millions (callgrind, --jobs 1, "
                "PYTHONHASHSEED=0)"
            )
            print(
                f"{'layers':>6s} {'nodes':>6s} {'floor':>9s} {'fuse':>9s} {'ratio':>6s} "
                + " ".join(f"{s:>8s}" for s in STAGES)
                + "  callgrind s: floor wall/CPU, fuse wall/CPU"
            )
            for n in layers:
                if (form, n) in kept:
                    rows[(form, n)] = r = kept[(form, n)]
                    nodes = r["nodes"]
                    print(f"  (kept: {folder / 'results.jsonl'})")
                else:
                    path, nodes = write_model(n, form, folder)
                    r = measure(path, folder, f"{form}-{n}")
                    rows[(form, n)] = r = {**r, "nodes": nodes}
                keep(form, n, r)
                print(f"  plan: {r['plan']}")
                if r["children"]:
                    print(f"  ({r['children']} child processes counted in their stages)")
                print(
                    f"{n:6d} {nodes:6d} {r['floor'] / 1e6:9.0f} {r['fuse'] / 1e6:9.0f} "
                    f"{r['fuse'] / r['floor']:6.1f} "
                    + " ".join(f"{r['stages'].get(s, 0) / 1e6:8.1f}" for s in STAGES)
                    + f"  {r['floor_wall']:.0f}/{r.get('floor_cpu', math.nan):.0f}, "
                    f"{r['fuse_wall']:.0f}/{r.get('fuse_cpu', math.nan):.0f}",
                    flush=True,
                )
                if not args.keep:
                    for p in folder.glob(f"decoder{n}-{form}.onnx*"):
                        p.unlink()
            worst[form] = scaling(rows, form, layers)
        if args.onnxscript_at:
            n = args.onnxscript_at
            compared = kept.get(("onnxscript", n)) or compare_onnxscript(folder, n)
            if compared is not None:
                keep("onnxscript", n, compared)
                print_onnxscript(compared, n)
    finally:
        if tmp is not None:
            tmp.cleanup()
    done_when(rows, forms, layers, worst, compared, args.onnxscript_at)


def done_when(
    rows: dict,
    forms: list[str],
    layers: list[int],
    worst: dict[str, tuple[float, str]],
    compared: dict | None,
    compare_at: int,
) -> None:
    """Issue 13's goals that instructions measure, with this run's figures."""
    print("\ndone when (issue 13): work in instructions, plan.json bytes, native peak RSS")
    top = layers[-1]
    for form in forms:
        r = rows[(form, top)]
        ratio = r["fuse"] / r["floor"]
        status = "met" if ratio <= GOAL_RATIO else "NOT MET"
        print(f"fuse/floor <= {GOAL_RATIO:g}x, {form}, {top} layers: {ratio:.1f}x  {status}")
        if "plan_bytes" in r:
            per = r["plan_bytes"] / r["nodes"]
            status = "met" if per <= GOAL_PLAN else "NOT MET"
            print(f"plan.json <= {GOAL_PLAN} B/node, {form}, {top} layers: {per:.0f}  {status}")
        if "fuse_rss" in r:
            rss = r["fuse_rss"] / r["floor_rss"]
            status = "met" if rss <= GOAL_RSS else "NOT MET"
            print(
                f"peak RSS <= {GOAL_RSS:g}x the floor's, {form}, {top} layers: {rss:.2f}x "
                f"({r['fuse_rss']:.0f} vs {r['floor_rss']:.0f} MiB, natively)  {status}"
            )
    for form in forms:
        e, stage = worst[form]
        status = "met" if e <= GOAL_EXPONENT else "NOT MET"
        print(
            f"exponent <= {GOAL_EXPONENT} every stage, {form}, {layers[0]} -> {layers[-1]} "
            f"layers: worst {e:.3f} ({stage})  {status}"
        )
    if compared is not None:
        ratio = compared["ours"]["total"] / compared["theirs"]["total"]
        status = "met" if ratio <= GOAL_ONNXSCRIPT else "NOT MET"
        print(
            f"match <= {GOAL_ONNXSCRIPT}x onnxscript's rewriter, {compare_at} layers: "
            f"{ratio:.2f}x  {status}"
        )


def scaling(rows: dict, form: str, layers: list[int]) -> tuple[float, str]:
    """Print the ratios between consecutive sizes and the exponent smallest -> largest
    of every stage, floor and fuse; return the worst exponent over the stages (not
    "other") and its stage."""
    lo, hi = layers[0], layers[-1]
    if lo == hi:
        return math.nan, "-"
    for a, b in zip(layers, layers[1:], strict=False):
        ra, rb = rows[(form, a)], rows[(form, b)]
        print(
            f"{f'{a}->{b}':>13s} {rb['floor'] / ra['floor']:9.3f} {rb['fuse'] / ra['fuse']:9.3f} "
            f"{'':6s} "
            + " ".join(
                f"{rb['stages'][s] / ra['stages'][s]:8.3f}" if ra["stages"].get(s) else f"{'-':>8s}"
                for s in STAGES
            )
        )
    a, b = rows[(form, lo)], rows[(form, hi)]
    n0, n1 = a["nodes"], b["nodes"]
    ex = {s: exponent(a["stages"].get(s, 0), b["stages"].get(s, 0), n0, n1) for s in STAGES}
    print(
        f"{'exponent':>13s} {exponent(a['floor'], b['floor'], n0, n1):9.3f} "
        f"{exponent(a['fuse'], b['fuse'], n0, n1):9.3f} {'':6s} "
        + " ".join(f"{ex[s]:8.3f}" for s in STAGES)
    )
    counted = {s: e for s, e in ex.items() if s != "other" and not math.isnan(e)}
    stage = max(counted, key=counted.__getitem__)
    return counted[stage], stage


if __name__ == "__main__":
    main()
