"""The one orchestrator: calls each stage with the previous stage's immutable output.

Stages in order, the call of each, and the lap (report.json ``timings_s``) it counts in::

    load rules    rules.pending.PendingRules, select_rules         rules
    load graph    graph.load_graph                                 graph
    match         match.parallel.find_candidates_parallel          match
    cost          cost.score_candidates                            cost
    resolve       resolve.resolve                                  resolve
    (analyze ends here; fuse goes on)
    rejections    rewrite.rejections.list_rejections (compact plan)  plan
    weights       rewrite.weight_checks                            rewrite
    group, bind   rewrite.plan.build_groups, kernels.bind          rewrite
    rewrite       rewrite.onnx_rewrite.rewrite_model               rewrite
    verify        verification.on_fuse.verify_rewrite              verify
    check         rewrite.model_check, rewrite.checking            check
    plan, emit    rewrite.plan.build_plan, emit_files              emit

``analyze_model`` and ``fuse_model`` take one options record (``AnalyzeOptions``,
``FuseOptions``); ``analyze`` and ``fuse`` are their keyword forms. Timing and progress
wrap the stages from outside (``laps.Laps.stage``); a stage that runs in a forked child
beside another is begun before it and finished after it (``Pending*`` objects). ``fuse``
computes every output file in memory; ``write_outputs`` then writes them all atomically.
Nothing here prints: progress goes to an optional callback.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ruleengine.cost.model import ScoredCandidate, Target
from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic
from ruleengine.errors import UsageError
from ruleengine.graph.model import Graph, replaced
from ruleengine.laps import Laps, Progress
from ruleengine.match.model import Candidate, MatchResult
from ruleengine.procs import FORK_FROM_NODES, cores
from ruleengine.resolve.model import Resolution
from ruleengine.rules.model import RuleSet
from ruleengine.runtime import release_memory

if TYPE_CHECKING:
    import onnx

    from ruleengine.kernels.bind import Call
    from ruleengine.kernels.catalog import PendingCatalog
    from ruleengine.rewrite.bodies import BodyFusion
    from ruleengine.rewrite.checking import PendingCheck
    from ruleengine.rewrite.dot import PendingDot
    from ruleengine.rewrite.model import FusedGroup, Plan, Verification
    from ruleengine.rewrite.weights import Placement, WeightSurvey
    from ruleengine.verification import ModeChoice, VerifyOutcome

DEFAULT_TARGET = "ascend910b"
DEFAULT_PRESET = "all"
SOLVERS = ("exact", "greedy")
PLAN_DETAILS = ("compact", "full")
WEIGHT_MODES = ("copy", "share", "link")  # rewrite.weights.MODES (checked there too)


@dataclass(frozen=True)
class AnalyzeOptions:
    """What ``analyze`` decides with: the rules, the target and the solver's limits.

    ``rules`` are rule files or folders (the ``preset`` "all" when neither is given);
    ``enable`` names the rules to keep (all when empty), ``disable`` rules to drop;
    ``benefit_threshold`` raises every rule's threshold to at least this value; ``dims``
    bind symbolic dimensions and ``input_shapes`` set graph inputs' shapes; ``jobs`` is
    the number of processes (default: the cores); ``progress`` receives one line per stage.
    ``kernels`` are catalog folders added to the bundled kernels/: a candidate no form of
    its kernel accepts is never chosen (verdict ``contract_mismatch``).
    """

    rules: Sequence[str | Path] = ()
    preset: str | None = None
    target: str | Target = DEFAULT_TARGET
    solver: str = "exact"
    dims: Mapping[str, int] | None = None
    input_shapes: Mapping[str, Sequence[int]] | None = None
    enable: Sequence[str] = ()
    disable: Sequence[str] = ()
    benefit_threshold: float | None = None
    time_limit_s: float = 30.0
    jobs: int | None = None
    progress: Progress | None = field(default=None, compare=False)
    kernels: Sequence[str | Path] = ()  # catalog folders added to the bundled kernels/

    @property
    def processes(self) -> int:
        """The processes a stage may use: ``jobs``, else the cores."""
        return cores() if self.jobs is None else self.jobs

    def check(self) -> None:
        """Refuse values out of range (the CLI checks its flags; the API too)."""
        if self.solver not in SOLVERS:
            raise UsageError(f"unknown solver {self.solver!r}; choose one of {', '.join(SOLVERS)}")
        threshold = self.benefit_threshold
        if threshold is not None and not 0.0 <= threshold <= 1.0:  # NaN too
            raise _out_of_range(
                f"benefit threshold {threshold} is not a fraction between 0 and 1 "
                "(net saved bytes / unfused bytes, e.g. 0.2)"
            )
        jobs = self.jobs
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise UsageError(f"jobs {jobs!r}: the number of processes is a positive integer")
        if not 0.0 < self.time_limit_s < math.inf:  # NaN too
            raise _out_of_range(
                f"time limit {self.time_limit_s} s must be a positive number of seconds"
            )
        for name, size in (self.dims or {}).items():  # the CLI's parse_dims checks --dim
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size < 1 << 63:
                raise _out_of_range(f"dims[{name!r}] = {size!r}: a dim size is a positive integer")


@dataclass(frozen=True)
class FuseOptions(AnalyzeOptions):
    """``AnalyzeOptions`` and what ``fuse`` does with the decisions.

    ``verify`` defaults to on in ``safe`` mode (which drops failing groups) and off
    otherwise; ``verify_mode`` is auto, whole or per-group; ``inputs`` (.npz) or random
    inputs from ``seed`` feed it. ``outdir`` is where the files will be written (the
    fused model's weight references resolve from there; ``write_outputs`` to another
    directory re-points them); ``weights`` is what happens to an external weights file
    outside it: "copy" (reflink or sparse copy), "share" (referenced where it lies) or
    "link" (a hard link, which onnx >= 1.18 refuses to load); one inside it is shared.
    ``kernels`` are catalog folders added to the bundled kernels/. ``plan_detail``
    "compact" lists a few rejected candidates per (rule, verdict) in plan.json and
    report.txt (sizes bounded by the rule set); "full" lists every one. ``html`` off
    leaves report.html out (model_explorer.json is always written).
    ``corrupt_rules`` is a test-only hook (docs/fuse.md): those rules' function bodies
    are deliberately wrong. ``safe_rounds``: in safe mode, how many times at most the
    plan is verified, its failing groups dropped and the solver run again without them.
    """

    verify: bool | None = None
    safe: bool = False
    inputs: str | Path | None = None
    seed: int = 0
    verify_mode: str = "auto"
    outdir: str | Path | None = None
    weights: str = "copy"
    kernels: Sequence[str | Path] = ()
    corrupt_rules: Sequence[str] = ()
    plan_detail: str = "compact"
    html: bool = True  # report.html beside report.txt (--no-html: off)
    safe_rounds: int = 8  # safe mode: verify-drop-solve rounds at most (SAFE_ROUNDS)

    @property
    def verifying(self) -> bool:
        return self.safe if self.verify is None else self.verify

    @property
    def analyze_options(self) -> AnalyzeOptions:
        """The options ``analyze`` reads."""
        return AnalyzeOptions(**{f.name: getattr(self, f.name) for f in fields(AnalyzeOptions)})

    def check(self) -> None:
        """fuse's own options (``analyze_model`` checks the rest, after the catalog
        began: a bad --kernels folder is reported first)."""
        if self.plan_detail not in PLAN_DETAILS:
            raise UsageError(f"unknown plan detail {self.plan_detail!r}; choose compact or full")
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 63:
            raise _out_of_range(f"seed {seed!r} must be an integer from 0 to 2^63-1")
        if self.safe and self.verify is False:
            raise UsageError("--safe needs verification; drop --no-verify")
        rounds = self.safe_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise _out_of_range(f"safe_rounds {rounds!r}: the rounds are a positive integer")
        if self.weights not in WEIGHT_MODES:
            raise UsageError(
                f"unknown weights mode {self.weights!r}; choose {', '.join(WEIGHT_MODES)}"
            )


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
    weights_mode: str = "copy"  # FuseOptions.weights

    @property
    def weight_files(self) -> tuple[str, ...]:
        """The weights files written into OUTDIR (copies, links), relative to it."""
        return tuple(p.new_location for p in self.placements if p.how in ("link", "copy"))

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
_T = TypeVar("_T")


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


# ----------------------------------------------------------------------------- analyze


def analyze(model: str | Path, rules: Sequence[str | Path] = (), **options: Any) -> Analysis:
    """``analyze_model`` with the fields of ``AnalyzeOptions`` as keywords."""
    return analyze_model(model, AnalyzeOptions(rules=rules, **options))


@_gc_paused
def analyze_model(
    model: str | Path,
    options: AnalyzeOptions,
    *,
    check_rules: Callable[[RuleSet], None] | None = None,
    catalog: PendingCatalog | None = None,
) -> Analysis:
    """Load, match, cost and resolve: every decision, nothing rewritten.

    ``check_rules`` (``fuse``'s checks against the kernel catalog) runs on the selected
    rules before anything is matched. ``catalog``: the kernel catalog being loaded
    (default: the bundled one and ``options.kernels``), which costing consults.
    """
    from ruleengine.cost import score_candidates
    from ruleengine.graph import load_graph
    from ruleengine.kernels.catalog import PendingCatalog
    from ruleengine.match.parallel import find_candidates_parallel
    from ruleengine.resolve import resolve

    options.check()
    laps = Laps(progress=options.progress)
    if catalog is None:
        catalog = PendingCatalog(options.kernels, options.processes)
    with laps.stage("rules", "loading rules"):
        rules = _RulesBesideGraph(model, options, check_rules)
        target = rules.first_on_error(_load_target, options.target)
    with laps.stage("graph", f"loading model {Path(model).name}"):
        graph = rules.first_on_error(
            load_graph, model, options.dims or {}, options.input_shapes, jobs=options.jobs
        )
        rule_set = rules.result(laps)
    rule_names, nodes = len(rule_set.rules), len(graph.nodes)
    with laps.stage("match", f"matching {rule_names} rules on {nodes} nodes"):
        match = find_candidates_parallel(graph, rule_set, options.processes)
        release_memory()  # the matcher's working set is freed: its pages go back
    with laps.stage("cost", f"costing {len(match.candidates)} candidates on {target.name}"):
        scored = score_candidates(graph, match, rule_set, target, catalog=catalog.result())
    with laps.stage("resolve", f"resolving conflicts ({options.solver})"):
        resolution = resolve(
            graph,
            scored,
            solver=options.solver,
            time_limit_s=options.time_limit_s,
            # the greedy hint in a forked child beside the components (a large graph only)
            jobs=options.processes if nodes >= FORK_FROM_NODES else 1,
        )
    return Analysis(rule_set, graph, target, match, scored, resolution, *laps.timings())


def _load_target(target: str | Target) -> Target:
    from ruleengine.cost import load_target

    return target if isinstance(target, Target) else load_target(target)


class _RulesBesideGraph:
    """The rules, selected and checked. With a core to spare beside the model's reading
    (``rules_jobs``) a forked child loads them while this process reads the model; they
    are finished once the model is read, and their errors still come first."""

    def __init__(
        self,
        model: str | Path,
        options: AnalyzeOptions,
        check: Callable[[RuleSet], None] | None,
    ) -> None:
        from ruleengine.rules.pending import PendingRules, rules_jobs

        preset = options.preset
        if not options.rules and preset is None:
            preset = DEFAULT_PRESET
        self._options, self._check = options, check
        self._pending = PendingRules(options.rules, preset, rules_jobs(model, options.processes))
        self._rule_set = None if self._pending.forked else self._finish()

    def _finish(self) -> RuleSet:
        options = self._options
        rule_set = select_rules(self._pending.result(), options.enable, options.disable)
        floor = options.benefit_threshold
        if floor is not None:
            rule_set = replace(
                rule_set,
                rules=tuple(
                    replace(r, benefit_threshold=max(r.benefit_threshold, floor))
                    for r in rule_set.rules
                ),
            )
        if self._check is not None:
            self._check(rule_set)
        return rule_set

    def first_on_error(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)``; should it fail while the rules load in a child, a
        rule's error comes first, as when they load first."""
        try:
            return fn(*args, **kwargs)
        except Exception:
            if self._rule_set is None:
                self._finish()
            raise

    def result(self, laps: Laps) -> RuleSet:
        """The rule set; a child's work (and this process's finishing of it, which runs
        in the rules' lap when nothing is forked) is counted in the rules' lap."""
        if self._rule_set is None:
            self._rule_set = laps.reaped("rules", self._finish, lambda: self._pending.seconds)
        return self._rule_set


# -------------------------------------------------------------------------------- fuse


def fuse(model: str | Path, rules: Sequence[str | Path] = (), **options: Any) -> FuseResult:
    """``fuse_model`` with the fields of ``FuseOptions`` as keywords."""
    return fuse_model(model, FuseOptions(rules=rules, **options))


@dataclass(frozen=True)
class _Bound:
    """The chosen candidates as numbered groups, bound to their kernels."""

    groups: tuple[FusedGroup, ...]
    calls: Mapping[int, Call]
    unbound: frozenset[int]  # groups that do not fit their kernel's contract
    dot: PendingDot | None  # the DOT graph begun in a forked child (no verification)
    warnings: tuple[Diagnostic, ...]  # the unbound groups, when nothing verifies
    bodies: BodyFusion | None = None  # the groups inside If/Loop/Scan bodies

    def with_bodies(self, groups: Sequence[FusedGroup]) -> tuple[FusedGroup, ...]:
        """``groups`` (the top level's) and the groups inside bodies after them."""
        return tuple(groups) if self.bodies is None else (*groups, *self.bodies.groups)


@_gc_paused
def fuse_model(model: str | Path, options: FuseOptions) -> FuseResult:
    """Decide, rewrite, verify and render a fused model; returns every output in memory.

    No weight byte is read unless verification runs.
    """
    from ruleengine.kernels.catalog import PendingCatalog
    from ruleengine.verification import mark_verified
    from ruleengine.verification.safe import safe_warnings

    options.check()
    path = Path(model)
    # the bundled catalog loads in a forked child beside the rules (``PendingCatalog``)
    catalog = PendingCatalog(options.kernels, options.processes)
    checks = functools.partial(_fuse_checks, catalog=catalog)
    analysis = analyze_model(path, options.analyze_options, check_rules=checks, catalog=catalog)
    laps = Laps(analysis.timings, analysis.cpu_timings, options.progress)
    listed = None
    if options.plan_detail == "compact" and not options.safe:  # safe mode may solve again
        with laps.stage("plan"):
            listed, analysis = _listed_then_released(analysis)
            release_memory()
    graph = analysis.graph
    # reading the model and binding the groups count in the rewrite's lap
    original, found, warnings, choice = _read_input(path, graph, options)
    bound = _bind(analysis, catalog, path, options)
    with laps.stage("rewrite", f"rewriting {len(bound.groups)} groups"):
        fused = _rewrite(original, graph, bound, options, in_place=choice is None)
        if choice is None:  # nothing reads the input model again: rewritten in place
            original = None
        bound = _in_bodies(path, fused, analysis, catalog, options, bound)
    groups, dropped, verification = bound.with_bodies(bound.groups), (), None
    if choice is not None:
        with laps.stage("verify", "verifying in onnxruntime"):
            outcome = _verify(path, original, fused, graph, bound, found, choice, options)
            if options.safe:
                rounds = _SafeRounds(path, original, found, choice, catalog, options)
                analysis, bound, outcome = rounds.run(analysis, bound, outcome)
        groups, dropped, fused = bound.with_bodies(outcome.groups), outcome.dropped, outcome.fused
        verification = outcome.verification
    if listed is None and options.plan_detail == "compact":
        with laps.stage("plan"):
            listed, analysis = _listed_then_released(analysis)
    with laps.stage("check", "checking the fused model"):
        checking, verification = _check(fused, original, path, verification, options, graph)
    # The input model is read no more (it only served verification): its memory goes
    # back before the plan and the output files are rendered.
    original = None
    release_memory()
    groups = _named(mark_verified(groups, verification), fused, bound)
    plan = _build_plan(path, analysis, groups, dropped, verification, listed, laps, bound)
    warnings = (*warnings, *safe_warnings(plan))
    with laps.stage("emit"):
        files, placements, outside = emit_files(
            plan,
            fused,
            graph,
            found,
            path=path,
            options=options,
            before_reports=_awaiting(checking, fused, path, laps),
            dot=bound.dot,
        )
    return FuseResult(
        analysis,
        replace(plan, timings=tuple(laps.wall), cpu_timings=tuple(laps.cpu)),
        groups,
        fused,
        files,
        path,
        weights=found,
        placements=placements,
        warnings=(*warnings, *bound.warnings, *outside),
        outdir=_outdir(path, options),
        weights_mode=options.weights,
    )


class _SafeRounds:
    """``--safe`` that keeps the best correct plan: the groups that fail verification are
    dropped and their candidates excluded, and the solver runs again on the same scored
    records (nothing matched or costed again), so overlapping candidates take their
    place; the new plan is bound, rewritten and verified in turn, until nothing fails or
    ``options.safe_rounds`` rounds have run (the last round's failures are then dropped
    without solving again). Each round is recorded (``verification.rounds``)."""

    def __init__(
        self,
        path: Path,
        original: onnx.ModelProto,
        found: WeightSurvey,
        choice: ModeChoice,
        catalog: PendingCatalog,
        options: FuseOptions,
    ) -> None:
        self.path, self.original, self.found, self.choice = path, original, found, choice
        self.catalog, self.options = catalog, options
        self.sets: set[tuple[frozenset[str], tuple]] = set()  # excluded: node set, key
        self.revived: dict[tuple, ScoredCandidate] = {}  # duplicates made viable, by key

    def run(
        self, analysis: Analysis, bound: _Bound, outcome: VerifyOutcome
    ) -> tuple[Analysis, _Bound, VerifyOutcome]:
        """The analysis (its resolution the last solve's), groups and outcome that stand."""
        from ruleengine.verification.safe import safe_round, with_rounds

        rounds, excluded, dropped = [], set(), []
        for number in range(1, self.options.safe_rounds + 1):
            net = analysis.resolution.objective
            if not outcome.dropped:
                rounds.append(safe_round(outcome, number, net, "passed"))
                break
            dropped += outcome.dropped
            excluded.update(g.scored.candidate.key for g in outcome.dropped)
            self.sets.update((frozenset(g.nodes), g.scored.candidate.key) for g in outcome.dropped)
            if number == self.options.safe_rounds:
                rounds.append(safe_round(outcome, number, net, "round limit"))
                break
            analysis = replace(analysis, resolution=self._solve(analysis, excluded))
            again = {s.candidate.key for s in analysis.resolution.chosen}
            if again == {g.scored.candidate.key for g in outcome.groups}:
                rounds.append(safe_round(outcome, number, net, "kept"))
                break
            rounds.append(safe_round(outcome, number, net, "re-solved"))
            bound, outcome = self._verify(analysis)
        verification = with_rounds(outcome.verification, rounds)
        outcome = replace(outcome, dropped=tuple(dropped), verification=verification)
        return self._scored(analysis), bound, outcome

    def _solve(self, analysis: Analysis, excluded: set[tuple]) -> Resolution:
        from ruleengine.resolve import resolve

        options = self.options
        if options.progress is not None:
            options.progress(f"safe mode: solving again without {len(excluded)} candidate(s)")
        nodes = len(analysis.graph.nodes)
        return resolve(
            analysis.graph,
            analysis.scored,
            solver=options.solver,
            time_limit_s=options.time_limit_s,
            jobs=options.processes if nodes >= FORK_FROM_NODES else 1,
            exclude=excluded,
            revive=self._revive(analysis.scored),
        )

    def _revive(self, scored: Sequence[ScoredCandidate]) -> list[ScoredCandidate]:
        revived = _revived(scored, self.sets)
        self.revived.update((s.candidate.key, s) for s in revived)
        return revived

    def _scored(self, analysis: Analysis) -> Analysis:
        """The analysis whose records hold the revived duplicates that were chosen as
        viable (the plan then lists them as fused, not as duplicates)."""
        chosen = {s.candidate.key for s in analysis.resolution.chosen}
        swap = {k: s for k, s in self.revived.items() if k in chosen}
        if not swap:
            return analysis
        scored = [swap.get(s.candidate.key, s) for s in analysis.scored]
        return replace(analysis, scored=scored)

    def _verify(self, analysis: Analysis) -> tuple[_Bound, VerifyOutcome]:
        """The new plan bound, rewritten (the input model kept for the next round) and
        verified in safe mode."""
        path, options, graph = self.path, self.options, analysis.graph
        bound = _bind(analysis, self.catalog, path, options)
        fused = _rewrite(self.original, graph, bound, options, in_place=False)
        bound = _in_bodies(path, fused, analysis, self.catalog, options, bound)
        outcome = _verify(
            path, self.original, fused, graph, bound, self.found, self.choice, options
        )
        return bound, outcome


def _revived(
    scored: Sequence[ScoredCandidate], excluded: set[tuple[frozenset[str], tuple]]
) -> list[ScoredCandidate]:
    """Per node set of an excluded candidate, the best duplicate (cost's ``duplicate``
    verdict: the same nodes, a lower priority) not excluded itself, made viable again:
    the excluded candidate it lost to is gone, so it may be fused instead."""
    from ruleengine.cost.lazy import relabel
    from ruleengine.cost.model import Verdict
    from ruleengine.cost.scored import VERDICT_ID, ScoredRecords

    if not excluded:
        return []
    sets = {nodes for nodes, _ in excluded}
    keys = {key for _, key in excluded}
    if isinstance(scored, ScoredRecords):
        dup = (scored.verdicts == VERDICT_ID[Verdict.DUPLICATE]) & scored.costed
        at = [int(p) for p in dup.nonzero()[0]]
        records = [scored.record(p) for p in at if frozenset(scored.candidate(p).nodes) in sets]
    else:
        records = [
            s
            for s in scored
            if s.verdict is Verdict.DUPLICATE
            and s.cost is not None
            and frozenset(s.candidate.nodes) in sets
        ]
    best: dict[frozenset[str], ScoredCandidate] = {}
    for s in sorted(records, key=lambda s: (-s.priority, s.candidate.key)):
        if s.candidate.key not in keys:
            best.setdefault(frozenset(s.candidate.nodes), s)
    why = "revived by --safe: the candidate it duplicated failed verification"
    return [relabel(s, Verdict.FUSE, "fuse", f"{why} ({s.reason})") for s in best.values()]


def _fuse_checks(rule_set: RuleSet, *, catalog: PendingCatalog) -> None:
    """A rule whose rewrite contradicts its kernel's contract cannot be fused (check
    reports the same errors), nor one whose output path leaves OUTDIR."""
    from ruleengine.kernels.contracts import check_rule_contracts
    from ruleengine.rewrite.plan import check_output_paths

    check_rule_contracts(rule_set, catalog.result())
    check_output_paths(rule_set)


def _listed_then_released(analysis: Analysis) -> tuple[Any, Analysis]:
    """What the compact plan lists and counts, read now; then the analysis without the
    per-candidate records (10^6 at 2048 layers), let go before the model is read and
    rewritten, so the peak of memory is not their sum."""
    from ruleengine.rewrite.rejections import list_rejections

    listed = list_rejections(
        analysis.scored, analysis.resolution.lost, analysis.match, from_cost=True
    )
    return listed, analysis.released()


def _read_input(
    path: Path, graph: Graph, options: FuseOptions
) -> tuple[onnx.ModelProto, WeightSurvey, tuple[Diagnostic, ...], ModeChoice | None]:
    """The input model's graph (fusion changes no weight: none is read), the survey of
    its weight files with their warnings, and the verification mode (None: no
    verification), refused now when the run cannot fit, before anything else is done."""
    from ruleengine.graph.loader import read_model
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.weight_checks import (
        check_weight_files,
        missing_weights,
        require_weights,
    )

    proto = read_model(path)
    found = weights.survey(proto, path)
    check_weight_files(found, path)
    warnings = missing_weights(found, path)
    choice = None
    if options.verifying:
        from ruleengine.verification import choose_mode

        require_weights(found, path)
        choice = choose_mode(graph, found, options.verify_mode, str(path))
    return proto, found, warnings, choice


def _bind(analysis: Analysis, catalog: PendingCatalog, path: Path, options: FuseOptions) -> _Bound:
    """Number the chosen candidates and bind each group to its kernel."""
    from ruleengine.kernels.bind import bind_groups
    from ruleengine.rewrite.dot import PendingDot
    from ruleengine.rewrite.plan import build_groups
    from ruleengine.verification import unbound_warnings

    graph = analysis.graph
    groups = build_groups(graph, analysis.resolution.chosen, analysis.rule_set)
    # without verification no group is dropped: the DOT graph of these groups (what it
    # shows is final here) renders in a forked child beside binding and the rewrite
    dot = None if options.verifying else PendingDot(graph, groups, options.processes)
    groups, calls = bind_groups(graph, groups, analysis.rule_set, catalog.result())
    unbound = frozenset(
        g.id for g in groups if g.contract is not None and g.contract.status == "unbound"
    )
    warnings = ()
    if not options.verifying:
        warnings = unbound_warnings([g for g in groups if g.id in unbound], path)
    return _Bound(groups, calls, unbound, dot, warnings)


def _rewrite(
    original: onnx.ModelProto, graph: Graph, bound: _Bound, options: FuseOptions, *, in_place: bool
) -> onnx.ModelProto:
    """The fused model: each group one function-call node (``in_place``: ``original``
    itself, for a caller that reads it no more)."""
    from ruleengine.rewrite.onnx_rewrite import rewrite_model

    return rewrite_model(
        original,
        graph,
        bound.groups,
        corrupt_rules=options.corrupt_rules,
        calls=bound.calls,
        in_place=in_place,
    )


def _in_bodies(
    path: Path,
    fused: onnx.ModelProto,
    analysis: Analysis,
    catalog: PendingCatalog,
    options: FuseOptions,
    bound: _Bound,
) -> _Bound:
    """``bound`` with the groups decided and rewritten inside the If/Loop/Scan bodies of
    ``fused`` (``rewrite.bodies``; in place), their ids after the top level's. A model
    without bodies is not looked at again."""
    from ruleengine.graph.scopes import has_bodies
    from ruleengine.rewrite.bodies import Decider, bound_model, fuse_bodies
    from ruleengine.verification import unbound_warnings

    if not analysis.graph.opaque_nodes or not has_bodies(fused):
        return bound
    decider = Decider(
        analysis.rule_set, analysis.target, catalog.result(), options.solver, options.time_limit_s
    )
    model = bound_model(path, options.dims, options.input_shapes)
    bodies = fuse_bodies(fused, model, decider, len(bound.groups) + 1)
    warnings = bound.warnings
    if not options.verifying:
        unfit = [g for g in bodies.groups if g.contract is not None]
        unfit = [g for g in unfit if g.contract.status == "unbound"]
        warnings = (*warnings, *unbound_warnings(unfit, path))
    return replace(bound, bodies=bodies, warnings=warnings)


def _verify(
    path: Path,
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    bound: _Bound,
    found: WeightSurvey,
    choice: ModeChoice,
    options: FuseOptions,
) -> VerifyOutcome:
    from ruleengine.verification.on_fuse import verify_rewrite

    return verify_rewrite(
        path=path,
        original=original,
        fused=fused,
        graph=graph,
        groups=bound.groups,
        calls=bound.calls,
        corrupt_rules=options.corrupt_rules,
        weights=found,
        choice=choice,
        inputs=options.inputs,
        seed=options.seed,
        safe=options.safe,
        unbound=bound.unbound,
        progress=options.progress,
        bodies=None if bound.bodies is None else bound.bodies.reapply,
        body_groups=() if bound.bodies is None else bound.bodies.groups,
    )


def _check(
    fused: onnx.ModelProto,
    original: onnx.ModelProto | None,
    path: Path,
    verification: Verification | None,
    options: FuseOptions,
    graph: Graph,
) -> tuple[PendingCheck | None, Verification | None]:
    """onnx.checker on the fused model: without verification in a forked child beside
    the emit (``_awaiting``) where worth it, else here; a failure after a failed
    verification is part of it."""
    from ruleengine.rewrite.checking import start_check
    from ruleengine.rewrite.model_check import check_in_memory
    from ruleengine.rewrite.onnx_rewrite import RewriteError
    from ruleengine.verification.on_fuse import with_check_failure

    if not options.verifying:
        checking = start_check(fused, options.processes, len(graph.nodes))
        if checking is not None:
            return checking, verification
    try:
        check_in_memory(fused, original, path)
    except RewriteError as exc:
        verification = with_check_failure(verification, exc)
    return None, verification


def _awaiting(
    checking: PendingCheck | None, fused: onnx.ModelProto, path: Path, laps: Laps
) -> Callable[[Plan], Plan]:
    """The plan the reports are rendered from: with the forked check's verdict awaited
    (its failure raises the in-process check's error) and its seconds in the laps."""
    from ruleengine.rewrite.model_check import check_in_memory

    def checked(plan: Plan) -> Plan:
        if checking is None:
            return plan
        times = checking.passed()
        if times is None:  # it failed: the in-process check raises its error
            check_in_memory(fused, None, path)
        else:
            laps.beside("check", *times)
        return replace(plan, timings=tuple(laps.wall), cpu_timings=tuple(laps.cpu))

    return checked


def _named(
    groups: Sequence[FusedGroup], fused: onnx.ModelProto, bound: _Bound
) -> tuple[FusedGroup, ...]:
    """Each group with the name and overload of its node in the fused model (a body's:
    as its scope's rewrite named it)."""
    from ruleengine.rewrite.onnx_rewrite import fused_nodes

    called = fused_nodes(fused)
    if bound.bodies is not None:
        called.update(bound.bodies.named)
    return tuple(
        replaced(g, node_name=called[g.id][0], overload=called[g.id][1]) if g.id in called else g
        for g in groups
    )


def _build_plan(
    path: Path,
    analysis: Analysis,
    groups: tuple[FusedGroup, ...],
    dropped: tuple[FusedGroup, ...],
    verification: Verification | None,
    listed: Any,
    laps: Laps,
    bound: _Bound,
) -> Plan:
    from ruleengine.rewrite.bodies import plan_with_bodies
    from ruleengine.rewrite.plan import build_plan

    plan = build_plan(
        model_sha256=_sha256(path),
        model_name=path.name,
        graph=analysis.graph,
        rule_set=analysis.rule_set,
        target=analysis.target,
        match=analysis.match,
        scored=analysis.scored,
        resolution=analysis.resolution,
        groups=groups,
        dropped=dropped,
        verification=verification,
        timings=laps.wall,
        cpu_timings=laps.cpu,
        listed=listed,
    )
    return plan if bound.bodies is None else plan_with_bodies(plan, bound.bodies)


def emit_files(
    plan: Plan,
    fused: onnx.ModelProto,
    graph: Graph,
    found: WeightSurvey,
    *,
    path: Path,
    options: FuseOptions,
    before_reports: Callable[[Plan], Plan] | None = None,
    dot: PendingDot | None = None,
) -> tuple[dict[str, bytes], tuple[Placement, ...], tuple[Diagnostic, ...]]:
    """Every output file of a fuse run, keyed by path relative to OUTDIR: the fused model
    (its weights placed for ``options.outdir``), then ``render_files``' plan.json,
    graph.dot/svg, report.txt/json and the rules' own outputs, and ``render_report_files``'
    report.html and model_explorer.json. A new output goes here.

    Also returns the placements and the AF524 warnings of weights left outside OUTDIR."""
    from ruleengine.report import render_report_files
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import render_files, serialize_model
    from ruleengine.rewrite.weight_checks import outside_outdir

    fused_name = f"{_stem(path)}.fused.onnx"
    placements = weights.place(
        found,
        _outdir(path, options),
        mode=options.weights,
        reserved=_reserved(fused_name, plan),
    )
    shown = render_report_files(plan, graph, detail=options.plan_detail, html=options.html)
    files = render_files(
        plan=plan,
        fused_model_files=serialize_model(fused, fused_name, placements),
        graph=graph,
        extra_names=tuple(shown),
        weight_files=tuple(p.new_location for p in placements if p.how in ("link", "copy")),
        detail=options.plan_detail,
        before_reports=before_reports,
        dot=dot,
    )
    # report.html and model_explorer.json (ruleengine/report) before report.txt and
    # report.json, in the order report.txt lists them
    reports = {name: files.pop(name) for name in ("report.txt", "report.json")}
    files.update(shown)
    files.update(reports)
    return files, placements, outside_outdir(placements, path)


def _outdir(path: Path, options: FuseOptions) -> Path:
    """The directory the files are rendered for (the model's own by default)."""
    return Path(options.outdir) if options.outdir is not None else path.parent


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _reserved(fused_name: str, plan: Plan) -> tuple[str, ...]:
    """OUTDIR paths the fuse outputs take (a linked weights file must not take them)."""
    names = [fused_name, f"{fused_name}.data", "plan.json", "graph.dot", "graph.svg"]
    names += ["report.txt", "report.json", "report.html", "model_explorer.json"]
    for g in plan.groups:
        if g.kernel.file_path:
            names.append(f"{g.kernel.file_path}/{g.kernel.kernel_name}.kernel.json")
    return tuple(names)


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".onnx")] if name.endswith(".onnx") else path.stem


