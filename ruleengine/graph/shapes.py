"""Shape arithmetic on the graph's static shapes, shared by matching and costing."""

from __future__ import annotations

from collections.abc import Sequence


def broadcast_compatible(shapes: Sequence[tuple]) -> bool:
    """Whether the shapes broadcast together under ONNX (numpy) multidirectional rules."""
    if not shapes:
        return True
    rank = max(len(s) for s in shapes)
    for i in range(1, rank + 1):
        dims = {s[-i] for s in shapes if len(s) >= i and s[-i] != 1}
        if len(dims) > 1:
            return False
    return True
