"""Constant folding as the loader sees it: which tensors a compiler can compute before
run time."""

from __future__ import annotations

from collections.abc import Mapping

from ruleengine.graph.model import Node

# Ops whose output is not a function of their inputs: never folded.
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
     "Bernoulli", "Dropout"}
)  # fmt: skip


# Ops that read only the shape of their input: foldable when that shape is static.
_SHAPE_READERS = frozenset({"Shape", "Size"})


def const_foldable(
    nodes: list[Node], constants: set[str], shapes: Mapping[str, tuple | None]
) -> set[str]:
    """Tensors a compiler can compute before run time (constant folding), in one
    topological pass: constants, Shape/Size of a static tensor, and outputs of a
    deterministic, non-opaque node whose inputs are all foldable."""
    folded = set(constants)
    all_folded = folded.issuperset
    for n in nodes:  # topological order
        if n.opaque or n.domain not in ("", "ai.onnx") or n.op_type in _NONDETERMINISTIC:
            continue
        ins = n.inputs
        if "" in ins:
            ins = tuple(t for t in ins if t)
        if not ins:
            continue
        if n.op_type in _SHAPE_READERS:
            shape = shapes.get(ins[0])
            ok = shape is not None and all(isinstance(d, int) for d in shape)
        else:
            ok = all_folded(ins)
        if ok:
            folded.update(t for t in n.outputs if t)
    return folded