# ------------------------------------------------------------------------------- write


def write_outputs(
    result: FuseResult, outdir: str | Path, *, progress: Progress | None = None
) -> tuple[Path, ...]:
    """Write every file of a fuse run atomically under ``outdir`` (never the input model),
    copy (or link) the weights there as the run decided, then run onnx.checker on the
    written model's path when all its weights resolve from ``outdir``. ``progress`` gets
    lines while a large weights file is copied."""
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import serialize_model, write_atomically
    from ruleengine.rewrite.model_check import check_on_path, hard_linked

    files = dict(result.files)
    placements = result.placements
    if (
        result.weights is not None
        and result.weights.files
        and (result.outdir is None or Path(outdir).resolve() != result.outdir.resolve())
    ):  # rendered for another directory: re-point the weight references
        name = result.fused_name
        placements = weights.place(
            result.weights, outdir, mode=result.weights_mode, reserved=_reserved(name, result.plan)
        )
        files.update(serialize_model(result.fused_model, name, placements))
    sources = {
        p.new_location: weights.WeightSource(p.source, p.how, progress)
        for p in placements
        if p.how in ("link", "copy")
    }
    written = write_atomically(outdir, files, protect=(result.model_path,), sources=sources)
    model_files = [k for k in files if k == result.fused_name or k == f"{result.fused_name}.data"]
    checked = result.plan.verification is None or result.plan.verification.ok
    if checked and model_files == [result.fused_name] and not placements:
        # one file, no external data: its bytes are the model onnx.checker passed in
        # memory (``fuse``), nothing more to resolve from its path
        return written
    if all(p.how in ("inside", "copy") for p in placements) and not hard_linked(outdir, placements):
        # onnx.checker refuses hard-linked data (a "hardlink attack" to onnx >= 1.18) and
        # data outside the folder; onnxruntime loads hard links.
        check_on_path(Path(outdir) / result.fused_name)
    return written
