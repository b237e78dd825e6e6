"""Fusion inside control-flow bodies (issue 36): every ``If``/``Loop``/``Scan`` body, nested
ones too, is decided and rewritten as a scope of its own (``graph.scopes``) by the same
stages as the top-level graph: load, match, cost, resolve, number, bind, rewrite. A group
never crosses a scope's boundary; its tensors are priced like any other (the scope's
outer tensors are its graph inputs, typed from the whole model's inference with the
user's shapes bound). Group ids continue after the top level's, so they are unique in the
fused model; the functions the fused nodes call are the model's.

Verification runs the whole fused model, bodies included; a rebuild of the top level
(``--safe``) applies the same body groups again (``reapply``). Per-group verification and
safe mode's isolation and bisection look at the top-level groups only: a body group is
verified by the whole-model run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruleengine.graph.scopes import Scope, rewrite_bodies
from ruleengine.rewrite.onnx_rewrite import (
    MIN_IR_VERSION,
    _set_model_meta,
    fused_nodes,
    rewrite_model,
)
from ruleengine.rewrite.rejections import match_counts
from ruleengine.version import __version__

if TYPE_CHECKING:
    import onnx

    from ruleengine.cost.model import Target
    from ruleengine.graph.model import Graph
    from ruleengine.kernels.catalog import Catalog
    from ruleengine.rewrite.model import FusedGroup, Plan
    from ruleengine.rules.model import RuleSet


@dataclass(frozen=True)
class ScopeGroups:
    """The groups chosen in one body, with the graph they were chosen on and their
    kernel calls (by group id)."""

    path: tuple[str, ...]
    graph: Graph
    groups: tuple[FusedGroup, ...]
    calls: Mapping[int, Any]
    matched: Mapping[str, int]  # rule -> structural matches (the plan's "matched")


@dataclass(frozen=True)
class BodyFusion:
    """What was fused inside the bodies, scope by scope (innermost first)."""

    scopes: tuple[ScopeGroups, ...] = ()  # every body visited, with or without groups
    named: Mapping[int, tuple[str, str]] = field(default_factory=dict)  # id -> (node, overload)
    bound: Any = None  # onnx.ModelProto: the input model, shapes bound (types only)

    @property
    def groups(self) -> tuple[FusedGroup, ...]:
        return tuple(g for s in self.scopes for g in s.groups)

    def reapply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` (a rebuild of the top level) with these body groups again."""
        return reapply(model, self.bound, self) if self.scopes else model


def bound_model(
    path: Path, dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None
) -> onnx.ModelProto:
    """The input model with the user's dims and shapes bound, as the loader binds them."""
    from ruleengine.graph.binding import bind_dims, bind_input_shapes
    from ruleengine.graph.loader import read_model

    model = read_model(path)
    implied = bind_input_shapes(model, dict(shapes or {}), str(path))
    bind_dims(model, {**implied, **dict(dims or {})})
    return model


@dataclass(frozen=True)
class Decider:
    """How a scope is decided: the rules, target and catalog of the top level."""

    rule_set: RuleSet
    target: Target
    catalog: Catalog
    solver: str = "exact"
    time_limit_s: float = 30.0

    def groups(self, scope: Scope, first_id: int) -> ScopeGroups:
        """The scope's groups, numbered from ``first_id``, bound to their kernels."""
        from ruleengine.cost import score_candidates
        from ruleengine.graph.loader import graph_from_model
        from ruleengine.kernels.bind import bind_groups
        from ruleengine.match.parallel import find_candidates_parallel
        from ruleengine.resolve import resolve
        from ruleengine.rewrite.plan import build_groups

        graph = graph_from_model(scope.model, where=scope.where, jobs=1)
        match = find_candidates_parallel(graph, self.rule_set, 1)
        scored = score_candidates(graph, match, self.rule_set, self.target, catalog=self.catalog)
        chosen = resolve(
            graph, scored, solver=self.solver, time_limit_s=self.time_limit_s, jobs=1
        ).chosen
        numbered = tuple(
            replace(g, id=g.id + first_id - 1) for g in build_groups(graph, chosen, self.rule_set)
        )
        groups, calls = bind_groups(graph, numbered, self.rule_set, self.catalog)
        return ScopeGroups(scope.path, graph, tuple(groups), calls, match_counts(match))


