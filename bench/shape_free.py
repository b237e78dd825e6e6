"""Speed and memory on any stack shape (issue 38): one run, one table, the worst variant.

    .venv/bin/python bench/shape_free.py [--variants all|NAME,...] [--random N]
        [--layers 512,1024,2048] [--compare-at 1024] [--quick] [--mem-limit-gb 10]
        [--timeout 1800] [--instructions NAME,...] [--suggest] [--out FILE]
    .venv/bin/python bench/shape_free.py --models [PATH ...]       # exports at real depth
    .venv/bin/python bench/shape_free.py --family-repeat 64[,256] [--models PATH ...]

bench/scale.py measures one stack (bench/synthetic.py); a fix tuned on it can leave any
other spelling of a transformer slow. Here every decoder-stack variant of
``bench/stack_variants.py`` (the named ones, ``unseen38`` among them, and ``--random N``
drawn ones) is written at each ``--layers`` size and two processes run on it, each
measured by wall time and peak RSS (``os.wait4``):

- **floor**: ``onnx.load`` + shape inference + a topological walk (``scale.py --floor``);
- **fuse**: ``autofusion fuse FILE`` (preset ``all``, ``--weights share`` for external
  data), its stage times (wall and CPU) read from report.json.

Each process runs under an address-space limit (``RLIMIT_AS``, as ``prlimit --as``;
``--mem-limit-gb``), a watchdog on its process tree's memory at the same figure (PSS:
forked workers share pages) and a ``--timeout``: a blow-up is a failure row (``memory``,
``timeout``, ``internal`` for autofusion's "this is a bug" exit, ``exit N`` otherwise),
never a dead machine. On a timeout or the watchdog, SIGTERM first and SIGKILL 5 s later;
the seconds SIGTERM took are printed. "peak RSS" is ``os.wait4``'s (the largest single
process); the watchdog's tree figure is printed with a memory failure.

Printed: one row per (variant, layers); then per column the WORST row (never the mean):
fuse/floor wall, peak RSS / floor's, match seconds, failures; the per-stage exponent
between the smallest and largest size per variant (CPU seconds from report.json; stages
under ``NOISE_S`` at the smallest size left out), worst first; at ``--compare-at`` layers
``autofusion match`` with onnxscript's four patterns against onnxscript's rewriter with the
same four (``bench/onnxscript_four.py``), whole process each, per variant and the worst;
then issue 38's done-when table, measured in this run.

``--instructions NAME,...``: the per-stage exponent of those variants by instructions
(callgrind, ``bench/scale_instructions.py``'s stage marks), the goal's own measure; it
runs 30-100x slower than the process alone, so name the worst variant of a wall-time run.
``--suggest``: ``autofusion suggest`` on every shared model and on a 32-layer LLaMA-shaped
stack with external weights (wall, peak RSS, drafts), each under the same limits.
``--models``: floor and fuse on real exports at their real depth (default: every model of
../shared/models, families and real included). ``--family-repeat N``: each family export
whose layers repeat (``stack_variants.repeat_layers``: a block between two cut points of
the residual stream, found by structure, not by names) rebuilt with N copies of a layer;
the exports where no repeated layer is found are listed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import stack_variants as sv  # noqa: E402
from scale import NOISE_S, STAGES, exponent, shared_models, sizes_arg  # noqa: E402
from synthetic import ONNXSCRIPT_RULES  # noqa: E402

PY = sys.executable
# issue 38's goals
GOAL_RATIO, GOAL_RSS, GOAL_EXPONENT, GOAL_ONNXSCRIPT = 10.0, 3.0, 1.05, 0.5
GOAL_SUGGEST_S, GOAL_SUGGEST_STACK_S = 60.0, 300.0
KILL_GRACE_S = 5.0
# how fuse, match and suggest are started (``--src``: the code of another tree)
AUTOFUSION = [PY, "-m", "ruleengine"]
ENV = dict(os.environ)
OUT = sys.stdout


DEADLINE: list[float] = []  # --deadline as a time.time() figure


def past_deadline() -> bool:
    """Whether ``--deadline`` has passed: no new variant begins after it."""
    return bool(DEADLINE) and time.time() >= DEADLINE[0]


def say(text: str = "") -> None:
    """Print to stdout and to ``--out`` (if given), flushed: a long run shows as it goes."""
    print(text, flush=True)
    if OUT is not sys.stdout:
        OUT.write(text + "\n")
        OUT.flush()


@dataclass
class Run:
    """One measured process: how it ended and what it cost."""

    status: str  # ok, memory, timeout, internal, exit N
    wall: float
    cpu: float
    rss_mib: float
    stdout: str = ""
    stderr_tail: str = ""
    term_s: float | None = None  # seconds SIGTERM took, when it was sent
    tree_mib: float = 0.0  # peak PSS of the process and its workers, sampled every 0.25 s

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _limit(bytes_: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (bytes_, bytes_))
        os.setsid()  # its own group: a kill reaches its workers too

    return set_limit


def _tree_mib(pid: int) -> float:
    """Proportional set size (MiB) of ``pid`` and its descendants: forked workers share
    their parent's pages copy-on-write, and summing their RSS would count them twice."""
    total = 0
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    return total / 1024 + sum(_tree_mib(int(k)) for k in kids)


