"""The one orchestrator: calls each stage with the previous stage's immutable output.

load rules -> load graph -> match -> cost -> resolve  (``analyze``)
           -> group -> rewrite ONNX -> verify (safe mode: bisect) -> plan -> render (``fuse``)

``fuse`` computes every output file in memory; ``write_outputs`` then writes them all
atomically. Nothing here prints: progress goes to an optional callback.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ruleengine.cost.model import ScoredCandidate, Target
from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import GraphLoadError, UsageError
from ruleengine.graph.forked import FORK_FROM_NODES, cores, cpu_seconds, tally
from ruleengine.graph.model import Graph, replaced
from ruleengine.match.model import Candidate, MatchResult
from ruleengine.resolve.model import Resolution
from ruleengine.rules.model import RuleSet
from ruleengine.runtime import release_memory

if TYPE_CHECKING:
    import onnx

    from ruleengine.kernels.model import Catalog
    from ruleengine.rewrite.model import FusedGroup, Plan
    from ruleengine.rewrite.weights import Placement, WeightSurvey

DEFAULT_TARGET = "ascend910b"
DEFAULT_PRESET = "all"
SOLVERS = ("exact", "greedy")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Analysis:
    """Everything up to (not including) rewriting; what explain/compare/fuse read."""

    rule_set: RuleSet
    graph: Graph
    target: Target
    match: MatchResult
    # in candidate key order; ``score_candidates``' ``ScoredRecords`` on a big graph (each
    # record made when read)
    scored: Sequence[ScoredCandidate]
    resolution: Resolution
    timings: tuple[tuple[str, float], ...] = field(default=())
    cpu_timings: tuple[tuple[str, float], ...] = field(default=())  # CPU seconds per stage

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.match.candidates

    def released(self) -> Analysis:
        """The same decisions without the per-candidate records: no candidate, near miss
        or scored record but the chosen ones, no lost record (``fuse`` with a compact
        plan keeps this once the plan has counted them; ``analyze`` returns them all)."""
        m = self.match
        return replace(
            self,
            match=MatchResult((), (), m.seconds, m.facts),
            scored=(),
            resolution=replace(self.resolution, lost=()),
        )


@dataclass(frozen=True)
class FuseResult:
    """A finished fuse run, held in memory: nothing is written until ``write_outputs``.

    With the compact plan (the default) ``analysis`` is ``Analysis.released()``: graph,
    rules, target and the chosen groups; ``plan`` counts every rejection and keeps those
    it lists. ``plan_detail="full"`` keeps every record."""

    analysis: Analysis
    plan: Plan
    groups: tuple[FusedGroup, ...]  # the groups in the fused model (after safe mode)
    fused_model: onnx.ModelProto
    files: Mapping[str, bytes]  # path relative to OUTDIR -> bytes
    model_path: Path
    weights: WeightSurvey | None = None
    placements: tuple[Placement, ...] = ()  # how the fused model references the weights
    warnings: tuple[Diagnostic, ...] = ()  # weights missing or outside OUTDIR
    outdir: Path | None = None  # the directory ``files`` were rendered for
    copy_weights: bool = False

    @property
    def fused_name(self) -> str:
        return next(k for k in self.files if k.endswith(".fused.onnx"))


def select_rules(
    rule_set: RuleSet, enable: Sequence[str] = (), disable: Sequence[str] = ()
) -> RuleSet:
    """Apply --enable/--disable: enable names rules to keep (all when empty)."""
    known = {r.name for r in rule_set.rules}
    unknown = sorted((set(enable) | set(disable)) - known)
    if unknown:
        raise UsageError(
            f"unknown rule name(s): {', '.join(unknown)}; known rules: {', '.join(sorted(known))}"
        )
    both = sorted(set(enable) & set(disable))
    if both:  # silently fusing nothing with them is never what was meant
        raise UsageError(
            f"rule(s) {', '.join(both)} both enabled and disabled (--enable or AUTOFUSION_RULES, "
            "--disable or AUTOFUSION_DISABLE); name each rule in one of them only"
        )
    keep = tuple(
        r
        for r in rule_set.rules
        if (not enable or r.name in enable) and r.name not in disable and r.enabled
    )
    return replace(rule_set, rules=keep)


_F = TypeVar("_F", bound=Callable[..., object])


def _gc_paused(fn: _F) -> _F:
    """Run a whole stage chain with the cyclic GC paused: loading, matching, scoring and
    rewriting allocate millions of long-lived objects and almost no cycles, and each
    full collection walks them all again (measured: loading a 2048-layer stack 4.5 s ->
    3.3 s). Nested pauses are harmless (``paused_gc`` restores the state it found)."""

    @functools.wraps(fn)
    def run(*args: object, **kwargs: object) -> object:
        from ruleengine.runtime import paused_gc

        with paused_gc():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def _out_of_range(message: str) -> UsageError:
    """A number argument (flag or API) outside its range: a usage error with its code."""
    return UsageError(
        message, (codes.make("number-out-of-range", message, hint="see autofusion fuse -h"),)
    )


def _note(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


@_gc_paused
def analyze(
    model: str | Path,
    rules: Sequence[str | Path] = (),
    *,
    preset: str | None = None,
    target: str | Target = DEFAULT_TARGET,
    solver: str = "exact",
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    enable: Sequence[str] = (),
    disable: Sequence[str] = (),
    benefit_threshold: float | None = None,
    time_limit_s: float = 30.0,
    jobs: int | None = None,
    progress: Progress | None = None,
    _check_rules: Callable[[RuleSet], None] | None = None,
) -> Analysis:
    """Load, match, cost and resolve: every decision, nothing rewritten.

    ``benefit_threshold`` raises every rule's threshold to at least this value.
    """
    from ruleengine.cost import load_target, score_candidates
    from ruleengine.graph import load_graph
    from ruleengine.match.parallel import find_candidates_parallel
    from ruleengine.resolve import resolve
    from ruleengine.rules.pending import PendingRules, rules_jobs

    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if benefit_threshold is not None and not 0.0 <= benefit_threshold <= 1.0:  # NaN too
        raise _out_of_range(
            f"benefit threshold {benefit_threshold} is not a fraction between 0 and 1 "
            "(net saved bytes / unfused bytes, e.g. 0.2)"
        )
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs {jobs!r}: the number of processes is a positive integer")
    if not 0.0 < time_limit_s < math.inf:  # NaN too
        raise _out_of_range(f"time limit {time_limit_s} s must be a positive number of seconds")
    for name, size in (dims or {}).items():  # the CLI's parse_dims checks --dim; the API too
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size < 1 << 63:
            raise _out_of_range(f"dims[{name!r}] = {size!r}: a dim size is a positive integer")
    if not rules and preset is None:
        preset = DEFAULT_PRESET
    laps = _Laps()
    lap = laps.lap

    _note(progress, "loading rules")
    # with a core to spare beside the model's reading (``rules_jobs``) a forked child
    # loads the rules while this process reads the model
    pending = PendingRules(rules, preset, rules_jobs(model, cores() if jobs is None else jobs))

    def checked_rules() -> RuleSet:
        rule_set = select_rules(pending.result(), enable, disable)
        if benefit_threshold is not None:
            rule_set = replace(
                rule_set,
                rules=tuple(
                    replace(r, benefit_threshold=max(r.benefit_threshold, benefit_threshold))
                    for r in rule_set.rules
                ),
            )
        if _check_rules is not None:
            _check_rules(rule_set)
        return rule_set

    rule_set = None if pending.forked else checked_rules()
    try:
        tgt = target if isinstance(target, Target) else load_target(target)
        lap("rules")
        _note(progress, f"loading model {Path(model).name}")
        graph = load_graph(model, dims or {}, input_shapes, jobs=jobs)
    except Exception:
        if rule_set is None:
            checked_rules()  # a rule's error comes first, as when they load first
        raise
    if rule_set is None:
        # the rules' and the catalog's children are reaped here, in the graph's lap: the
        # whole CPU of each (fork, pickling and exit included) goes back to the rules
        # as does this process's own finishing of them (unpickling, selection, the
        # kernel contracts' lint), which runs in the rules' lap when nothing is forked
        wall, cpu = time.perf_counter(), time.process_time()
        with tally() as reaped:
            rule_set = checked_rules()
        laps.moved("rules", time.perf_counter() - wall, time.process_time() - cpu)
        # (the child's wall less the time waited for it: that wait is in the move above)
        laps.beside("rules", max(0.0, pending.seconds[0] - reaped.wait), reaped.cpu)
    lap("graph")
    _note(progress, f"matching {len(rule_set.rules)} rules on {len(graph.nodes)} nodes")
    match = find_candidates_parallel(graph, rule_set, cores() if jobs is None else jobs)
    release_memory()  # the matcher's working set is freed: its pages go back
    lap("match")
    _note(progress, f"costing {len(match.candidates)} candidates on {tgt.name}")
    scored = score_candidates(graph, match, rule_set, tgt)
    lap("cost")
    _note(progress, f"resolving conflicts ({solver})")
    resolution = resolve(
        graph,
        scored,
        solver=solver,
        time_limit_s=time_limit_s,
        # the greedy hint in a forked child beside the components (a large graph only)
        jobs=(cores() if jobs is None else jobs) if len(graph.nodes) >= FORK_FROM_NODES else 1,
    )
    lap("resolve")
    return Analysis(
        rule_set,
        graph,
        tgt,
        match,
        scored,
        resolution,
        tuple(laps.wall),
        tuple(laps.cpu),
    )


@_gc_paused
def fuse(
    model: str | Path,
    rules: Sequence[str | Path] = (),
    *,
    preset: str | None = None,
    target: str | Target = DEFAULT_TARGET,
    solver: str = "exact",
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    enable: Sequence[str] = (),
    disable: Sequence[str] = (),
    benefit_threshold: float | None = None,
    verify: bool | None = None,
    safe: bool = False,
    inputs: str | Path | None = None,
    seed: int = 0,
    time_limit_s: float = 30.0,
    jobs: int | None = None,
    progress: Progress | None = None,
    verify_mode: str = "auto",
    outdir: str | Path | None = None,
    copy_weights: bool = False,
    kernels: Sequence[str | Path] = (),
    corrupt_rules: Sequence[str] = (),
    plan_detail: str = "compact",
) -> FuseResult:
    """Decide, rewrite, verify and render a fused model; returns every output in memory.

    No weight byte is read unless verification runs. ``verify`` defaults to on in safe
    mode and off otherwise; ``verify_mode`` is auto, whole or per-group. ``outdir`` is
    where the files will be written (the fused model's weight references resolve from
    there; ``write_outputs`` to another directory re-points them). ``corrupt_rules`` is a
    test-only hook of this function (docs/fuse.md): those rules' function bodies are
    deliberately wrong. ``kernels`` are catalog folders added to the bundled kernels/.
    ``plan_detail`` "compact" lists a few rejected candidates per (rule, verdict) in
    plan.json and report.txt (sizes bounded by the rule set); "full" lists every one.
    """
    if plan_detail not in ("compact", "full"):
        raise UsageError(f"unknown plan detail {plan_detail!r}; choose compact or full")

    from ruleengine.kernels.bind import bind_groups
    from ruleengine.kernels.catalog import PendingCatalog
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.checking import start_check
    from ruleengine.rewrite.dot import PendingDot
    from ruleengine.rewrite.emit import render_files, serialize_model
    from ruleengine.rewrite.onnx_rewrite import RewriteError, fused_nodes, rewrite_model
    from ruleengine.rewrite.plan import (
        build_groups,
        build_plan,
        check_output_paths,
        list_rejections,
    )

    path = Path(model)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 63:
        raise _out_of_range(f"seed {seed!r} must be an integer from 0 to 2^63-1")
    do_verify = safe if verify is None else verify
    if safe and verify is False:
        raise UsageError("--safe needs verification; drop --no-verify")
    # the bundled catalog loads in a forked child beside the rules (``PendingCatalog``)
    catalog = PendingCatalog(kernels, cores() if jobs is None else jobs)
    analysis = analyze(
        path,
        rules,
        preset=preset,
        target=target,
        solver=solver,
        dims=dims,
        input_shapes=input_shapes,
        enable=enable,
        disable=disable,
        benefit_threshold=benefit_threshold,
        time_limit_s=time_limit_s,
        jobs=jobs,
        progress=progress,
        _check_rules=lambda rs: _check_contracts(rs, catalog.result(), check_output_paths),
    )
    laps = _Laps(analysis.timings, analysis.cpu_timings)
    graph = analysis.graph
    listed = None
    if plan_detail == "compact":
        # What the compact plan lists and counts is read now; then the per-candidate
        # records (10^6 at 2048 layers) are let go before the model is read and
        # rewritten, so the peak of memory is not their sum.
        listed = list_rejections(
            analysis.scored, analysis.resolution.lost, analysis.match, from_cost=True
        )
        analysis = analysis.released()
        release_memory()
        laps.lap("plan")
    from ruleengine.graph.loader import read_model

    proto = read_model(path)  # the graph only: fusion changes no weight, none is read
    found = weights.survey(proto, path)
    _check_weight_files(found, path)
    warnings = tuple(_missing_weights(found, path))
    if do_verify and found.missing:
        names = ", ".join(str(f.path) for f in found.missing)
        raise UsageError(
            f"--verify/--safe need the model's weights, and {names} is missing",
            (
                Diagnostic(
                    "AF521",
                    "verify-needs-weights",
                    Severity.ERROR,
                    f"weights file {names} not found: onnxruntime cannot run the model "
                    "without it, so nothing can be verified",
                    Location(str(path)),
                    "put the weights file where the model references it, or fuse without "
                    "--verify/--safe (the plan never needs a weight)",
                ),
            ),
        )
    choice = None
    if do_verify:  # refuse a run that cannot fit before anything else is done
        from ruleengine.verification import choose_mode

        choice = choose_mode(graph, found, verify_mode, str(path))
    from ruleengine.verification import mark_verified, unbound_warnings

    groups = build_groups(graph, analysis.resolution.chosen, analysis.rule_set)
    # without verification no group is dropped: the DOT graph of these groups (what it
    # shows is final here) renders in a forked child beside binding and the rewrite
    dot = None if do_verify else PendingDot(graph, groups, cores() if jobs is None else jobs)
    groups, calls = bind_groups(graph, groups, analysis.rule_set, catalog.result())
    unbound = {g.id for g in groups if g.contract is not None and g.contract.status == "unbound"}
    if not do_verify:
        warnings += unbound_warnings([g for g in groups if g.id in unbound], path)
    _note(progress, f"rewriting {len(groups)} groups")

    def build(subset: Sequence[FusedGroup]) -> onnx.ModelProto:
        return rewrite_model(proto, graph, subset, corrupt_rules=corrupt_rules, calls=calls)

    if choice is None:  # nothing reads the input model again: rewrite it in place
        fused = rewrite_model(
            proto, graph, groups, corrupt_rules=corrupt_rules, calls=calls, in_place=True
        )
        proto = None
    else:
        fused = build(groups)
    laps.lap("rewrite")

    result_verification = None
    dropped: tuple[FusedGroup, ...] = ()
    if choice is not None:
        from ruleengine.verification import verify_fused

        _note(progress, "verifying in onnxruntime")
        _note(progress, f"verification mode: {choice.mode} ({choice.reason})")
        outcome = verify_fused(
            path=path,
            original=proto,
            fused=fused,
            graph=graph,
            groups=groups,
            build=build,
            weights=found,
            choice=choice,
            inputs=inputs,
            seed=seed,
            safe=safe,
            progress=progress,
            unbound=unbound,
        )
        groups, dropped, fused = outcome.groups, outcome.dropped, outcome.fused
        result_verification = outcome.verification
        laps.lap("verify")

    _note(progress, "checking the fused model")
    checking = None
    if choice is None:  # no verification: the check runs in a forked child beside emit
        checking = start_check(fused, cores() if jobs is None else jobs, len(graph.nodes))
    try:
        if checking is None:
            _check_in_memory(fused, proto, path)
    except RewriteError as exc:
        if result_verification is None or result_verification.ok:
            raise
        # a kernel bound to the wrong tensors fails the checker too: part of the failed
        # verification (exit 1, files written for study), not a bug of the rewriter
        result_verification = replace(
            result_verification,
            error=f"{result_verification.error or 'verification failed'}; {exc.message[:300]}",
        )
    laps.lap("check")
    # The input model is read no more (``build`` only served verification): its memory
    # goes back before the plan and the output files are rendered.
    proto = None
    release_memory()
    groups = mark_verified(groups, result_verification)
    called = fused_nodes(fused)
    groups = tuple(
        replaced(g, node_name=called[g.id][0], overload=called[g.id][1]) if g.id in called else g
        for g in groups
    )
    plan = build_plan(
        model_sha256=_sha256(path),
        model_name=path.name,
        graph=graph,
        rule_set=analysis.rule_set,
        target=analysis.target,
        match=analysis.match,
        scored=analysis.scored,
        resolution=analysis.resolution,
        groups=groups,
        dropped=dropped,
        verification=result_verification,
        timings=laps.wall,
        cpu_timings=laps.cpu,
        listed=listed,
    )
    fused_name = f"{_stem(path)}.fused.onnx"
    target_dir = Path(outdir) if outdir is not None else path.parent
    placements = weights.place(
        found, target_dir, copy=copy_weights, reserved=_reserved(fused_name, plan)
    )
    warnings += tuple(_outside(placements, path))
    model_files = serialize_model(fused, fused_name, placements)

    def checked(plan: Plan) -> Plan:  # the forked check's verdict, before the reports
        if checking is None:
            return plan
        times = checking.passed()
        if times is None:  # it failed: the in-process check raises its error
            _check_in_memory(fused, None, path)
        else:
            laps.beside("check", *times)
        return replace(plan, timings=tuple(laps.wall), cpu_timings=tuple(laps.cpu))

    files = render_files(
        plan=plan,
        fused_model_files=model_files,
        graph=graph,
        extra_names=tuple(p.new_location for p in placements if p.how in ("link", "copy")),
        detail=plan_detail,
        before_reports=checked,
        dot=dot,
    )
    laps.lap("emit")
    plan = replace(plan, timings=tuple(laps.wall), cpu_timings=tuple(laps.cpu))
    return FuseResult(
        analysis,
        plan,
        tuple(groups),
        fused,
        files,
        path,
        weights=found,
        placements=placements,
        warnings=warnings,
        outdir=target_dir,
        copy_weights=copy_weights,
    )


class _Laps:
    """Wall and CPU seconds per stage (report.json: ``timings_s`` and ``cpu_s``; on a
    shared machine the CPU time tells a stage's own work from waiting for a core; a
    forked child's CPU counts in the stage that reaps it)."""

    def __init__(
        self, wall: Sequence[tuple[str, float]] = (), cpu: Sequence[tuple[str, float]] = ()
    ) -> None:
        self.wall, self.cpu = list(wall), list(cpu)
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()

    def lap(self, stage: str) -> None:
        wall, cpu = time.perf_counter(), cpu_seconds()
        self.wall.append((stage, wall - self._wall))
        self.cpu.append((stage, cpu - self._cpu))
        self._wall, self._cpu = wall, cpu

    def moved(self, stage: str, wall: float, cpu: float) -> None:
        """Move seconds of ``stage``'s work that this process did inside the current lap
        (wall and CPU) from the current lap to ``stage``."""
        self.wall = [(s, w + wall if s == stage else w) for s, w in self.wall]
        self.cpu = [(s, c + cpu if s == stage else c) for s, c in self.cpu]
        self._wall += wall
        self._cpu += cpu

    def beside(self, stage: str, wall: float, cpu: float) -> None:
        """Add the seconds of ``stage``'s work done by a forked child beside the current
        stage (reaped now: its CPU leaves the current lap)."""
        self.wall = [(s, w + wall if s == stage else w) for s, w in self.wall]
        self.cpu = [(s, c + cpu if s == stage else c) for s, c in self.cpu]
        self._cpu += cpu


def _check_contracts(rule_set: RuleSet, catalog: Catalog, then: Callable[[RuleSet], None]) -> None:
    """A rule whose rewrite contradicts its kernel's contract cannot be fused (check
    reports the same errors); then the output-path check."""
    from ruleengine.errors import RuleLoadError
    from ruleengine.kernels.lint import lint_rules

    errors = tuple(d for d in lint_rules(rule_set.rules, catalog) if d.severity == Severity.ERROR)
    if errors:
        n = len(errors)
        raise RuleLoadError(
            f"{n} rule rewrite{'s' if n != 1 else ''} contradict the kernel catalog", errors
        )
    then(rule_set)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _reserved(fused_name: str, plan: Plan) -> tuple[str, ...]:
    """OUTDIR paths the fuse outputs take (a linked weights file must not take them)."""
    names = [fused_name, f"{fused_name}.data", "plan.json", "graph.dot", "graph.svg"]
    names += ["report.txt", "report.json"]
    for g in plan.groups:
        if g.kernel.file_path:
            names.append(f"{g.kernel.file_path}/{g.kernel.kernel_name}.kernel.json")
    return tuple(names)


def _check_weight_files(found: WeightSurvey, path: Path) -> None:
    """AF542 for weight files that are there but cannot be right: too short for the
    tensors that name them, or outside the model's folder (absolute, ``..``)."""

    for f in found.files:
        inside = f.path == found.model_dir or found.model_dir in f.path.parents
        size = f.path.stat().st_size if f.present else None
        why = None
        if not inside:
            why = f"weights file {f.location!r} of {path.name} is outside the model's folder"
        elif size is not None and size < f.needed_bytes:
            why = (
                f"weights file {f.location} of {path.name} holds {size} bytes, its tensors "
                f"need {f.needed_bytes}"
            )
        if why is not None:
            raise GraphLoadError(
                why,
                (
                    codes.make(
                        "external-data-unreadable",
                        why,
                        Location(str(path)),
                        hint="keep every weight file the model names beside it, as exported",
                    ),
                ),
            )


def _missing_weights(found: WeightSurvey, path: Path) -> list[Diagnostic]:
    return [
        Diagnostic(
            "AF520",
            "weights-missing",
            Severity.WARNING,
            f"weights file {f.location} ({f.path}) not found: the plan and the fused graph "
            f"are written; its {f.tensors} external tensor(s) reference the same file",
            Location(str(path)),
            "put the weights file there to run or verify the fused model",
        )
        for f in found.missing
    ]


def _outside(placements: Sequence[Placement], path: Path) -> list[Diagnostic]:
    return [
        Diagnostic(
            "AF524",
            "weights-outside-outdir",
            Severity.WARNING,
            f"weights file {p.source} cannot be hard-linked into the output directory "
            f"(another filesystem); the fused model references it as {p.new_location}, "
            "which onnx.checker and onnxruntime refuse",
            Location(str(path)),
            "pass --copy-weights, or write to an output directory on the weights' filesystem",
        )
        for p in placements
        if p.how == "outside"
    ]


def _check_in_memory(fused: onnx.ModelProto, proto: onnx.ModelProto | None, path: Path) -> None:
    """onnx.checker (full_check) on the fused graph; the weights' files are checked on
    the written model's path (``write_outputs``). ``proto``: the input model, read again
    from ``path`` when None (rewritten in place) and only if the check fails."""
    from ruleengine.graph import onnxlite  # onnx's checker without importing onnx (0.6 s)
    from ruleengine.graph.loader import read_model
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import INLINE_LIMIT_BYTES
    from ruleengine.rewrite.onnx_rewrite import RewriteError

    try:
        onnxlite.check_model(weights.checkable(fused, INLINE_LIMIT_BYTES), full_check=True)
    except Exception as exc:  # noqa: BLE001 - a checker failure is our bug; say so
        if proto is None:
            proto = read_model(path)
        try:  # ... unless the input model fails it already: then the input is at fault
            onnxlite.check_model(weights.checkable(proto, INLINE_LIMIT_BYTES), full_check=True)
        except Exception as original:  # noqa: BLE001 - any checker failure
            first = str(original).strip().splitlines()[0] if str(original).strip() else ""
            raise GraphLoadError(
                f"the input model {path.name} fails onnx.checker ({first}), so no "
                "fused model written from it can pass",
                (
                    Diagnostic(
                        "AF501",
                        "unreadable-model",
                        Severity.ERROR,
                        f"onnx.checker: {first}",
                        Location(str(path)),
                        'fix the model (python -c "import onnx; '
                        "onnx.checker.check_model('MODEL', full_check=True)\" shows "
                        "what is wrong) and fuse again",
                    ),
                ),
            ) from None
        raise RewriteError(f"the fused model fails onnx.checker: {exc}") from None


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".onnx")] if name.endswith(".onnx") else path.stem


