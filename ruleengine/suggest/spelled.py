"""A model's other spelling: its composite ops written out in their decomposed forms.

Exporters of one architecture differ in how they spell a composite: TorchScript at opset
17 writes ``LayerNormalization``, at opset 14 the nine ops of ``layernorm_affine``
(ops/composites.yaml). A drafted rule may take an op that, in the decomposed spelling,
a bundled rule needs together with the composite (the embeddings' sum Add that
``embedding_norm`` fuses with a decomposed LayerNorm): in the source it raises coverage,
in the other export it displaces the bundled group and lowers it. ``decomposed`` writes
the source as that other export would, from the composites data alone (no op is named
here), so the pruning can judge each draft on both spellings (``pruning.prune``).

A node is written out when an op alias names its ONNX type and a composite, and a form
of that composite takes exactly its inputs: ``$x`` is input 0, the form's other
externals (in order of first use, the composite's ``params`` variables apart) the other
inputs in order, a ``params`` variable the value of the ONNX attribute of that name (or
its schema default), a numeric constant a scalar Constant of the node's dtype, and the
reductions reduce over the node's ``axis`` (from that axis to the last). A node with
optional outputs in use, a form with ``$_`` (any tensor) or an external it cannot map is
left as it is. Weights are never read: the initializers are copied as they are, external
data pointing to the source's files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

# reductions whose axes become an input from this opset on (an attribute before)
_AXES_INPUT_FROM = {"ReduceSum": 13}
_AXES_INPUT_DEFAULT = 18
_REDUCE_PREFIX = "Reduce"


@cache
def _spelled_ops() -> Mapping[str, tuple[Any, ...]]:
    """ONNX op type -> the composites an alias names for it (the alias's own op first)."""
    from ruleengine.ops.aliases import alias_table
    from ruleengine.ops.composites import expand_composite

    out: dict[str, list] = {}
    for alias in alias_table().values():
        if len(alias.onnx_types) != 1 or not alias.composites:
            continue
        comps = out.setdefault(alias.onnx_types[0], [])
        for name in alias.composites:
            for comp in expand_composite(name):
                if comp not in comps:
                    comps.append(comp)
    return {k: tuple(v) for k, v in out.items()}


def _externals(form: Any, params: Mapping[str, str]) -> list[str] | None:
    """The form's externals other than ``$x`` and the params' variables, in order of
    first use; None where a form reads any tensor (``$_``): nothing to map it to."""
    seen: list[str] = []
    bound = set(params.values())
    for n in form.nodes:
        for r in n.inputs:
            if r.kind == "any":
                return None
            if r.kind == "external" and r.name != "x" and r.name not in bound:
                if r.name not in seen:
                    seen.append(r.name)
    return seen


def _attr(node: Any, name: str) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return None


def _default(op_type: str, name: str, opset: int) -> Any:
    import onnx
    from onnx import helper

    try:
        schema = onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    return helper.get_attribute_value(attr.default_value)


def _write_out(
    node: Any, comps: tuple[Any, ...], dtype: int, rank: int | None, opset: int
) -> list[Any] | None:
    """The nodes of the first form that takes ``node``'s inputs, or None."""
    from onnx import helper, numpy_helper

    if len(node.output) != 1 and any(node.output[1:]):
        return None
    inputs = [t for t in node.input]
    while inputs and not inputs[-1]:
        inputs.pop()
    if not inputs or any(not t for t in inputs):
        return None
    axis = _attr(node, "axis")
    if axis is None:
        axis = _default(node.op_type, "axis", opset)
    for comp in comps:
        for form in comp.forms:
            names = _externals(form, comp.params)
            if names is None or len(names) != len(inputs) - 1:
                continue
            if form.affine is not None and form.affine != (len(inputs) > 1):
                continue
            reduces = any(n.op.startswith(_REDUCE_PREFIX) for n in form.nodes)
            if reduces and not isinstance(axis, int):
                continue
            if reduces and axis >= 0 and rank is None:
                continue
            values: dict[str, float] = {}
            for attr_name, var in comp.params.items():
                value = _attr(node, attr_name)
                if value is None:
                    value = _default(node.op_type, attr_name, opset)
                if not isinstance(value, (int, float)):
                    break
                values[var] = float(value)
            else:
                return _nodes(
                    node,
                    form,
                    dict(zip(names, inputs[1:], strict=True)),
                    values,
                    dtype,
                    axis,
                    rank,
                    opset,
                    helper,
                    numpy_helper,
                )
    return None


def _nodes(
    node: Any,
    form: Any,
    bound: Mapping[str, str],
    values: Mapping[str, float],
    dtype: int,
    axis: object,
    rank: int | None,
    opset: int,
    helper: Any,
    numpy_helper: Any,
) -> list[Any]:
    """The ONNX nodes ``node`` (a composite op) is written out as, by ``form``."""
    writer = _FormWriter(node, form, dtype, helper, numpy_helper)
    if isinstance(axis, int):
        axes = list(range(axis, 0)) if axis < 0 else list(range(axis, rank or 0))
    else:
        axes = []
    base = writer.base
    ids = {n.id: f"{base}/{form.composite}_{n.id}" for n in form.nodes}
    ids[form.output.id] = node.output[0]
    out = writer.out
    for n in form.nodes:
        ins = [writer.input_of(r, ids, values, bound) for r in n.inputs]
        attrs = {}
        if n.op.startswith(_REDUCE_PREFIX):
            if opset >= _AXES_INPUT_FROM.get(n.op, _AXES_INPUT_DEFAULT):
                ins.append(_axes(out, base, form, axes, numpy_helper, helper))
            else:
                attrs["axes"] = axes
        out.append(
            helper.make_node(
                n.op, ins, [ids[n.id]], name=f"{base}/{form.composite}_{n.id}", **attrs
            )
        )
    return out


class _FormWriter:
    """The nodes of one written-out composite so far, and the Constants it numbers."""

    def __init__(self, node: Any, form: Any, dtype: int, helper: Any, numpy_helper: Any) -> None:
        self.node, self.form, self.helper, self.numpy_helper = node, form, helper, numpy_helper
        self.np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        self.base = node.name or node.output[0]
        self.out: list[Any] = []
        self.consts = 0

    def const(self, value: float) -> str:
        """A new Constant node of ``value`` (the node's dtype); its output's name."""
        import numpy as np

        name = f"{self.base}/{self.form.composite}_const_{self.consts}"
        self.consts += 1
        arr = np.array(value, dtype=self.np_dtype)
        self.out.append(
            self.helper.make_node(
                "Constant", [], [name], name=name, value=self.numpy_helper.from_array(arr, name)
            )
        )
        return name

    def input_of(
        self,
        r: Any,
        ids: Mapping[str, str],
        values: Mapping[str, float],
        bound: Mapping[str, str],
    ) -> str:
        """The tensor a form node's input ``r`` reads."""
        if r.kind == "node":
            return ids[r.name]
        if r.kind == "const":
            return self.const(r.value)
        if r.name == "x":
            return self.node.input[0]
        if r.name in values:
            return self.const(values[r.name])
        return bound[r.name]


def _axes(out: list, base: str, form: Any, axes: list[int], numpy_helper: Any, helper: Any) -> str:
    import numpy as np

    name = f"{base}/{form.composite}_axes_{len(out)}"
    out.append(
        helper.make_node(
            "Constant",
            [],
            [name],
            name=name,
            value=numpy_helper.from_array(np.array(axes, dtype=np.int64), name),
        )
    )
    return name


def decomposed(path: str | Path, out_dir: str | Path) -> Path | None:
    """``path``'s model with every composite op written out (above), saved in
    ``out_dir``; None where it has no such op (nothing to judge a second time)."""
    import onnx
    from onnx import TensorProto

    src = Path(path)
    model = onnx.load(str(src), load_external_data=False)
    spelled = _spelled_ops()
    if not any(n.op_type in spelled for n in model.graph.node):
        return None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shapes only refine dtype and rank
        inferred = model
    infos = {
        v.name: v.type.tensor_type
        for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)
    }
    for t in inferred.graph.initializer:
        infos.setdefault(t.name, None)
    nodes = []
    changed = False
    for node in model.graph.node:
        comps = spelled.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        written = None
        if comps and node.input:
            info = infos.get(node.input[0])
            dtype = info.elem_type if info is not None and info.elem_type else TensorProto.FLOAT
            rank = len(info.shape.dim) if info is not None and info.HasField("shape") else None
            written = _write_out(node, comps, dtype, rank, opset)
        if written is None:
            nodes.append(node)
        else:
            nodes.extend(written)
            changed = True
    if not changed:
        return None
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    e.value = os.path.relpath(src.parent / e.value, Path(out_dir))
    target = Path(out_dir) / f"{src.stem}.decomposed.onnx"
    onnx.save(model, str(target))
    return target