def _running(pid: int) -> bool:
    """Whether the child has not exited, asked without reaping it (``proc.poll()`` would
    reap it, and the ``os.wait4`` that reads its resource usage would find no child)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def measured(cmd: list[str], cwd: Path, mem_gb: float, timeout: float) -> Run:
    """Run ``cmd`` under an address-space limit of ``mem_gb``, a PSS watchdog at the
    same figure and ``timeout`` seconds; wall, CPU and peak RSS from ``os.wait4``."""
    limit = int(mem_gb * 2**30)
    err_path = cwd / f"stderr-{os.getpid()}-{time.monotonic_ns()}.txt"
    t0 = time.perf_counter()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, preexec_fn=_limit(limit), env=ENV
        )
    why: list[str] = []
    term: list[float] = []
    peak = [0.0]  # the most the process tree held (PSS, MiB), as the watchdog saw it
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.25):
            tree = _tree_mib(proc.pid)
            peak[0] = max(peak[0], tree)
            over = tree * 2**20 > limit
            late = time.perf_counter() - t0 > timeout
            if over or late:
                why.append("memory" if over else "timeout")
                t = time.perf_counter()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                while _running(proc.pid) and time.perf_counter() - t < KILL_GRACE_S:
                    time.sleep(0.05)
                term.append(time.perf_counter() - t)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    watcher.join()
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    tail = err_path.read_text(errors="replace")[-2000:]
    err_path.unlink()
    if why:
        state = why[0]
    elif code == 0:
        state = "ok"
    elif "internal error" in tail or "MemoryError" in tail:
        state = "memory" if "MemoryError" in tail else "internal"
    else:
        state = f"exit {code}"
    return Run(
        state,
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,
        out.decode(errors="replace"),
        tail.strip().splitlines()[-1] if tail.strip() else "",
        term[0] if term else None,
        peak[0],
    )


@dataclass
class Case:
    """Floor and fuse on one model."""

    name: str
    layers: int
    nodes: int
    floor: Run
    fuse: Run
    stages: dict[str, float] = field(default_factory=dict)
    cpu_stages: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.fuse.wall / self.floor.wall if self.fuse.ok and self.floor.ok else math.nan

    @property
    def cpu(self) -> float:
        ok = self.fuse.ok and self.floor.ok and self.floor.cpu > 0
        return self.fuse.cpu / self.floor.cpu if ok else math.nan

    @property
    def rss(self) -> float:
        return self.fuse.rss_mib / self.floor.rss_mib if self.floor.ok else math.nan


def fuse_case(
    name: str, layers: int, path: Path, folder: Path, mem_gb: float, timeout: float
) -> Case:
    """Floor and fuse processes on ``path``, each under the limits."""
    import onnx

    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    floor = measured([PY, str(HERE / "scale.py"), "--floor", str(path)], folder, mem_gb, timeout)
    out = folder / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*AUTOFUSION, "fuse", str(path), "-o", str(out), "--weights", "share"]
    fuse = measured(cmd, folder, mem_gb, timeout)
    case = Case(name, layers, nodes, floor, fuse)
    report = out / "report.json"
    if fuse.ok and report.exists():
        r = json.loads(report.read_text())
        case.stages = dict(r.get("timings_s", {}))
        case.cpu_stages = dict(r.get("cpu_s", {}))
        case.stages["other"] = max(0.0, fuse.wall - sum(case.stages.values()))
        case.cpu_stages["other"] = max(0.0, fuse.cpu - sum(case.cpu_stages.values()))
    shutil.rmtree(out, ignore_errors=True)
    return case


HEADER = (
    f"{'case':26s} {'layers':>6s} {'nodes':>7s} {'floor s':>8s} {'fuse s':>8s} {'ratio':>6s} "
    f"{'cpu x':>6s} "
    f"{'floorMiB':>8s} {'fuseMiB':>8s} {'rss x':>6s} {'match s':>8s} {'cost s':>7s} "
    f"{'resolve':>7s}  status"
)


def row(c: Case) -> str:
    st = c.stages
    status = c.fuse.status if c.floor.ok else f"floor {c.floor.status}"
    if not c.fuse.ok and c.fuse.stderr_tail:
        status += f" ({c.fuse.stderr_tail[:90]})"
    if c.fuse.status == "memory":
        status += f" (process tree PSS {c.fuse.tree_mib:.0f} MiB)"
    if c.fuse.term_s is not None:
        status += f"; SIGTERM took {c.fuse.term_s:.1f} s"
        status += "" if c.fuse.term_s < KILL_GRACE_S else " (SIGKILL)"
    return (
        f"{c.name:26s} {c.layers:6d} {c.nodes:7d} {c.floor.wall:8.2f} {c.fuse.wall:8.2f} "
        f"{c.ratio:6.1f} {c.cpu:6.1f} {c.floor.rss_mib:8.0f} {c.fuse.rss_mib:8.0f} {c.rss:6.2f} "
        f"{st.get('match', math.nan):8.2f} {st.get('cost', math.nan):7.2f} "
        f"{st.get('resolve', math.nan):7.2f}  {status}"
    )


def worst_rows(cases: list[Case], what: str) -> None:
    """Per column, the worst case (failures first: a failed fuse is worse than any ratio)."""
    say(f"\nworst per column ({what}; never the mean)")
    failed = [c for c in cases if not (c.fuse.ok and c.floor.ok)]
    say(
        f"  failures: {len(failed)} of {len(cases)}"
        + "".join(f"\n    {c.name} at {c.layers}: {c.fuse.status}" for c in failed)
    )
    ok = [c for c in cases if c.fuse.ok and c.floor.ok]
    columns = (
        ("fuse/floor wall", lambda c: c.ratio, "x"),
        ("fuse/floor CPU", lambda c: c.cpu, "x"),
        ("peak RSS / floor's", lambda c: c.rss, "x"),
        ("fuse peak RSS MiB", lambda c: c.fuse.rss_mib, " MiB"),
        ("fuse wall s", lambda c: c.fuse.wall, " s"),
        ("match s", lambda c: c.stages.get("match", 0.0), " s"),
        ("match s per layer", lambda c: c.stages.get("match", 0.0) / max(c.layers, 1), " s"),
    )
    for label, key, unit in columns:
        if ok and not (label.endswith("per layer") and not any(c.layers for c in ok)):
            w = max(ok, key=key)
            where = f"at {w.layers} layers" if w.layers else "(its real depth)"
            say(f"  {label:22s} {key(w):10.3f}{unit}  {w.name} {where}")


def exponents(cases: list[Case]) -> dict[str, tuple[float, str]]:
    """Per case name, the worst per-stage exponent between its smallest and largest size
    (CPU seconds, report.json), stages under NOISE_S at the smallest left out."""
    by_name: dict[str, list[Case]] = {}
    for c in cases:
        if c.fuse.ok:
            by_name.setdefault(c.name, []).append(c)
    found: dict[str, tuple[float, str]] = {}
    lines = []
    for name, cs in by_name.items():
        cs.sort(key=lambda c: c.layers)
        a, b = cs[0], cs[-1]
        if a.layers == b.layers:
            continue
        ex = {
            s: exponent(a.cpu_stages.get(s, 0), b.cpu_stages.get(s, 0), a.nodes, b.nodes)
            for s in STAGES
        }
        counted = {
            s: e
            for s, e in ex.items()
            if s != "other" and a.cpu_stages.get(s, 0) >= NOISE_S and not math.isnan(e)
        }
        total = exponent(a.fuse.cpu, b.fuse.cpu, a.nodes, b.nodes)
        if counted:
            stage = max(counted, key=counted.__getitem__)
            found[name] = (counted[stage], stage)
        lines.append(
            (
                found.get(name, (math.nan, ""))[0],
                f"{name:26s} {a.layers:>5d}->{b.layers:<5d} {total:6.2f} "
                + " ".join(f"{ex[s]:7.2f}" for s in STAGES),
            )
        )
    if lines:
        say(
            "\nper-stage exponent, smallest -> largest size, CPU seconds (1.0 = linear; "
            f"goal <= {GOAL_EXPONENT} by instructions: --instructions), worst first"
        )
        say(f"{'case':26s} {'sizes':>11s} {'fuse':>6s} " + " ".join(f"{s:>7s}" for s in STAGES))
        for _, text in sorted(lines, key=lambda t: -t[0] if not math.isnan(t[0]) else 0):
            say(text)
    return found


def onnxscript_ratio(
    v: sv.Variant, layers: int, folder: Path, mem_gb: float, timeout: float
) -> tuple[float, str] | None:
    """``autofusion match`` with onnxscript's four patterns vs onnxscript's rewriter with
    the same four, on ``v`` at ``layers``, whole process each (wall)."""
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return None
    rules = folder / "four.yaml"
    rules.write_text(ONNXSCRIPT_RULES)
    path = sv.build_stack(v, layers, folder / "compare.onnx", weights_form(v, layers))
    ours = measured(
        [*AUTOFUSION, "match", str(path), "--rules", str(rules), "-f", "json"],
        folder,
        mem_gb,
        timeout,
    )
    theirs = measured([PY, str(HERE / "onnxscript_four.py"), str(path)], folder, mem_gb, timeout)
    _remove_model(path)
    if not (ours.ok and theirs.ok):
        return math.inf, f"ours {ours.status}, onnxscript {theirs.status}"
    return (
        ours.wall / theirs.wall,
        f"{ours.wall:.2f} s ({ours.rss_mib:.0f} MiB) vs {theirs.wall:.2f} s "
        f"({theirs.rss_mib:.0f} MiB); onnxscript rewrites {theirs.stdout.strip()}",
    )


def weights_form(v: sv.Variant, layers: int) -> str:
    """The variant's own weight form, or external data where its initializers would pass
    ``stack_variants.INITIALIZER_LIMIT`` at this depth (said once per variant)."""
    if v.weights == "initializers" and v.weight_bytes_per_layer() * layers > sv.INITIALIZER_LIMIT:
        if v.name not in _SAID:
            _SAID.add(v.name)
            say(f"  ({v.name}: initializers past {sv.INITIALIZER_LIMIT >> 20} MiB from "
                f"{layers} layers: external data instead)")  # fmt: skip
        return "external"
    return v.weights


_SAID: set[str] = set()


def _remove_model(path: Path) -> None:
    for p in path.parent.glob(path.name + "*"):
        p.unlink()


def instruction_exponent(v: sv.Variant, layers: list[int], folder: Path) -> tuple[float, str]:
    """The worst per-stage exponent of ``v`` by instructions (callgrind, stage marks of
    scale_instructions.py), smallest -> largest of ``layers``."""
    import onnx
    from scale_instructions import measure

    per = {}
    for n in (layers[0], layers[-1]):
        path = sv.build_stack(v, n, folder / f"ins-{n}.onnx", weights_form(v, n))
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        per[n] = (measure(path, folder, f"{v.name.replace(':', '_')}-{n}"), nodes)
        _remove_model(path)
    (a, na), (b, nb) = per[layers[0]], per[layers[-1]]
    say(f"  {v.name}: instructions (millions) per stage at {layers[0]} and {layers[-1]} layers")
    for s in STAGES:
        say(f"    {s:8s} {a['stages'].get(s, 0) / 1e6:12.0f} {b['stages'].get(s, 0) / 1e6:12.0f}")
    ex = {
        s: exponent(a["stages"].get(s, 0), b["stages"].get(s, 0), na, nb)
        for s in STAGES
        if s != "other" and a["stages"].get(s, 0) > 0
    }
    stage = max(ex, key=ex.__getitem__)
    return ex[stage], stage


def suggest_runs(
    models: list[Path], folder: Path, mem_gb: float, timeout: float, quick: bool
) -> list[tuple]:
    """``autofusion suggest`` on each of ``models`` and on a 32-layer LLaMA-shaped stack
    with external weights: (what, Run, drafted rule files)."""
    stack = sv.build_stack(
        "unseen38", 8 if quick else 32, folder / "suggest-stack.onnx", "external"
    )
    found = []
    say(f"\nsuggest, whole process each (timeout {timeout:.0f} s, {mem_gb:g} GB)")
    say(f"{'model':44s} {'wall s':>8s} {'MiB':>7s} {'drafts':>6s}  status")
    for path in [*models, stack]:
        out = folder / "suggest-out"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [*AUTOFUSION, "suggest", str(path), "-o", str(out), "-f", "json"]
        r = measured(cmd, folder, mem_gb, timeout)
        drafts = len(list(out.rglob("*.yaml"))) if out.exists() else 0
        name = "stack: unseen38 external" if path == stack else _short(path)
        found.append((name, r, drafts))
        say(f"{name:44s} {r.wall:8.1f} {r.rss_mib:7.0f} {drafts:6d}  {r.status}")
    _remove_model(stack)
    return found


def _short(path: Path) -> str:
    return (
        f"{path.parent.name}/{path.name}" if path.parent.name in ("families", "real") else path.name
    )


def run_variants(args: argparse.Namespace, folder: Path) -> None:
    """The variant table, the worst rows, exponents, the onnxscript comparison, the goals."""
    names = list(sv.VARIANTS) if args.variants == "all" else args.variants.split(",")
    chosen = [sv.variant(n) for n in names]
    chosen += [sv.random_variant(args.seed + k) for k in range(args.random)]
    layers = args.layer_sizes
    say(
        f"{len(chosen)} variants x {layers} layers; limits {args.mem_limit_gb:g} GB "
        f"(RLIMIT_AS + PSS watchdog on the process tree), {args.timeout:.0f} s per process"
    )
    say(HEADER)
    cases: list[Case] = []
    compared: dict[str, tuple[float, str]] = {}
    compare_lines: list[str] = []
    for v in chosen:
        if past_deadline():
            say(f"deadline {args.deadline} UTC passed: {v.name} and the variants after it skipped")
            break
        for n in layers:
            form = weights_form(v, n)
            path = sv.build_stack(v, n, folder / f"{v.name.replace(':', '_')}-{n}.onnx", form)
            c = fuse_case(v.name, n, path, folder, args.mem_limit_gb, args.timeout)
            _remove_model(path)
            cases.append(c)
            say(row(c))
            if not c.fuse.ok and args.stop_growing:
                break  # a larger stack of a failed variant fails the same, only later
        if args.compare_at and not past_deadline():
            r = onnxscript_ratio(v, args.compare_at, folder, args.mem_limit_gb, args.timeout)
            if r is not None:
                compared[v.name] = r
                compare_lines.append(f"  {v.name:26s} {r[0]:6.2f}x  {r[1]}")
                say(f"{'':26s} match vs onnxscript at {args.compare_at}:{compare_lines[-1]}")
    top = [c for c in cases if c.layers == layers[-1]] or cases
    worst_rows(top, f"at {layers[-1]} layers")
    found = exponents(cases)
    worst_ex = max(found.items(), key=lambda kv: kv[1][0]) if found else None
    if args.compare_at:
        say(
            f"\nmatch (onnxscript's four patterns as rules) vs onnxscript's rewriter, "
            f"{args.compare_at} layers, whole process each, wall"
        )
        for line in compare_lines or ["  not measured (onnxscript missing, or the deadline)"]:
            say(line)
    instr: dict[str, tuple[float, str]] = {}
    if args.instructions:
        say(f"\nper-stage exponent by instructions (callgrind), {layers[0]} -> {layers[-1]}")
        for name in args.instructions.split(","):
            instr[name] = instruction_exponent(sv.variant(name), layers, folder)
            say(f"  {name}: worst {instr[name][0]:.3f} ({instr[name][1]})")
    suggested = (
        suggest_runs(shared_models([]), folder, args.mem_limit_gb, args.timeout, args.quick)
        if args.suggest
        else []
    )
    done_when(top, worst_ex, compared, instr, suggested, layers)


def done_when(
    top: list[Case],
    worst_ex: tuple[str, tuple[float, str]] | None,
    compared: dict[str, tuple[float, str]],
    instr: dict[str, tuple[float, str]],
    suggested: list[tuple],
    layers: list[int],
) -> None:
    """Issue 38's done-when items, each with the worst figure of this run."""
    table: list[tuple[str, str, bool | None]] = []
    failed = [c for c in top if not (c.fuse.ok and c.floor.ok)]
    ok = [c for c in top if c.fuse.ok and c.floor.ok]
    n = layers[-1] if layers else 0
    if top:
        table.append(
            (f"no failure at {n} layers", f"{len(failed)} of {len(top)} failed", not failed)
        )
    if ok:
        w = max(ok, key=lambda c: c.ratio)
        table.append(
            (
                f"worst fuse <= {GOAL_RATIO:g}x floor, {n} layers",
                f"{w.ratio:.1f}x ({w.name})",
                w.ratio <= GOAL_RATIO and not failed,
            )  # fmt: skip
        )
        w = max(ok, key=lambda c: c.rss)
        table.append(
            (
                f"worst peak RSS <= {GOAL_RSS:g}x floor's, {n} layers",
                f"{w.rss:.2f}x ({w.name})",
                w.rss <= GOAL_RSS and not failed,
            )  # fmt: skip
        )
    if instr:
        name, (e, stage) = max(instr.items(), key=lambda kv: kv[1][0])
        table.append(
            (
                f"worst per-stage exponent <= {GOAL_EXPONENT}, instructions",
                f"{e:.3f} ({name}, {stage})",
                e <= GOAL_EXPONENT,
            )  # fmt: skip
        )
    if worst_ex is not None:
        name, (e, stage) = worst_ex
        table.append(
            (
                "worst per-stage exponent, CPU seconds (indicative)",
                f"{e:.2f} ({name}, {stage})",
                None,
            )  # fmt: skip
        )
    if compared:
        name, (r, what) = max(compared.items(), key=lambda kv: kv[1][0])
        table.append(
            (
                f"worst match <= {GOAL_ONNXSCRIPT}x onnxscript's rewriter",
                f"{r:.2f}x ({name})",
                r <= GOAL_ONNXSCRIPT,
            )  # fmt: skip
        )
    if suggested:
        shared = [(n_, r) for n_, r, _ in suggested if not n_.startswith("stack")]
        bad = [n_ for n_, r in shared if not r.ok]
        w_name, w = max(shared, key=lambda t: t[1].wall if t[1].ok else math.inf)
        table.append(
            (
                f"suggest <= {GOAL_SUGGEST_S:g} s each shared model",
                f"worst {w.wall:.0f} s ({w_name}, {w.status}); {len(bad)} failed",
                w.ok and w.wall <= GOAL_SUGGEST_S,
            )  # fmt: skip
        )
        for n_, r, _ in suggested:
            if n_.startswith("stack"):
                table.append(
                    (f"suggest <= {GOAL_SUGGEST_STACK_S:g} s, LLaMA-shaped stack, ext weights",
                     f"{r.wall:.0f} s ({r.status})", r.ok and r.wall <= GOAL_SUGGEST_STACK_S)
                )  # fmt: skip
    width = max(len(g) for g, _, _ in table)
    say(f"\ndone when (issue 38), measured in this run\n{'goal':{width}s}  measured  status")
    for goal, figure, met in table:
        status = "n/a" if met is None else ("met" if met else "NOT MET")
        say(f"{goal:{width}s}  {figure}  {status}")


