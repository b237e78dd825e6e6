"""Rule constraints, evaluated on a candidate's real tensors. One function per type.

Each check returns ``None`` when it holds, else a ``Failure`` with a stable code and a
reason saying which tensor broke it and how. Nothing is ever evaluated with ``eval``:
the set of constraint types is the dict ``CHECKS`` below (the rule schema's enum).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ruleengine.cost.model import Target
from ruleengine.cost.opinfo import op_class
from ruleengine.cost.traffic import GroupIO
from ruleengine.cost.ub import UBNeed
from ruleengine.graph.model import Graph
from ruleengine.graph.shapes import broadcast_compatible
from ruleengine.rules.model import Constraint


@dataclass(frozen=True)
class Context:
    graph: Graph
    io: GroupIO
    target: Target
    ub: UBNeed
    bindings: tuple[tuple[str, ...], ...] = ()  # the candidate's nodes per pattern op


@dataclass(frozen=True)
class Failure:
    code: str  # e.g. "constraint-dtype-match"
    reason: str
    note: str = ""


def _tensors(ctx: Context) -> list[str]:
    """Data tensors of the candidate: external data inputs and every produced tensor."""
    seen: dict[str, None] = dict.fromkeys(ctx.io.inputs)
    for node in ctx.io.nodes:
        seen.update(dict.fromkeys(t for t in node.outputs if t))
    return list(seen)


def _shape(ctx: Context, t: str) -> tuple | None:
    tensor = ctx.graph.tensors.get(t)
    return None if tensor is None else tensor.shape


def _fmt_bytes(n: int) -> str:
    return (
        f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / 2**20:.1f} MiB"
    )


def check_dtype_match(ctx: Context, c: Constraint) -> Failure | None:
    allowed = tuple(str(d).lower() for d in c.fields.get("allowed_dtypes", ()))
    for t in _tensors(ctx):
        tensor = ctx.graph.tensors.get(t)
        if tensor is None:
            continue
        # Integer/bool side inputs (shapes, axes, masks) are not the data being fused.
        data_input = t not in ctx.io.inputs or (tensor.dtype or "").startswith(("float", "bfloat"))
        if data_input and tensor.dtype not in allowed:
            return Failure(
                "constraint-dtype-match",
                f"dtype_match failed: tensor {t} is {tensor.dtype or 'of unknown dtype'}, "
                f"allowed {', '.join(allowed)}",
            )
    return None


def check_shape_constraint(ctx: Context, c: Constraint) -> Failure | None:
    broadcast = bool(c.fields.get("broadcast", True))
    binary = op_class("@broadcast")
    for node in ctx.io.nodes:
        if node.op_type not in binary or len([t for t in node.inputs if t]) < 2:
            continue
        shapes = [_shape(ctx, t) for t in node.inputs if t]
        if any(s is None for s in shapes):
            return Failure(
                "constraint-shape",
                f"shape_constraint failed: {node.name} has an input of unknown shape",
            )
        known = [tuple(s) for s in shapes if s is not None]
        ok = broadcast_compatible(known) if broadcast else len(set(known)) == 1
        if not ok:
            shown = " vs ".join(str(list(s)) for s in known)
            what = "broadcast-compatible" if broadcast else "equal"
            return Failure(
                "constraint-shape",
                f"shape_constraint failed: inputs of {node.name} are not {what} ({shown})",
            )
    rank = c.fields.get("rank")
    if rank is not None:
        ranks = {int(rank)} if isinstance(rank, int) else {int(r) for r in rank}
        for t in ctx.io.outputs:
            s = _shape(ctx, t)
            if s is None or len(s) not in ranks:
                got = "unknown" if s is None else len(s)
                return Failure(
                    "constraint-shape",
                    f"shape_constraint failed: output {t} has rank {got}, "
                    f"required {' or '.join(map(str, sorted(ranks)))}",
                )
    if c.fields.get("static", False):
        for t in _tensors(ctx):
            tensor = ctx.graph.tensors.get(t)
            if tensor is not None and not tensor.is_static:
                return Failure(
                    "constraint-shape", f"shape_constraint failed: {t} has no static shape"
                )
    return None


def memory_limit_excess(
    graph: Graph,
    intermediates: Iterable[str],
    outputs: Iterable[str],
    limit: Mapping[str, object],
) -> tuple[str, str, int, int] | None:
    """The first tensor a ``memory_limit`` (its fields ``max_intermediate_size``,
    ``max_output_size``) rejects: (``"intermediate"`` or ``"output"``, the tensor, its
    bytes, the limit); None when every tensor fits. A tensor of unknown size fits. One
    test for the constraint's check and for what ``suggest`` asks of its candidates
    (whether a size-pinned draft would judge them alike)."""
    for kind, field, tensors in (
        ("intermediate", "max_intermediate_size", intermediates),
        ("output", "max_output_size", outputs),
    ):
        most = limit.get(field)
        if most is None:
            continue
        for t in tensors:
            n = graph.tensors[t].nbytes or 0
            if n > int(most):  # type: ignore[call-overload]
                return kind, t, n, int(most)  # type: ignore[call-overload]
    return None


def check_memory_limit(ctx: Context, c: Constraint) -> Failure | None:
    over = memory_limit_excess(ctx.graph, ctx.io.intermediates, ctx.io.outputs, c.fields)
    if over is None:
        return None
    kind, t, n, most = over
    field = "max_intermediate_size" if kind == "intermediate" else "max_output_size"
    return Failure(
        "constraint-memory-limit",
        f"memory_limit failed: {kind} {t} is {_fmt_bytes(n)} > {field} {_fmt_bytes(most)}",
    )


def workspace_bytes(ctx: Context) -> int:
    """Workspace of the fused kernel: the intermediate tensors it might park off-chip."""
    return sum(ctx.graph.tensors[t].nbytes or 0 for t in ctx.io.intermediates)


def check_workspace_size(ctx: Context, c: Constraint) -> Failure | None:
    limit = int(c.fields.get("max_workspace", 0))
    need = workspace_bytes(ctx)
    if need <= limit:
        return None
    if c.fields.get("spill_to_l2", False):
        return Failure("", "", note=f"workspace {_fmt_bytes(need - limit)} spills to L2")
    return Failure(
        "constraint-workspace-size",
        f"workspace_size failed: workspace {_fmt_bytes(need)} > max_workspace "
        f"{_fmt_bytes(limit)} and spill_to_l2 is false",
    )


def check_channel_divisibility(ctx: Context, c: Constraint) -> Failure | None:
    dim = int(c.fields.get("channel_dim", 1))
    divisor = int(c.fields.get("divisor", 1))
    for t in ctx.io.outputs:
        s = _shape(ctx, t)
        if s is None or not (-len(s) <= dim < len(s)):
            return Failure(
                "constraint-channel-divisibility",
                f"channel_divisibility failed: output {t} has no dimension {dim}",
            )
        ch = s[dim]
        if not isinstance(ch, int) or ch % divisor:
            return Failure(
                "constraint-channel-divisibility",
                f"channel_divisibility failed: output {t} has {ch} channels on dim {dim}, "
                f"not a multiple of {divisor}",
            )
    return None


def check_single_consumer(ctx: Context, c: Constraint) -> Failure | None:
    """A tensor passed between pattern ops has one reader: that pattern op, nobody else.

    A composite such as x*Sigmoid(x) is one pattern op, so its two reads count once; a
    read from outside the group counts as another consumer (this matters when the rule
    sets ``allow_intermediate_outputs: true``).
    """
    op_of = {n: i for i, group in enumerate(ctx.bindings) for n in group}
    inside = {n.name for n in ctx.io.nodes}
    for node in ctx.io.nodes:
        for t in node.outputs:
            tensor = ctx.graph.tensors.get(t) if t else None
            if tensor is None or not any(n in inside for n, _ in tensor.consumers):
                continue
            readers = {
                op_of.get(n, n) if n in inside else f"outside:{n}" for n, _ in tensor.consumers
            }
            if len(readers) > 1 or tensor.is_graph_output:
                names = ", ".join(sorted({n for n, _ in tensor.consumers}))
                return Failure(
                    "constraint-single-consumer",
                    f"single_consumer failed: {t} is read by several nodes ({names})"
                    + (" and is a graph output" if tensor.is_graph_output else ""),
                )
    return None


def check_ub_fit(ctx: Context, c: Constraint) -> Failure | None:
    if ctx.ub.fits:
        return None
    return Failure(
        "constraint-ub-fit",
        f"ub_fit failed: working set {ctx.ub.bytes / 1024:.1f} KB exceeds "
        f"{ctx.ub.limit / 1024:.1f} KB of UB",
    )


CHECKS: dict[str, Callable[[Context, Constraint], Failure | None]] = {
    "dtype_match": check_dtype_match,
    "shape_constraint": check_shape_constraint,
    "memory_limit": check_memory_limit,
    "workspace_size": check_workspace_size,
    "channel_divisibility": check_channel_divisibility,
    "single_consumer": check_single_consumer,
    "ub_fit": check_ub_fit,
}


def evaluate(ctx: Context, constraints: tuple[Constraint, ...]) -> tuple[Failure | None, list[str]]:
    """The first failing constraint (in rule order) and notes from passing ones."""
    notes: list[str] = []
    for c in constraints:
        check = CHECKS.get(c.type)
        if check is None:
            return Failure("constraint-unknown", f"unknown constraint type {c.type!r}"), notes
        failure = check(ctx, c)
        if failure is None:
            continue
        if not failure.code:
            notes.append(failure.note)
            continue
        if c.description:
            failure = Failure(failure.code, f"{failure.reason} ({c.description.strip()})")
        return failure, notes
    return None, notes