def fuse_bodies(
    fused: onnx.ModelProto, bound: onnx.ModelProto, decider: Decider, first_id: int
) -> BodyFusion:
    """Decide and rewrite every body of ``fused`` in place (``bound``: the input model
    with the user's shapes bound, read for types only); ids from ``first_id``."""
    scopes: list[ScopeGroups] = []
    named: dict[int, tuple[str, str]] = {}

    def rewrite(scope: Scope) -> onnx.ModelProto | None:
        nonlocal first_id
        chosen = decider.groups(scope, first_id)
        scopes.append(chosen)
        if not chosen.groups:
            return None
        first_id += len(chosen.groups)
        done = rewrite_model(
            scope.model, chosen.graph, chosen.groups, calls=chosen.calls, in_place=True
        )
        named.update(fused_nodes(done))
        return done

    rewrite_bodies(fused, bound, rewrite)
    fusion = BodyFusion(tuple(scopes), named, bound)
    _mark(fused, fusion)
    return fusion


def reapply(model: onnx.ModelProto, bound: onnx.ModelProto, fusion: BodyFusion) -> onnx.ModelProto:
    """The same body groups rewritten again into ``model`` (in place): a rebuild of the
    top level from the input model (safe mode) keeps them."""
    by_path = {s.path: s for s in fusion.scopes if s.groups}

    def rewrite(scope: Scope) -> onnx.ModelProto | None:
        chosen = by_path.get(scope.path)
        if chosen is None:
            return None
        return rewrite_model(
            scope.model, chosen.graph, chosen.groups, calls=chosen.calls, in_place=True
        )

    rewrite_bodies(model, bound, rewrite)
    _mark(model, fusion)
    return model


def plan_with_bodies(plan: Plan, fusion: BodyFusion) -> Plan:
    """``plan`` (built on the top-level graph, with every group) with the bodies' nodes,
    traffic and matches in its totals and per-rule statistics."""
    if not fusion.scopes:
        return plan
    from ruleengine.rewrite.plan import node_traffic, unknown_min_bytes

    nodes = traffic = unknown = unknown_bytes = 0
    matched: dict[str, int] = {}
    for s in fusion.scopes:
        before, names = node_traffic(s.graph)
        nodes, traffic = nodes + len(s.graph.nodes), traffic + before
        unknown, unknown_bytes = (
            unknown + len(names),
            unknown_bytes + unknown_min_bytes(s.graph, names),
        )
        for rule, n in s.matched.items():
            matched[rule] = matched.get(rule, 0) + n
    return replace(
        plan,
        nodes_before=plan.nodes_before + nodes,
        nodes_after=plan.nodes_after + nodes,
        hbm_bytes_before=plan.hbm_bytes_before + traffic,
        hbm_bytes_after=plan.hbm_bytes_after + traffic,
        rules=tuple(replace(r, matched=r.matched + matched.get(r.rule, 0)) for r in plan.rules),
        unknown_traffic_tensors=plan.unknown_traffic_tensors + unknown,
        unknown_size_min_bytes=plan.unknown_size_min_bytes + unknown_bytes,
    )


def _mark(model: onnx.ModelProto, fusion: BodyFusion) -> None:
    """The model's IR version and metadata, counting the body groups too."""
    if not fusion.groups:
        return
    top = next((int(e.value) for e in model.metadata_props if e.key == "autofusion.groups"), 0)
    model.ir_version = max(model.ir_version, MIN_IR_VERSION)
    _set_model_meta(model, "autofusion.version", __version__)
    _set_model_meta(model, "autofusion.groups", str(top + len(fusion.groups)))