def run_models(paths: list[str], args: argparse.Namespace, folder: Path) -> None:
    """Floor and fuse on real exports at their real depth."""
    models = shared_models(paths)
    say(f"{len(models)} exports at their real depth")
    say(HEADER)
    cases = []
    for path in models:
        if past_deadline():
            say(f"deadline {args.deadline} UTC passed: {_short(path)} and after skipped")
            break
        c = fuse_case(_short(path)[:26], 0, path, folder, args.mem_limit_gb, args.timeout)
        cases.append(c)
        say(row(c))
    worst_rows(cases, "exports at real depth")
    if args.suggest:
        suggested = suggest_runs(models, folder, args.mem_limit_gb, args.timeout, args.quick)
        done_when([], None, {}, {}, suggested, [])


def run_family_repeat(args: argparse.Namespace, folder: Path) -> None:
    """Stacks built by repeating one layer of each family export N times."""
    models = shared_models(args.models or [])
    copies = args.repeat_sizes
    say(f"family exports with one layer repeated {copies} times (stack_variants.repeat_layers)")
    say(HEADER)
    cases, skipped = [], []
    for path in models:
        if past_deadline():
            say(f"deadline {args.deadline} UTC passed: {_short(path)} and after skipped")
            break
        for n in copies:
            out = folder / f"rep-{path.stem}-{n}.onnx"
            try:
                info = sv.repeat_layers(path, n, out)
            except ValueError as exc:
                skipped.append(f"{_short(path)}: {exc}")
                break
            name = f"{path.name.split('.')[0]}.{path.name.split('.')[1]}"[:26]
            c = fuse_case(name, info["layers"], out, folder, args.mem_limit_gb, args.timeout)
            _remove_model(out)
            cases.append(c)
            say(row(c))
    say(f"\nno repeated layer found in {len(skipped)} exports:")
    for s in skipped:
        say(f"  {s}")
    if cases:
        largest = {c.name: c.layers for c in sorted(cases, key=lambda c: c.layers)}
        worst_rows([c for c in cases if c.layers == largest[c.name]], "largest repeat of each")
        exponents(cases)