def write_outputs(result: FuseResult, outdir: str | Path) -> tuple[Path, ...]:
    """Write every file of a fuse run atomically under ``outdir`` (never the input model),
    hard-link or copy the weights there, then run onnx.checker on the written model's path
    when all its weights resolve from ``outdir``."""
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import serialize_model, write_atomically

    files = dict(result.files)
    placements = result.placements
    if (
        result.weights is not None
        and result.weights.files
        and (result.outdir is None or Path(outdir).resolve() != result.outdir.resolve())
    ):  # rendered for another directory: re-point the weight references
        name = result.fused_name
        placements = weights.place(
            result.weights, outdir, copy=result.copy_weights, reserved=_reserved(name, result.plan)
        )
        files.update(serialize_model(result.fused_model, name, placements))
    sources = {p.new_location: (p.source, p.how) for p in placements if p.how in ("link", "copy")}
    written = write_atomically(outdir, files, protect=(result.model_path,), sources=sources)
    model_files = [k for k in files if k == result.fused_name or k == f"{result.fused_name}.data"]
    checked = result.plan.verification is None or result.plan.verification.ok
    if checked and model_files == [result.fused_name] and not placements:
        # one file, no external data: its bytes are the model onnx.checker passed in
        # memory (``fuse``), nothing more to resolve from its path
        return written
    if all(p.how in ("inside", "copy") for p in placements) and not _hard_linked(
        outdir, placements
    ):
        # onnx.checker refuses hard-linked data (a "hardlink attack" to onnx >= 1.18) and
        # data outside the folder; onnxruntime loads hard links.
        _check_on_path(Path(outdir) / result.fused_name)
    return written


def _hard_linked(outdir: str | Path, placements: Sequence[Placement]) -> bool:
    """Whether a weights file the fused model references from ``outdir`` has more than one
    name: a link an earlier run made (placed ``inside`` when fusing into the same folder
    again) or one the user made. onnx.checker refuses those on the path as it refuses a
    link made now; the graph was checked in memory all the same."""
    root = Path(outdir)
    for p in placements:
        try:
            if os.stat(root / p.new_location).st_nlink > 1:
                return True
        except OSError:  # absent: the path check says so
            continue
    return False


def _check_on_path(model: Path) -> None:
    """onnx.checker on the written file: its external data must resolve from its folder."""
    from ruleengine.graph import onnxlite
    from ruleengine.rewrite.onnx_rewrite import RewriteError

    try:
        onnxlite.check_model_path(str(model), full_check=True)
    except Exception as exc:  # noqa: BLE001 - our bug: the in-memory check passed
        raise RewriteError(f"the written fused model {model} fails onnx.checker: {exc}") from None
