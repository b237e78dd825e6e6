"""Drafted rules that lower coverage are left out or narrowed.

Drafted rules may match node sets outside the partition they were drafted from (a
generalized pattern, another layer's variant), and the selection stage picks such groups
where they save more net bytes, even when they capture fewer fusable bytes. Each round,
the change (a rule left out, or narrowed to a less general draft of its cluster) that
raises coverage most, summed over the models, is made, decided by the real selection
stage over the real candidates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import combinations
from typing import TYPE_CHECKING, NamedTuple

from ruleengine.suggest.analyses import scored_rule
from ruleengine.suggest.beside import beside, may_fork
from ruleengine.suggest.draft_tests import tested, with_kernel
from ruleengine.suggest.model import DraftRule

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate
    from ruleengine.graph.model import Graph
    from ruleengine.pipeline import Analysis

# at most this many rounds of changes
PRUNE_ROUNDS = 12
# Where no single change raises coverage, pairs of rules left out together are tried
# among at most this many rules with stray groups (``_Pruning.best_pair``): 45 pairs.
MAX_PAIR_RULES = 10

# per rule narrowed, per model: the scored candidates of its narrowed draft
Swaps = Mapping[str, Sequence[Sequence["ScoredCandidate"]]]
# a change to try: (kind, rank, draft, narrowing or None: left out), as ``Trial`` has them
TrialSpec = tuple[int, int, DraftRule, "int | None"]


class Trial(NamedTuple):
    """One change tried: sorted by (gain, kind, rank, narrowing), best first."""

    gain: float  # fusable share captured more, summed over the models
    kind: int  # ties: 2 a plain narrowing, 1 leaving the rule out, 0 a pinned narrowing
    rank: int  # minus the rule's rank: the better-ranked rule first
    narrowing: int  # minus the narrowing's index: the more general first
    draft: DraftRule
    index: int | None  # the narrowing (``DraftRule.narrower``), None: left out
    shares: list[float]  # per model, coverage after the change
    used: set[str]  # the rules with a chosen group after the change


def _fits(sc: ScoredCandidate, graph: Graph, limit: Mapping[str, int]) -> bool:
    """Whether a candidate keeps within a ``memory_limit``."""
    from ruleengine.cost.constraints import memory_limit_excess

    return (
        memory_limit_excess(
            graph, sc.details.get("intermediates", ()), sc.details.get("outputs", ()), limit
        )
        is None
    )


class _Pruning:
    """One pruning: the rules left out and narrowed so far, and coverage now."""

    def __init__(
        self,
        drafts: Sequence[DraftRule],
        analyses: Sequence[Analysis],
        models: Sequence[str],
        graphs: Mapping[str, Graph] | None,
    ) -> None:
        from ruleengine import coverage

        self.drafts, self.analyses, self.models, self.graphs = drafts, analyses, models, graphs
        self.edges = [coverage.fusable_edges(a.graph) for a in analyses]
        self.current = {d.name: d for d in drafts}
        self.swapped: dict[str, list] = {}  # rule -> per model, its candidates now (narrowed)
        self.out: set[str] = set()
        self.dropped: list[tuple[str, str]] = []
        self.alt_scored: dict[tuple[str, int], list] = {}
        self.tested_memo: dict[str, DraftRule | None] = {}
        self.now, self.used = self.select(self.out, self.swapped)

    def scored_of(self, k: int, without: set[str], swap: Swaps) -> list[ScoredCandidate]:
        """Model ``k``'s scored candidates without ``without``, with ``swap``'s."""
        from ruleengine.cost.duplicates import reduce_duplicates

        a = self.analyses[k]
        base = without_rules(a.scored, frozenset(without | set(swap)))
        if not swap:
            return base
        extra = [sc for name in sorted(swap) for sc in swap[name][k]]
        return sorted(reduce_duplicates([*base, *extra]), key=lambda sc: sc.candidate.key)

    def select(self, without: set[str], swap: Swaps) -> tuple[list[float], set[str]]:
        """Per model, the coverage the selection stage reaches; the rules it uses."""
        from ruleengine import coverage
        from ruleengine.resolve import resolve

        shares, used = [], set()
        for k, (a, e) in enumerate(zip(self.analyses, self.edges, strict=True)):
            if not without and not swap:
                chosen = a.resolution.chosen
            else:
                chosen = resolve(a.graph, self.scored_of(k, without, swap)).chosen
            used.update(sc.candidate.rule for sc in chosen)
            shares.append(coverage.measure(a.graph, [sc.candidate.nodes for sc in chosen], e))
        return [m.coverage for m in shares], used

    def narrowed(self, d: DraftRule, i: int) -> list:
        """Per model, the scored candidates of the draft's narrowing ``i``."""
        if (d.name, i) not in self.alt_scored:
            self.alt_scored[d.name, i] = [
                scored_rule(d.name, d.narrower[i][1], a) for a in self.analyses
            ]
        return self.alt_scored[d.name, i]

    def no_change(self, d: DraftRule, i: int) -> bool:
        """A size-pinned narrowing whose unpinned draft is the rule's current one or a
        plain narrowing on offer, where every candidate of that draft fits the limit:
        the same candidates, judged alike (the constraint is the cost stage's, checked
        on each candidate), so its trial is the unpinned one's (no gain, or the plain
        narrowing's, which wins ties): not matched again."""
        got = d.unsized.get(d.narrower[i][1])
        if got is None:
            return False
        plain, limit = got
        if d.text == plain:
            base = self.swapped.get(d.name) or [
                [sc for sc in a.scored if sc.candidate.rule == d.name] for a in self.analyses
            ]
        else:
            j = next((j for j, (_, text) in enumerate(d.narrower) if text == plain), None)
            if j is None:
                return False
            base = self.narrowed(d, j)
        return all(
            _fits(sc, a.graph, limit)
            for a, scs in zip(self.analyses, base, strict=True)
            for sc in scs
        )

    def best(self, trials: Iterable[Trial]) -> Trial | None:
        """The trial that gains most and whose narrowed draft passes its tests."""
        for t in sorted(trials, key=lambda t: t[:4], reverse=True):
            if t.gain <= 1e-9:
                return None
            d, i = t.draft, t.index
            if i is None:
                return t
            cluster, text = d.narrower[i]
            if text not in self.tested_memo:
                self.tested_memo[text] = tested(
                    replace(d, text=text, cluster=cluster, tests={}), self.graphs
                )
            if self.tested_memo[text] is not None:
                return t._replace(draft=self.tested_memo[text])
        return None

    def trials(self, specs: Sequence[TrialSpec]) -> list[Trial]:
        """Each change of ``specs`` tried: the selection with draft ``d`` narrowed to
        ``i``, or left out (``i`` None). Where a child may be forked, it tries about half
        of them beside the parent (those whose candidates are at hand; the parent keeps
        the narrowings it must match): a trial's figures depend on nothing another trial
        did (every solve's answer is what solving again gives: ``solves``)."""
        mine, theirs = self.split(specs)
        child = beside(self.tried_all, [specs[k] for k in theirs]) if theirs else None
        found = {k: self.tried(specs[k]) for k in mine}
        if child is not None:
            found.update(zip(theirs, child.get(), strict=True))
        trials = []
        for k, (kind, rank, d, i) in enumerate(specs):
            shares, used = found[k]
            gain = sum(shares) - sum(self.now)
            trials.append(Trial(gain, kind, -rank, -(i or 0), d, i, shares, used))
        return trials

    def split(self, specs: Sequence[TrialSpec]) -> tuple[list[int], list[int]]:
        """The trials the parent makes and those a forked child makes (none where no
        child may be forked)."""
        if len(specs) < 2 or not may_fork():
            return list(range(len(specs))), []
        movable = [
            k for k, (_, _, d, i) in enumerate(specs) if i is None or (d.name, i) in self.alt_scored
        ]
        theirs = movable[len(movable) - min(len(movable), len(specs) // 2) :]
        taken = set(theirs)
        return [k for k in range(len(specs)) if k not in taken], theirs

    def tried(self, spec: TrialSpec) -> tuple[list[float], set[str]]:
        """The coverage per model and the rules used once the change is made."""
        _, _, d, i = spec
        if i is None:
            return self.select(
                self.out | {d.name}, {k: v for k, v in self.swapped.items() if k != d.name}
            )
        return self.select(self.out, {**self.swapped, d.name: self.narrowed(d, i)})

    def tried_all(self, specs: Sequence[TrialSpec]) -> list[tuple[list[float], set[str]]]:
        return [self.tried(spec) for spec in specs]

    def plain_trials(self) -> tuple[list[Trial], list[tuple[int, DraftRule, int]]]:
        """Every rule in use narrowed (plain narrowings) and left out; the pinned
        narrowings set aside as (rank, draft, narrowing)."""
        from ruleengine.suggest.emit import PINNED_NOTE

        specs: list[TrialSpec] = []
        pins = []
        for rank, d in enumerate(self.drafts):
            if d.name in self.out or d.name not in self.used:
                continue
            d = self.current[d.name]
            for i in range(len(d.narrower)):
                if PINNED_NOTE in d.narrower[i][1]:
                    pins.append((rank, d, i))
                    continue
                # ties: a less general draft first, then leaving the rule out
                specs.append((2, rank, d, i))
            specs.append((1, rank, d, None))
        return self.trials(specs), pins

    def strays(self) -> list[DraftRule]:
        """The drafted rules in use with a chosen group that is none of the regions they
        were drafted for, in rank order: a generalized match elsewhere."""
        from ruleengine.resolve import resolve

        found: set[str] = set()
        for k, a in enumerate(self.analyses):
            chosen = resolve(a.graph, self.scored_of(k, self.out, self.swapped)).chosen
            own: dict[str, set[frozenset[str]]] = {}  # per rule, once (not per group)
            for sc in chosen:
                d = self.current.get(sc.candidate.rule)
                if d is None or d.name in self.out or d.name in found:
                    continue
                if d.name not in own:
                    own[d.name] = {
                        frozenset(i.region.nodes)
                        for i in d.cluster.instances
                        if i.model == self.models[k]
                    }
                if frozenset(sc.candidate.nodes) not in own[d.name]:
                    found.add(d.name)
        return [self.current[d.name] for d in self.drafts if d.name in found][:MAX_PAIR_RULES]

    def best_pair(self) -> tuple | None:
        """Where no single change raises coverage: the two drafted rules with stray
        groups whose leaving out together raises it most (each alone may lower it: two
        generalized matches that tile a stretch of layers between them, each of which
        alone the selection pairs with groups that capture more)."""
        found = None
        for a, b in combinations(self.strays(), 2):
            gone = {a.name, b.name}
            trial, trial_used = self.select(
                self.out | gone, {k: v for k, v in self.swapped.items() if k not in gone}
            )
            gain = sum(trial) - sum(self.now)
            if gain > 1e-9 and (found is None or gain > found[0]):
                found = (gain, (a, b), trial, trial_used)
        return None if found is None else found[1:]

    def leave_out(self, d: DraftRule, why: str) -> None:
        self.dropped.append((d.name, why))
        self.out.add(d.name)
        self.swapped.pop(d.name, None)

    def leave_out_pair(self, pair: tuple[DraftRule, DraftRule], shares: list, used: set) -> None:
        a, b = pair
        lost = coverage_change(self.models, self.now, shares, "both")
        for d, other in ((a, b), (b, a)):
            why = f"lowers coverage with {other.name}: their groups win on net bytes ({lost})"
            self.leave_out(d, why)
        self.now, self.used = shares, used

    def make(self, change: Trial) -> None:
        """Leave the rule out or narrow it, as ``change`` tried."""
        d, i = change.draft, change.index
        if i is None:
            lost = coverage_change(self.models, self.now, change.shares, "it")
            self.leave_out(d, f"lowers coverage: its groups win on net bytes ({lost})")
        else:
            self.swapped[d.name] = self.narrowed(self.current[d.name], i)
            self.current[d.name] = replace(d, narrower=self.current[d.name].narrower[i + 1 :])
            self.alt_scored = {k: v for k, v in self.alt_scored.items() if k[0] != d.name}
        self.now, self.used = change.shares, change.used

    def step(self) -> bool:
        """One round: the best change made; False where none raises coverage."""
        trials, pins = self.plain_trials()
        plain = self.best(trials)
        # pinned drafts (each matched anew on every model: the costly trials) of a rule
        # whose leaving out raises coverage (a pin may keep what it captures where it is
        # drafted), and of every rule in a round where no plainer change raises it
        gains = {t.draft.name for t in trials if t.index is None and t.gain > 1e-9}
        pins = [p for p in pins if plain is None or p[1].name in gains]
        # ties: after a less general draft and leaving the rule out
        trials += self.trials([(0, rank, d, i) for rank, d, i in pins if not self.no_change(d, i)])
        change = self.best(trials) if pins else plain
        if change is not None:
            self.make(change)
            return True
        pair = self.best_pair()
        if pair is None:
            return False
        self.leave_out_pair(*pair)
        return True

    def result(self) -> tuple[list[DraftRule], list[tuple[str, str]]]:
        kept = [self.current[d.name] for d in self.drafts if d.name not in self.out]
        if self.graphs is not None:
            kept = [with_kernel(d, self.graphs) if d.name in self.swapped else d for d in kept]
        return kept, self.dropped


def prune(
    drafts: list[DraftRule],
    analyses: Sequence[Analysis],
    models: Sequence[str],
    graphs: Mapping[str, Graph] | None = None,
) -> tuple[list[DraftRule], list[tuple[str, str]]]:
    """Leave out or narrow the drafted rules that lower coverage: each round, the
    selection stage is run (``resolve``, as the pipeline runs it) over every model's
    scored candidates with one drafted rule's left out, or replaced by those of a less
    general draft of its cluster (``DraftRule.narrower``: matched and costed on the same
    graphs), for each drafted rule with a chosen group; the change that captures the
    most fusable bytes more (coverage summed over the models; ties: narrowing first, then
    the better-ranked rule) is made. A narrowed draft must pass its generated tests.
    Exact for what it tries: match and cost of a rule do not depend on the other rules
    but for duplicates, which ``without_rules`` and the cost stage's own rule settle (the
    pipeline is run again on the result all the same)."""
    from ruleengine.suggest.solves import cached_solves

    with cached_solves():  # a trial re-solves only what the rule tried changes
        pruning = _Pruning(drafts, analyses, models, graphs)
        for _ in range(PRUNE_ROUNDS):
            if not pruning.step():
                break
        return pruning.result()


def coverage_change(
    models: Sequence[str], now: Sequence[float], trial: Sequence[float], kept: str
) -> str:
    """Per model whose coverage a left-out rule (or pair) changes: with ``kept``, without."""
    return ", ".join(
        f"{m}: {n:.1%} with {kept}, {t:.1%} without"
        for m, n, t in zip(models, now, trial, strict=True)
        if t != n
    )


def without_rules(
    scored: Sequence[ScoredCandidate], rules: frozenset[str]
) -> list[ScoredCandidate]:
    """The scored candidates as the cost stage gives them without ``rules``: theirs left
    out, and a candidate it marked a duplicate of one of theirs (the same node set, lower
    priority) viable again (the highest priority of those, as the cost stage keeps)."""
    from ruleengine.cost.model import Verdict
    from ruleengine.cost.scoring import relabel

    gone = {sc.candidate.node_set for sc in scored if sc.viable and sc.candidate.rule in rules}
    kept = [sc for sc in scored if sc.candidate.rule not in rules]
    stays = {sc.candidate.node_set for sc in kept if sc.viable}
    back: dict[frozenset[str], int] = {}
    for i, sc in enumerate(kept):
        nodes = sc.candidate.node_set
        if sc.verdict is not Verdict.DUPLICATE or nodes not in gone or nodes in stays:
            continue
        j = back.get(nodes)
        if j is None or (-sc.priority, sc.candidate.key) < (
            -kept[j].priority,
            kept[j].candidate.key,
        ):
            back[nodes] = i
    for i in back.values():
        kept[i] = relabel(kept[i], Verdict.FUSE, "fuse", "")
    return kept