def parser() -> argparse.ArgumentParser:
    """The command line (see the module's docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="all", help="all, or names separated by commas")
    ap.add_argument("--random", type=int, default=0, help="also N variants drawn by seed")
    ap.add_argument("--seed", type=int, default=1, help="first seed of --random")
    ap.add_argument("--layers", help="layer counts (default 512,1024,2048; --quick 16,32,64)")
    ap.add_argument("--compare-at", type=int, default=1024, help="0: no onnxscript comparison")
    ap.add_argument("--quick", action="store_true", help="16,32,64 layers, compare at 32")
    ap.add_argument("--mem-limit-gb", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    ap.add_argument("--instructions", default="", help="variants whose exponent callgrind counts")
    ap.add_argument("--suggest", action="store_true", help="suggest on the shared models too")
    ap.add_argument("--stop-growing", action="store_true",
                    help="after a variant fails at one size, skip its larger sizes")  # fmt: skip
    ap.add_argument("--models", nargs="*", metavar="PATH", help="exports at their real depth")
    ap.add_argument("--family-repeat", metavar="N[,N]", help="family exports, a layer repeated")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--keep", help="work in this folder (default: a temporary one)")
    ap.add_argument(
        "--deadline",
        metavar="HH:MM",
        help="UTC time after which no new variant begins (the table is printed with the "
        "variants measured so far)",
    )
    ap.add_argument(
        "--src",
        help="run autofusion from this source tree (e.g. `git archive HEAD` unpacked: the "
        "committed code while the work tree is being edited)",
    )
    return ap


def main() -> None:
    global OUT
    ap = parser()
    args = ap.parse_args()
    if args.src:
        src = str(Path(args.src).resolve())
        if not (Path(src) / "ruleengine" / "__main__.py").exists():
            ap.error(f"--src {args.src}: no ruleengine/ package there")
        ENV["PYTHONPATH"] = src + os.pathsep + ENV.get("PYTHONPATH", "")
    if args.deadline:
        hh, mm = (int(x) for x in args.deadline.split(":"))
        today = datetime.now(UTC).replace(hour=hh, minute=mm, second=0, microsecond=0)
        DEADLINE.append(today.timestamp())
    default = "16,32,64" if args.quick else "512,1024,2048"
    args.layer_sizes = sizes_arg(ap, args.layers or default)
    if args.quick and args.compare_at == 1024:
        args.compare_at = 32
    if args.family_repeat:
        args.repeat_sizes = sizes_arg(ap, args.family_repeat, "--family-repeat")
    if args.out:
        OUT = open(args.out, "w")  # closed at the end of main
    say(f"# bench/shape_free.py {' '.join(sys.argv[1:])}")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    with contextlib.ExitStack() as stack:
        if args.keep:
            folder = Path(args.keep)
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shape_free-")))
        if args.family_repeat:
            run_family_repeat(args, folder)
        elif args.models is not None:
            run_models(args.models, args, folder)
        else:
            run_variants(args, folder)
    if OUT is not sys.stdout:
        OUT.close()


if __name__ == "__main__":
    main()
