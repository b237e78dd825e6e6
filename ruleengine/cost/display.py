"""The words a verdict is explained in: byte counts as people read them, and the
reasons for a UB overflow and for a size not known statically."""

from __future__ import annotations

from ruleengine.cost.ub import UBNeed
from ruleengine.graph.model import Graph


def kb(n: int | float) -> str:
    """Bytes as KiB with at most one decimal, the way every output prints UB sizes."""
    v = n / 1024
    return f"{v:.0f} KiB" if abs(v - round(v)) < 0.05 else f"{v:.1f} KiB"


def human_bytes(n: int | float) -> str:
    """Bytes in the largest binary unit that fits, with one decimal (B unscaled)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    # binary units named as such (KiB, not KB), like every other output of the tool
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.1f} {unit}"
    return f"{sign}{int(n)} B"


def ub_reason(ub: UBNeed) -> str:
    """Why the group does not fit UB: no legal tiling, or its largest buffers."""
    if not ub.legal:
        return f"UB: {ub.why_illegal}"
    parts = " + ".join(f"{t} {kb(b)}" for t, b in sorted(ub.buffers, key=lambda x: -x[1])[:4])
    more = " + ..." if len(ub.buffers) > 4 else ""
    return (
        f"UB working set {kb(ub.bytes)} exceeds {kb(ub.limit)} usable "
        f"(smallest tile {'x'.join(map(str, ub.tile))}: {parts}{more})"
    )


def dynamic_reason(graph: Graph, unknown: tuple[str, ...]) -> str:
    """Which sizes are unknown, and which graph-input axis to bind (never a name made up
    by shape inference, which nobody can know)."""
    names = ", ".join(unknown[:3]) + (" ..." if len(unknown) > 3 else "")
    axes: dict[str, None] = {}
    for t in unknown:
        tensor = graph.tensors.get(t)
        for d in (tensor.shape or ()) if tensor is not None else ():
            if isinstance(d, str) and d in graph.dim_sources:
                axes[f"{graph.dim_sources[d]} ({d})"] = None
    if axes:
        how = f"bind {', '.join(axes)} with --input-shape NAME:d0,d1,... or --dim NAME=VALUE"
    elif graph.unbound_dims:
        how = f"it depends on unbound input dims {', '.join(graph.unbound_dims[:4])}"
    else:
        how = "it depends on data, or shape inference could not determine it"
    return f"size of {names} is not known statically ({how})"
