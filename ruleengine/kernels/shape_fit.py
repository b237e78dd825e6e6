"""Whether a form's body type-checks on the group's own tensors, asked while binding.

A form is chosen by its op sequence and its port bindings; neither sees the attributes
of the ops in between (a Transpose's perm, a Reshape's target). A group whose K is
already head-major binds a form that transposes K again, and the fused node then fails
onnxruntime's shape inference. So the bound call is shape-inferred, strictly and with
data propagation, on the static types of the tensors it would read (never their bytes),
and its outputs must have the shapes the group's outputs have. One inference per
distinct (form, attributes, input types): a stack of repeated layers asks it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ruleengine.graph import onnxlite
from ruleengine.graph.model import Graph
from ruleengine.kernels.opset_down import as_model_function

_CHECK_DOMAIN = "autofusion.fit"


# Tensor dtype names (as the graph writes them) to ONNX element types: a table, so that
# fitting never imports onnx (``onnxlite`` covers the types numpy has natively)
_ELEM_TYPES = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "uint16": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
    "uint32": 12,
    "uint64": 13,
    "complex64": 14,
    "complex128": 15,
    "bfloat16": 16,
}


def _type_of(graph: Graph, tensor: str) -> tuple[int, tuple[Any, ...] | None] | None:
    """(element type, shape with None for an unknown dim) of ``tensor``; None: unknown."""
    info = graph.tensors.get(tensor)
    if info is None or info.dtype is None:
        return None
    elem = _ELEM_TYPES.get(info.dtype)
    if elem is None:
        return None
    if info.shape is None:
        return elem, None
    return elem, tuple(d if isinstance(d, int) else None for d in info.shape)


def _probe_model(call: Any, opset: int, inputs: Sequence[tuple[str, Any]]) -> Any:
    """A model of one node calling the form's body, its inputs typed as the group's."""
    fn = as_model_function(call.form.function, opset, _CHECK_DOMAIN, call.float_type)
    names = [f"in{i}" if t else "" for i, (t, _) in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = [f"out{i}" for i in range(len(call.form.outputs))]
    node = onnxlite.make_node(fn.name, names, outs, name="probe", domain=_CHECK_DOMAIN)
    node.overload = fn.overload
    node.attribute.extend(onnxlite.make_attribute(k, v) for k, v in call.attributes)
    graph = onnxlite.GraphProto()
    graph.name = "form_fit"
    graph.node.append(node)
    for name, (_, typed) in zip(names, inputs, strict=False):
        if name:
            elem, shape = typed
            dims = None if shape is None else [d if d is not None else None for d in shape]
            graph.input.append(onnxlite.make_tensor_value_info(name, elem, dims))
    for name in outs:
        graph.output.append(onnxlite.ValueInfoProto(name=name))
    model = onnxlite.ModelProto()
    model.ir_version = 10  # node overloads are new in IR 10
    model.graph.CopyFrom(graph)
    model.opset_import.extend(
        [onnxlite.make_opsetid("", opset), onnxlite.make_opsetid(_CHECK_DOMAIN, 1)]
    )
    model.functions.append(fn)
    return model


def _inferred_outputs(model: Any) -> list[tuple[int | None, ...] | None]:
    """The output shapes strict shape inference gives (raises on a type error)."""
    inferred = onnxlite.infer_shapes_strict(model)
    shapes: list[tuple[int | None, ...] | None] = []
    for out in inferred.graph.output:
        tt = out.type.tensor_type
        if not tt.HasField("shape"):
            shapes.append(None)
            continue
        shapes.append(tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim))
    return shapes


def shape_problem(graph: Graph, call: Any, memo: dict[tuple, Any] | None = None) -> str | None:
    """Why the bound ``call`` (a ``bind.Call``) does not type-check on the group's
    tensors, in words (None: it does, or a type it reads is unknown)."""
    inputs = [(t, _type_of(graph, t)) if t else ("", None) for t in call.inputs]
    if any(t and typed is None for t, typed in inputs):
        return None
    key = (id(call.form), call.form.name, graph.opset, repr(call.attributes), call.float_type)
    key += tuple(typed for _, typed in inputs)
    if memo is not None and key in memo:
        got = memo[key]
        if got[0] is call.form:  # the memo holds the form: its id stays its own
            return _compare(graph, call, got[1])
    try:
        found: Any = _inferred_outputs(_probe_model(call, graph.opset, inputs))
    except Exception as exc:  # onnx's inference raises its own error types
        found = _first_line(str(exc))
    if memo is not None:
        memo[key] = (call.form, found)
    return _compare(graph, call, found)


def _compare(graph: Graph, call: Any, found: Any) -> str | None:
    """The inferred output shapes against the group's (only where both are static)."""
    if isinstance(found, str):
        return f"its body does not type-check on the group's tensors ({found})"
    for tensor, port, shape in zip(call.outputs, call.form.outputs, found, strict=False):
        typed = _type_of(graph, tensor) if tensor else None
        if typed is None or typed[1] is None or shape is None:
            continue
        want = typed[1]
        if len(want) != len(shape) or any(
            a is not None and b is not None and a != b for a, b in zip(want, shape, strict=True)
        ):
            return (
                f"its body makes output {port} of shape {list(shape)}, "
                f"the group's {tensor} is {list(want)}"
            )
    return None


def _first_line(message: str) -> str:
    """The first inference error of onnx's message, without its banner."""
    text = message.replace("[ShapeInferenceError] Inference error(s): ", "").strip()
    line = text.splitlines()[0] if text else "shape inference failed"
    return line[:200]
