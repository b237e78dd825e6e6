"""Form bodies below opset 13: the inputs that were attributes before it.

A form's body is written at opset 17; the ops it uses kept their meaning from opset 13
on, but at 13 four of them took an attribute as an input instead (ReduceSum's and
(Un)Squeeze's ``axes``, Split's ``split``) and Softmax's axis changed its meaning (before
13 the input is coerced to 2-D at ``axis``, default 1; from 13 one axis, default -1).
``onnx.version_converter`` cannot take these bodies down (measured: 1 of 91 bundled
bodies converts to opset 12; it has no down-adapter for CastLike, ReduceSum, Split...),
so this rewrites them: a constant ``axes``/``split`` input becomes the attribute, and a
last-axis Softmax says ``axis = -1`` (coerced to 2-D at the last axis: the same result);
a Softmax whose axis is the call's (``@softmax_axis``, bound from the group's own Softmax,
which ran with the same opset's meaning) is kept.
What cannot be rewritten is a problem: the form does not fit the model.
"""

from __future__ import annotations

from typing import Any

# op -> the attribute its input 1 was before opset 13
_INPUT_WAS_ATTRIBUTE = {
    "ReduceSum": "axes",
    "Squeeze": "axes",
    "Unsqueeze": "axes",
    "Split": "split",
}
_LAST_AXIS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
_NEGATIVE_AXES_SINCE = 11  # ReduceSum, Squeeze, Unsqueeze take axes < 0 from opset 11
_INPUTS_SINCE = {"Clip": 11, "Slice": 10}  # min/max, starts/ends were attributes before


def _constant_ints(fn: Any, tensor: str) -> list[int] | None:
    """The integer values of ``tensor`` when a Constant node of ``fn`` makes it."""
    from ruleengine.graph import onnxlite

    for n in fn.node:
        if n.op_type == "Constant" and tensor in n.output:
            for a in n.attribute:
                if a.name == "value_ints":
                    return [int(v) for v in a.ints]
                if a.name == "value":
                    return [int(v) for v in onnxlite.to_array(a.t).reshape(-1)]
    return None


def below_13(fn: Any, opset: int) -> tuple[bool, list[str]]:
    """Rewrite the body ``fn`` (a FunctionProto, in place) for ``opset`` < 13: (whether
    it changed, what cannot be rewritten)."""
    from ruleengine.graph import onnxlite

    changed, problems = False, []
    for n in fn.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        since = _INPUTS_SINCE.get(n.op_type, 0)
        if opset < since and len(n.input) > 1:
            problems.append(f"its body's {n.op_type} reads inputs it has from opset {since}")
        name = _INPUT_WAS_ATTRIBUTE.get(n.op_type)
        if name is not None and len(n.input) > 1 and n.input[1]:
            values = _constant_ints(fn, n.input[1])
            if values is None:
                problems.append(f"its body's {n.op_type} {name} is no constant")
                continue
            if name == "axes" and opset < _NEGATIVE_AXES_SINCE and min(values) < 0:
                problems.append(f"its body's {n.op_type} has axes < 0, new in opset 11")
            inputs = list(n.input)
            del n.input[:]
            n.input.extend([inputs[0], *inputs[2:]])
            n.attribute.append(onnxlite.make_attribute(name, values))
            changed = True
        elif n.op_type in _LAST_AXIS:
            axis = next((a for a in n.attribute if a.name == "axis"), None)
            if axis is None:
                n.attribute.append(onnxlite.make_attribute("axis", -1))
                changed = True
            elif not axis.ref_attr_name and axis.i != -1:
                problems.append(f"its body's {n.op_type} is over another axis than the last")
    return changed, problems


def as_model_function(function: bytes, opset: int, domain: str, float_type: int | None) -> Any:
    """A form's serialized body as a function of a model at default-domain ``opset``
    in ``domain``: its opset imports follow the model's, and below opset 15 (no
    CastLike yet) a CastLike becomes a Cast to the call's float type."""
    from ruleengine.graph import onnxlite

    fn = onnxlite.FunctionProto()
    fn.ParseFromString(function)
    fn.domain = domain
    for o in fn.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    if opset < 15 and float_type:  # CastLike is new in opset 15
        for n in fn.node:
            if n.op_type == "CastLike" and n.domain in ("", "ai.onnx"):
                n.op_type = "Cast"
                del n.input[1:]
                n.attribute.append(onnxlite.make_attribute("to", float_type))
    return fn
