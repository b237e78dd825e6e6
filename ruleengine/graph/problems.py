"""The findings of graph loading (AF5xx): which registered code each problem has, and
how a finding or a refusal (``GraphLoadError``) is built from it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ruleengine.diagnostics.codes import make
from ruleengine.diagnostics.model import Diagnostic, Location, Severity
from ruleengine.errors import GraphLoadError

# Stable diagnostic codes of graph loading (AF5xx).
CODES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "unreadable": ("AF501", "unreadable-model"),
        "cycle": ("AF502", "cyclic-graph"),
        "two-producers": ("AF503", "tensor-with-two-producers"),
        "dangling": ("AF504", "dangling-input"),
        "duplicate-node": ("AF505", "duplicate-node-name"),
        "shape-inference": ("AF506", "shape-inference-failed"),
        "bad-dim": ("AF507", "unknown-dim-name"),
        "no-graph": ("AF508", "empty-model"),
        "shape-input": ("AF510", "unknown-input-name"),
        "shape-rank": ("AF511", "input-shape-rank"),
        "shape-size": ("AF512", "input-shape-not-positive"),
        "shape-overflow": ("AF513", "input-shape-overflow"),
        "shape-conflict": ("AF514", "input-shape-conflict"),
    }
)


def problem(
    key: str, message: str, where: str, hint: str | None, severity: Severity = Severity.ERROR
) -> Diagnostic:
    """The finding ``key`` (a key of ``CODES``) about the model at ``where``."""
    return make(CODES[key][1], message, Location(where), hint=hint, severity=severity)


def fail(key: str, message: str, where: str, hint: str | None = None) -> GraphLoadError:
    """The error that refuses the model at ``where`` with the finding ``key``."""
    return GraphLoadError(message, (problem(key, message, where, hint),))


def duplicate_names(renamed: Sequence[tuple[str, str]], where: str) -> tuple[Diagnostic, ...]:
    """One AF505 warning for all the node names several nodes share (``renamed``: the
    shared name and the name each later node got), with counts and the first examples:
    an exporter that reuses a name often reuses it for many nodes, and a line per node
    buries the rest of the output."""
    if not renamed:
        return ()
    later: dict[str, list[str]] = {}
    for old, new in renamed:
        later.setdefault(old, []).append(new)

    def example(old: str) -> str:
        news = later[old]
        called = (
            f"one is {news[0]!r}" if len(news) == 1 else f"ones are {news[0]!r} .. {news[-1]!r}"
        )
        return f"{old!r} is used by {len(news) + 1} nodes (the later {called} in reports)"

    names = list(later)
    if len(names) == 1:
        what = f"node name {example(names[0])}"
    else:
        n_nodes = sum(len(v) + 1 for v in later.values())
        more = f"; and {len(names) - 3} more" if len(names) > 3 else ""
        what = (
            f"{len(names)} node names are shared ({n_nodes} nodes): "
            + "; ".join(example(n) for n in names[:3])
            + more
        )
    return (
        problem(
            "duplicate-node", f"{what}; none of them is fused", where,
            "give every node a unique name in the exporter", Severity.WARNING,
        ),
    )  # fmt: skip
