"""The one orchestrator: calls each stage with the previous stage's immutable output.

load rules -> load graph -> match -> cost -> resolve  (``analyze``)
           -> group -> rewrite ONNX -> verify (safe mode: bisect) -> plan -> render (``fuse``)

``fuse`` computes every output file in memory; ``write_outputs`` then writes them all
atomically. Nothing here prints: progress goes to an optional callback.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ruleengine.cost.model import ScoredCandidate, Target
from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import GraphLoadError, UsageError
from ruleengine.graph.model import Graph
from ruleengine.match.model import Candidate, MatchResult
from ruleengine.resolve.model import Resolution
from ruleengine.rules.model import RuleSet

if TYPE_CHECKING:
    import onnx

    from ruleengine.rewrite.model import FusedGroup, Plan

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
    scored: tuple[ScoredCandidate, ...]
    resolution: Resolution
    timings: tuple[tuple[str, float], ...] = field(default=())

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.match.candidates


@dataclass(frozen=True)
class FuseResult:
    """A finished fuse run, held in memory: nothing is written until ``write_outputs``."""

    analysis: Analysis
    plan: Plan
    groups: tuple[FusedGroup, ...]  # the groups in the fused model (after safe mode)
    fused_model: onnx.ModelProto
    files: Mapping[str, bytes]  # path relative to OUTDIR -> bytes
    model_path: Path

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


def _note(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


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
    progress: Progress | None = None,
    _check_rules: Callable[[RuleSet], None] | None = None,
) -> Analysis:
    """Load, match, cost and resolve: every decision, nothing rewritten.

    ``benefit_threshold`` raises every rule's threshold to at least this value.
    """
    from ruleengine.cost import load_target, score_candidates
    from ruleengine.graph import load_graph
    from ruleengine.match import find_candidates
    from ruleengine.resolve import resolve
    from ruleengine.rules import load_rule_set

    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if benefit_threshold is not None and not 0.0 <= benefit_threshold <= 1.0:  # NaN too
        raise UsageError(
            f"benefit threshold {benefit_threshold} is not a fraction between 0 and 1 "
            "(net saved bytes / unfused bytes, e.g. 0.2)"
        )
    if not 0.0 < time_limit_s < math.inf:  # NaN too
        raise UsageError(f"time limit {time_limit_s} s must be a positive number of seconds")
    for name, size in (dims or {}).items():  # the CLI's parse_dims checks --dim; the API too
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size < 1 << 63:
            raise UsageError(f"dims[{name!r}] = {size!r}: a dim size is a positive integer")
    if not rules and preset is None:
        preset = DEFAULT_PRESET
    timings: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings.append((stage, now - clock))
        clock = now

    _note(progress, "loading rules")
    rule_set = select_rules(load_rule_set(rules, preset=preset), enable, disable)
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
    tgt = target if isinstance(target, Target) else load_target(target)
    lap("rules")
    _note(progress, f"loading model {Path(model).name}")
    graph = load_graph(model, dims or {}, input_shapes)
    lap("graph")
    _note(progress, f"matching {len(rule_set.rules)} rules on {len(graph.nodes)} nodes")
    match = find_candidates(graph, rule_set)
    lap("match")
    _note(progress, f"costing {len(match.candidates)} candidates on {tgt.name}")
    scored = score_candidates(graph, match, rule_set, tgt)
    lap("cost")
    _note(progress, f"resolving conflicts ({solver})")
    resolution = resolve(graph, scored, solver=solver, time_limit_s=time_limit_s)
    lap("resolve")
    return Analysis(rule_set, graph, tgt, match, tuple(scored), resolution, tuple(timings))


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
    progress: Progress | None = None,
    corrupt_rules: Sequence[str] = (),
    plan_detail: str = "compact",
) -> FuseResult:
    """Decide, rewrite, verify and render a fused model; returns every output in memory.

    ``verify`` defaults to on in safe mode and off otherwise. ``corrupt_rules`` is a
    test-only hook (docs/fuse.md): those rules' function bodies are deliberately wrong.
    ``plan_detail`` "compact" lists a few rejected candidates per (rule, verdict) in
    plan.json and report.txt (sizes bounded by the rule set); "full" lists every one.
    """
    if plan_detail not in ("compact", "full"):
        raise UsageError(f"unknown plan detail {plan_detail!r}; choose compact or full")
    import onnx

    from ruleengine.rewrite import verify as verification
    from ruleengine.rewrite.emit import INLINE_LIMIT_BYTES, render_files, serialize_model
    from ruleengine.rewrite.onnx_rewrite import fused_nodes, rewrite_model
    from ruleengine.rewrite.plan import build_groups, build_plan, check_output_paths

    path = Path(model)
    do_verify = safe if verify is None else verify
    if safe and verify is False:
        raise UsageError("--safe needs verification; drop --no-verify")
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
        progress=progress,
        _check_rules=check_output_paths,
    )
    timings = list(analysis.timings)
    clock = time.perf_counter()
    graph = analysis.graph
    from ruleengine.graph.loader import read_model

    proto = read_model(path)  # the rewriter needs the weights (analysis never did)
    external = _uses_external_data(proto)
    try:
        from onnx.external_data_helper import load_external_data_for_model

        if external:
            load_external_data_for_model(proto, str(path.parent))
    except Exception as exc:  # noqa: BLE001 - missing, short or escaping weight files
        why = f"cannot read the external weights of {path.name}: {type(exc).__name__}: {exc}"
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
        ) from None
    groups = build_groups(graph, analysis.resolution.chosen, analysis.rule_set)
    _note(progress, f"rewriting {len(groups)} groups")

    def build(subset: Sequence[FusedGroup]) -> onnx.ModelProto:
        return rewrite_model(proto, graph, subset, corrupt_rules=corrupt_rules)

    fused = build(groups)
    timings.append(("rewrite", time.perf_counter() - clock))
    clock = time.perf_counter()

    result_verification = None
    dropped: tuple[FusedGroup, ...] = ()
    if do_verify:
        _note(progress, "verifying in onnxruntime")
        if inputs is not None:
            feeds = verification.load_inputs(inputs, proto)
            source = Path(inputs).name
        else:
            feeds = verification.make_inputs(proto, seed=seed, dims=graph.bound_dims)
            source = f"random (seed {seed})"
        try:
            reference = verification.run_model(path, feeds)
        except Exception as exc:  # noqa: BLE001 - the original model itself does not run
            why = (
                f"onnxruntime cannot run the original model {path.name} on {source} inputs: "
                f"{verification._short(exc)}"
            )
            hint = (
                "if the model needs particular input values (shapes, axes, indices), pass "
                "them with --inputs FILE.npz; or fuse without --verify/--safe"
                if inputs is None
                else "check the arrays in the inputs file, or fuse without --verify/--safe"
            )
            raise UsageError(
                f"onnxruntime cannot run the original model {path.name}, so nothing to "
                "verify against",
                (
                    Diagnostic(
                        "AF501", "unreadable-model", Severity.ERROR, why, Location(str(path)), hint
                    ),
                ),
            ) from None
        result_verification = verification.verify(reference, fused, feeds, source)
        runs = 1
        found_by: list[str] = []
        if safe and not result_verification.ok and groups:
            # 1. each fused node on its own, fed the original's values: exact and linear
            isolated, extra = verification.isolate_failures(proto, fused, groups, feeds)
            runs += extra
            if isolated:
                found_by.append("isolation check")
                _note(progress, f"safe mode: {len(isolated)} group(s) fail on their own")
                dropped = isolated
                groups = tuple(g for g in groups if g not in isolated)
                fused = build(groups)
                result_verification = verification.verify(reference, fused, feeds, source)
                runs += 1
            # 2. what fails only in combination: bisection over whole-model runs
            if not result_verification.ok and groups:

                def passes(subset: Sequence[FusedGroup]) -> bool:
                    return verification.verify(reference, build(subset), feeds, source).ok

                kept, more, extra = verification.bisect_failures(groups, passes, progress)
                runs += extra
                found_by.append("bisection")
                dropped = (*dropped, *more)
                groups = kept
                fused = build(groups)
                result_verification = verification.verify(reference, fused, feeds, source)
                runs += 1
        result_verification = replace(
            result_verification,
            runs=runs,
            dropped_groups=tuple(sorted(g.id for g in dropped)),
            found_by=" + ".join(found_by) or None,
        )
        timings.append(("verify", time.perf_counter() - clock))
        clock = time.perf_counter()

    _note(progress, "checking the fused model")
    if fused.ByteSize() < INLINE_LIMIT_BYTES:  # larger ones cannot be checked in memory
        try:
            onnx.checker.check_model(fused, full_check=True)
        except Exception as exc:  # noqa: BLE001 - a checker failure is our bug; say so
            from ruleengine.rewrite.onnx_rewrite import RewriteError

            try:  # ... unless the input model fails it already: then the input is at fault
                onnx.checker.check_model(proto, full_check=True)
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
    timings.append(("check", time.perf_counter() - clock))
    clock = time.perf_counter()
    called = fused_nodes(fused)
    groups = tuple(
        replace(g, node_name=called[g.id][0], overload=called[g.id][1]) if g.id in called else g
        for g in groups
    )
    plan = build_plan(
        model_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
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
        timings=timings,
    )
    model_files = serialize_model(fused, f"{_stem(path)}.fused.onnx", external=external)
    files = render_files(plan=plan, fused_model_files=model_files, graph=graph, detail=plan_detail)
    timings.append(("emit", time.perf_counter() - clock))
    plan = replace(plan, timings=tuple(timings))
    return FuseResult(analysis, plan, tuple(groups), fused, files, path)


def _uses_external_data(model: onnx.ModelProto) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".onnx")] if name.endswith(".onnx") else path.stem


def write_outputs(result: FuseResult, outdir: str | Path) -> tuple[Path, ...]:
    """Write every file of a fuse run atomically under ``outdir`` (never the input model)."""
    from ruleengine.rewrite.emit import write_atomically

    return write_atomically(outdir, result.files, protect=(result.model_path,))
