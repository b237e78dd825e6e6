"""Synthetic LLaMA-shaped decoder stacks built with onnx.helper (for the benchmark).

One layer (43 nodes): decomposed RMSNorm (Pow, ReduceMean, Add, Sqrt, Div, Mul, Mul),
Q/K/V MatMul+Add, Reshape+Transpose per head split, MatMul -> Div(scale) -> Add(mask) ->
Softmax -> MatMul, Transpose+Reshape, output MatMul+Add, residual Add, a second RMSNorm,
SwiGLU (MatMul, Sigmoid, Mul, MatMul, Mul, MatMul) and the residual Add. Weights are
shared by all layers (tiny initializers), so a 512-layer stack stays small in memory.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, INTER, SEQ = 16, 2, 32, 8
HEAD_DIM = HIDDEN // HEADS


def _init(name: str, value) -> onnx.TensorProto:
    arr = np.asarray(value)
    arr = arr.astype(np.int64) if arr.dtype.kind == "i" else arr.astype(np.float32)
    return numpy_helper.from_array(arr, name)


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    w = [
        _init("two", 2.0),
        _init("eps", 1e-6),
        _init("one", 1.0),
        _init("scale", float(np.sqrt(HEAD_DIM))),
        _init("norm_w", np.ones(HIDDEN)),
        _init("split_shape", [1, SEQ, HEADS, HEAD_DIM]),
        _init("merge_shape", [1, SEQ, HIDDEN]),
        _init("mask", np.zeros((1, 1, SEQ, SEQ))),
        _init("axes", [-1]),
    ]
    for n in ("q", "k", "v", "o"):
        w.append(_init(f"w_{n}", rng.standard_normal((HIDDEN, HIDDEN)) * 0.1))
        w.append(_init(f"b_{n}", np.zeros(HIDDEN)))
    w.append(_init("w_gate", rng.standard_normal((HIDDEN, INTER)) * 0.1))
    w.append(_init("w_up", rng.standard_normal((HIDDEN, INTER)) * 0.1))
    w.append(_init("w_down", rng.standard_normal((INTER, HIDDEN)) * 0.1))
    return w


def _rmsnorm(nodes: list, x: str, p: str) -> str:
    def add(op, ins, **kw):
        out = f"{p}_{op.lower()}{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    sq = add("Pow", [x, "two"])
    ms = add("ReduceMean", [sq, "axes"], keepdims=1)
    ae = add("Add", [ms, "eps"])
    rt = add("Sqrt", [ae])
    inv = add("Div", ["one", rt])
    nm = add("Mul", [x, inv])
    return add("Mul", ["norm_w", nm])


def decoder_stack(layers: int) -> onnx.ModelProto:
    """A ``layers``-deep decoder stack, opset 18, static shapes [1, SEQ, HIDDEN]."""
    nodes: list[onnx.NodeProto] = []

    def add(p, op, ins, **kw):
        out = f"{p}_{op.lower()}{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    x = "x"
    for i in range(layers):
        p = f"l{i}"
        h = _rmsnorm(nodes, x, f"{p}_ln1")
        heads = {}
        for n in ("q", "k", "v"):
            mm = add(p, "MatMul", [h, f"w_{n}"])
            b = add(p, "Add", [mm, f"b_{n}"])
            r = add(p, "Reshape", [b, "split_shape"])
            perm = [0, 2, 3, 1] if n == "k" else [0, 2, 1, 3]
            heads[n] = add(p, "Transpose", [r], perm=perm)
        s = add(p, "MatMul", [heads["q"], heads["k"]])
        s = add(p, "Div", [s, "scale"])
        s = add(p, "Add", [s, "mask"])
        s = add(p, "Softmax", [s], axis=-1)
        c = add(p, "MatMul", [s, heads["v"]])
        c = add(p, "Transpose", [c], perm=[0, 2, 1, 3])
        c = add(p, "Reshape", [c, "merge_shape"])
        o = add(p, "MatMul", [c, "w_o"])
        o = add(p, "Add", [o, "b_o"])
        x = add(p, "Add", [x, o])
        h = _rmsnorm(nodes, x, f"{p}_ln2")
        g = add(p, "MatMul", [h, "w_gate"])
        sg = add(p, "Sigmoid", [g])
        si = add(p, "Mul", [g, sg])
        u = add(p, "MatMul", [h, "w_up"])
        m = add(p, "Mul", [si, u])
        d = add(p, "MatMul", [m, "w_down"])
        x = add(p, "Add", [x, d])
    graph = helper.make_graph(
        nodes,
        f"decoder{layers}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        initializer=_weights(),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


# The four patterns of onnxscript's rewriter benchmark, as autofusion rules.
ONNXSCRIPT_RULES = """
name: matmul_add
match:
  ops:
    - type: MatMul
    - type: Add
      input_sources:
        input0: {from_op: 0}
        input1: {source_type: const_or_param}
rewrite: {target_op: MatMulAdd}
---
name: sigmoid_mul
match:
  ops:
    - type: Sigmoid
    - type: Mul
rewrite: {target_op: SiLU}
---
name: rmsnorm
match:
  ops:
    - type: RMSNorm
rewrite: {target_op: RMSNorm}
---
name: matmul_div_add
match:
  ops:
    - type: MatMul
    - type: Div
      input_sources:
        input0: {from_op: 0}
    - type: Add
      input_sources:
        input0: {from_op: 1}
rewrite: {target_op: ScaledScores}
"""


WEIGHT_FORMS = ("initializers", "inputs", "external")


def decoder_stack_weights(layers: int, form: str) -> onnx.ModelProto:
    """``decoder_stack`` with its own weights per layer, held as ``form``: initializers
    (in the file), graph inputs (what an LLM export with weights fed at run time looks
    like: ~12 inputs per layer), or initializers meant for external data (the caller
    saves with ``save_as_external_data``). Shape constants stay shared initializers."""
    m = decoder_stack(layers)
    g = m.graph
    per_layer = {i.name: i for i in g.initializer if i.name.startswith(("w_", "b_", "norm_w"))}
    used: dict[str, str] = {}
    for node in g.node:
        layer = node.name.split("_", 1)[0]
        for k, t in enumerate(node.input):
            if t in per_layer:
                name = f"{layer}.{t}"
                node.input[k] = name
                used[name] = t
    keep = [i for i in g.initializer if i.name not in per_layer]
    del g.initializer[:]
    g.initializer.extend(keep)
    for name, base in used.items():
        src = per_layer[base]
        if form == "inputs":
            g.input.append(helper.make_tensor_value_info(name, src.data_type, list(src.dims)))
        else:
            t = onnx.TensorProto()
            t.CopyFrom(src)
            t.name = name
            g.initializer.append(t)
    return m
