"""Seeded decoder-stack variants (issue 38): the shapes real LLaMA/GPT exports take.

``bench/synthetic.py`` builds one stack; a speed fix tuned on it can leave every other
spelling of the same transformer slow (issue 38: an "unseen" stack was 50x slower per
layer). This module builds stacks that differ on each axis real exports differ on, so a
bench can report the *worst* of them:

- softmax: the Softmax op, or decomposed (ReduceMax, Sub, Exp, ReduceSum, Div);
- norm: RMSNorm decomposed as the issue lists (Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul
  gamma), RMSNorm as HF's fp16 export spells it (Cast up, Mul x*x, ReduceMean, Add,
  Sqrt, Reciprocal, Mul, Cast down, Mul gamma), LayerNormalization, or LayerNorm
  decomposed (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add);
- biases on every projection or none; GQA/MQA (fewer KV heads repeated by Unsqueeze +
  Expand + Reshape, or Unsqueeze + Tile + Reshape); fused QKV (one MatMul, then Split or
  three Slices); K transposed straight to [B, H, D, S] (perm [0, 2, 3, 1]) or to
  [B, H, S, D] then [0, 1, 3, 2]; rotary embeddings (Slice, Neg, Concat, Mul, Add);
- scale: Div of the scores by sqrt(d), or Mul of Q by 1/sqrt(d);
- scalar constants (2, eps, sqrt(d), reshape shapes...): one initializer shared by every
  layer, one initializer per layer, or Constant nodes in every layer; reshape shapes
  constant or computed per layer from Shape/Gather/Concat (TorchScript's spelling);
- mask: an additive float input, a bool input through Where, or causal, built once from
  Range and Less;
- MLP activation: GELU (erf), GELU (tanh), SiLU, SwiGLU; residual sequential (LLaMA) or
  parallel (GPT-J, Falcon); linear weights as [in, out] or as [out, in] + Transpose;
- fp32 or fp16; weights as initializers, graph inputs or external data; hidden size, heads,
  KV heads, intermediate size and sequence length.

Weights are never materialised at real size: as graph inputs they have no data, as
external data the file is written sparsely (a hole, ``truncate``) once it would pass
``REAL_DATA_BYTES``, and initializers past ``INITIALIZER_LIMIT`` bytes are refused (a
70B-shaped layer must not allocate gigabytes).

    .venv/bin/python bench/stack_variants.py --list
    .venv/bin/python bench/stack_variants.py unseen38 128 /tmp/unseen38-128.onnx [--small]
    .venv/bin/python bench/stack_variants.py random:7 64 /tmp/r7.onnx

``VARIANTS`` holds the named variants (``unseen38`` is issue 38's unseen stack, its list
of differences from synthetic.py), ``random_variant(seed)`` draws one from the axes, and
``build_stack(variant, layers, path)`` writes the model. Rotary embeddings are applied in
the [B, S, H, D] layout (before the head transpose) so that both K perms stay available;
the causal mask is built once, before the first layer, as exports do.

``repeat_layers(export, copies, out)`` makes a deep stack of a real export: the longest
unit of nodes equal (op types, arity) to the unit just before it, cut where the fewest
tensors cross (the residual stream between layers), repeated ``copies`` times, each copy
reading what the previous one made; found by structure, never by node names.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
# The axes and their values (the first value of each is synthetic.py's choice or the
# plainest spelling).
AXES: dict[str, tuple] = {
    "softmax": ("fused", "decomposed"),
    "norm": ("rms", "rms_cast", "layernorm", "layernorm_decomposed"),
    "bias": (False, True),
    "kv_repeat": ("expand", "tile"),
    "qkv": ("separate", "split", "slice"),
    "k_perm": ("0231", "0132"),
    "rope": (False, True),
    "scale": ("div", "mul_q"),
    "constants": ("shared", "per_layer", "nodes"),
    "reshape": ("const", "shape_ops"),
    "mask": ("additive", "where", "causal"),
    "activation": ("swiglu", "silu", "gelu_erf", "gelu_tanh"),
    "residual": ("sequential", "parallel"),
    "linear": ("matmul", "transpose_w"),
    "dtype": ("fp32", "fp16"),
    "weights": ("initializers", "inputs", "external"),
}
WEIGHT_FORMS = AXES["weights"]
# (hidden, heads, kv heads, intermediate, seq) that random_variant draws from
DIMS = (
    (256, 4, 4, 688, 128),
    (512, 8, 2, 1376, 256),
    (768, 12, 12, 3072, 512),
    (1024, 16, 4, 2816, 1024),
    (2048, 16, 16, 5504, 2048),
    (4096, 32, 8, 14336, 2048),
    (4096, 32, 32, 11008, 2048),
)
# Initializers larger than this are refused (use inputs or external data at that size).
INITIALIZER_LIMIT = 512 << 20
# External data up to this many bytes is written as random values; past it the file is
# one sparse hole of the right length (zeros, no disk, no RAM).
REAL_DATA_BYTES = 64 << 20
# (head size 8 and seq 6: unequal, so that a [.., S, D] / [.., D, S] mix-up shows)
SMALL = {"hidden": 32, "heads": 4, "kv_heads": 2, "inter": 48, "seq": 6}


@dataclass(frozen=True)
class Variant:
    """One decoder-stack spelling: a value for every axis of ``AXES`` and the sizes."""

    name: str
    softmax: str = "fused"
    norm: str = "rms"
    bias: bool = False
    kv_repeat: str = "expand"
    qkv: str = "separate"
    k_perm: str = "0231"
    rope: bool = False
    scale: str = "div"
    constants: str = "shared"
    reshape: str = "const"
    mask: str = "additive"
    activation: str = "swiglu"
    residual: str = "sequential"
    linear: str = "matmul"
    dtype: str = "fp32"
    weights: str = "initializers"
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 4
    inter: int = 688
    seq: int = 128
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for axis, values in AXES.items():
            if getattr(self, axis) not in values:
                raise ValueError(f"{self.name}: {axis}={getattr(self, axis)!r} not in {values}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: heads must divide hidden, kv_heads divide heads")
        if self.rope and (self.hidden // self.heads) % 2:
            raise ValueError(f"{self.name}: rotary embeddings need an even head size")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def small(self, **dims: int) -> Variant:
        """The same spelling at test size (``SMALL``, overridden by ``dims``)."""
        return dataclasses.replace(self, **{**SMALL, **dims})

    def axes(self) -> dict[str, object]:
        """The value of every axis (what makes two variants differ)."""
        return {a: getattr(self, a) for a in AXES}

    def weight_bytes_per_layer(self) -> int:
        h, d, i = self.hidden, self.head_dim, self.inter
        qkv = h * (self.heads + 2 * self.kv_heads) * d
        mlp = (3 if self.activation == "swiglu" else 2) * h * i
        return (qkv + h * h + mlp + 4 * h) * (2 if self.dtype == "fp16" else 4)


def _v(name: str, notes: str = "", **kw: object) -> Variant:
    return Variant(name=name, notes=notes, **kw)  # type: ignore[arg-type]


_NAMED = (
    _v(
        "synthetic_like",
        "bench/synthetic.py's spelling (fused softmax, biases, shared constants), own dims",
        norm="rms",
        bias=True,
    ),
    _v(
        "unseen38",
        "issue 38's unseen stack: decomposed softmax after Div sqrt(d) and mask Add, no "
        "Q/K/V bias, K perm [0,2,3,1], decomposed RMSNorm with shared constants, SwiGLU, "
        "hidden 4096 / seq 2048 / 32 heads / inter 14336, weights as graph inputs",
        softmax="decomposed",
        norm="rms",
        k_perm="0231",
        constants="shared",
        activation="swiglu",
        weights="inputs",
        hidden=4096,
        heads=32,
        kv_heads=32,
        inter=14336,
        seq=2048,
    ),
    _v(
        "llama_gqa_fp16",
        "LLaMA-3-like: GQA 32/8 by Expand, rotary, HF's fp16 RMSNorm casts, causal mask "
        "from Range/Less, external weights",
        norm="rms_cast",
        rope=True,
        k_perm="0132",
        mask="causal",
        dtype="fp16",
        weights="external",
        hidden=4096,
        heads=32,
        kv_heads=8,
        inter=14336,
        seq=2048,
    ),
    _v(
        "mistral_tile_where",
        "GQA by Tile, rotary, decomposed softmax, bool mask through Where, per-layer constants",
        softmax="decomposed",
        kv_repeat="tile",
        rope=True,
        mask="where",
        constants="per_layer",
        weights="inputs",
        hidden=1024,
        heads=16,
        kv_heads=4,
        inter=3584,
        seq=1024,
    ),
    _v(
        "gpt2_like",
        "GPT-2-like: LayerNormalization, biases, fused QKV by Split, GELU tanh, K perm "
        "[0,1,3,2], Constant nodes in every layer",
        norm="layernorm",
        bias=True,
        qkv="split",
        k_perm="0132",
        constants="nodes",
        activation="gelu_tanh",
        hidden=768,
        heads=12,
        kv_heads=12,
        inter=3072,
        seq=512,
        weights="inputs",
    ),
    _v(
        "bert_decomposed",
        "BERT-like decomposition: LayerNorm and softmax decomposed, GELU erf, biases, "
        "per-layer constants, Shape-computed reshapes",
        softmax="decomposed",
        norm="layernorm_decomposed",
        bias=True,
        k_perm="0132",
        constants="per_layer",
        reshape="shape_ops",
        activation="gelu_erf",
        hidden=256,
        heads=4,
        kv_heads=4,
        inter=1024,
        seq=128,
    ),
    _v(
        "gptj_parallel",
        "GPT-J-like: parallel residual, rotary, LayerNormalization, GELU tanh, [out, in] "
        "weights with Transpose",
        norm="layernorm",
        rope=True,
        activation="gelu_tanh",
        residual="parallel",
        linear="transpose_w",
        weights="inputs",
        hidden=4096,
        heads=16,
        kv_heads=16,
        inter=16384,
        seq=2048,
    ),
    _v(
        "falcon_mqa_slice",
        "Falcon-like: multi-query (1 KV head), fused QKV by Slice, parallel residual, "
        "GELU erf, scale on Q",
        norm="layernorm",
        qkv="slice",
        kv_heads=1,
        rope=True,
        scale="mul_q",
        activation="gelu_erf",
        residual="parallel",
        weights="external",
        hidden=2048,
        heads=32,
        inter=8192,
        seq=2048,
    ),
    _v(
        "silu_mlp_nodes",
        "plain SiLU MLP, Constant nodes, Shape-computed reshapes, Where mask, fp16",
        activation="silu",
        constants="nodes",
        reshape="shape_ops",
        mask="where",
        dtype="fp16",
        hidden=512,
        heads=8,
        kv_heads=8,
        inter=2048,
        seq=256,
    ),
    _v(
        "all_decomposed",
        "everything decomposed, every constant per layer, biases, GQA by Tile, fused QKV "
        "by Slice, GELU tanh",
        softmax="decomposed",
        norm="layernorm_decomposed",
        bias=True,
        kv_repeat="tile",
        qkv="slice",
        constants="per_layer",
        reshape="shape_ops",
        mask="causal",
        activation="gelu_tanh",
        linear="transpose_w",
        hidden=512,
        heads=8,
        kv_heads=2,
        inter=1376,
        seq=256,
        weights="external",
    ),
    _v(
        "qwen_bias_split",
        "Qwen-like: biases on Q/K/V only spelled as a fused QKV Split with bias, GQA, "
        "rotary, decomposed RMSNorm with Constant nodes",
        bias=True,
        qkv="split",
        kv_heads=4,
        rope=True,
        constants="nodes",
        k_perm="0132",
        weights="inputs",
        hidden=2048,
        heads=16,
        inter=5504,
        seq=1024,
    ),
    _v(
        "phi_parallel_fp16",
        "Phi-like: parallel residual, LayerNormalization, GELU tanh, fp16, where mask, "
        "scale on Q, shared constants",
        norm="layernorm",
        bias=True,
        scale="mul_q",
        mask="where",
        activation="gelu_tanh",
        residual="parallel",
        dtype="fp16",
        weights="external",
        hidden=2560,
        heads=32,
        kv_heads=32,
        inter=10240,
        seq=2048,
    ),
    _v(
        "rms_cast_silu_shapeops",
        "HF fp32 RMSNorm spelling (casts kept), SiLU MLP, Shape-computed reshapes, "
        "[out, in] weights, causal mask",
        norm="rms_cast",
        activation="silu",
        reshape="shape_ops",
        linear="transpose_w",
        mask="causal",
        hidden=256,
        heads=8,
        kv_heads=2,
        inter=768,
        seq=128,
    ),
)
VARIANTS: dict[str, Variant] = {v.name: v for v in _NAMED}


def random_variant(seed: int) -> Variant:
    """A variant drawn from ``AXES`` and ``DIMS`` by ``seed`` (the same seed, the same
    variant); initializers only at sizes whose weights stay small."""
    rng = random.Random(seed)
    choice = {a: rng.choice(vals) for a, vals in AXES.items()}
    hidden, heads, kv, inter, seq = rng.choice(DIMS)
    if choice["rope"] and (hidden // heads) % 2:
        choice["rope"] = False
    v = Variant(
        name=f"random:{seed}",
        notes="drawn by random_variant",
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        inter=inter,
        seq=seq,
        **choice,
    )
    if v.weights == "initializers" and v.weight_bytes_per_layer() > (4 << 20):
        v = dataclasses.replace(v, weights="inputs")
    return v


def variant(name: str) -> Variant:
    """A named variant, or ``random:SEED``."""
    if name.startswith("random:"):
        return random_variant(int(name.split(":", 1)[1]))
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}") from None


class _Builder:
    """The nodes, constants and weights of one stack under construction."""

    def __init__(self, v: Variant, weights_form: str) -> None:
        self.v = v
        self.form = weights_form
        self.np_dtype = np.float16 if v.dtype == "fp16" else np.float32
        self.onnx_dtype = TensorProto.FLOAT16 if v.dtype == "fp16" else TensorProto.FLOAT
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.shared: dict[str, str] = {}
        self.external: list[tuple[onnx.TensorProto, int]] = []  # (tensor, nbytes)
        self.rng = np.random.default_rng(0)
        self.layer = "g"
        self.count = 0

    # -- nodes and constants -------------------------------------------------------
    def op(self, op: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str | list[str]:
        self.count += 1
        base = f"{self.layer}.{op.lower()}{self.count}"
        outs = [base] if n_out == 1 else [f"{base}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=base, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, key: str, value: object, kind: str = "float") -> str:
        """A constant per the variant's ``constants`` axis: one shared initializer, one
        initializer per layer, or a Constant node in the layer."""
        arr = np.asarray(value, dtype=np.int64 if kind == "int" else self.np_dtype)
        if kind == "bool":
            arr = np.asarray(value, dtype=bool)
        mode = self.v.constants if self.layer != "g" else "shared"
        if mode == "shared":
            name = f"c.{key}"
            if name not in self.shared:
                self.shared[name] = name
                self.inits.append(numpy_helper.from_array(arr, name))
            return name
        name = f"{self.layer}.c.{key}"
        if mode == "per_layer":
            if name not in self.shared:
                self.shared[name] = name
                self.inits.append(numpy_helper.from_array(arr, name))
            return name
        if name not in self.shared:
            self.shared[name] = name
            t = numpy_helper.from_array(arr, name + ".value")
            self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=t))
        return name

    def ints(self, key: str, value: list[int]) -> str:
        return self.const(key, value, "int")

    def weight(self, key: str, shape: tuple[int, ...], fill: float | None = None) -> str:
        """A weight of the layer, held as the build's weight form."""
        name = f"{self.layer}.{key}"
        nbytes = int(np.prod(shape)) * np.dtype(self.np_dtype).itemsize
        if self.form == "inputs":
            self.inputs.append(helper.make_tensor_value_info(name, self.onnx_dtype, list(shape)))
            return name
        if self.form == "initializers":
            if fill is None:
                arr = self.rng.standard_normal(shape).astype(self.np_dtype) * 0.05
            else:
                arr = np.full(shape, fill, dtype=self.np_dtype)
            self.inits.append(numpy_helper.from_array(arr.astype(self.np_dtype), name))
            return name
        t = TensorProto(name=name, data_type=self.onnx_dtype, dims=list(shape))
        t.data_location = TensorProto.EXTERNAL
        self.inits.append(t)
        self.external.append((t, nbytes))
        return name

    # -- building blocks -----------------------------------------------------------
    def linear(self, x: str, key: str, n_in: int, n_out: int, bias: bool) -> str:
        if self.v.linear == "transpose_w":
            w = self.op("Transpose", [self.weight(key, (n_out, n_in))], perm=[1, 0])
        else:
            w = self.weight(key, (n_in, n_out))
        y = self.op("MatMul", [x, w])
        if bias:
            y = self.op("Add", [y, self.weight(key + "_b", (n_out,), 0.0)])
        return y

    def reshape(self, x: str, key: str, tail: list[int], like: str) -> str:
        """Reshape ``x`` to [batch, seq, *tail]: a constant shape, or computed from
        ``like``'s Shape (Gather batch and seq, Unsqueeze, Concat) as TorchScript does."""
        v = self.v
        if v.reshape == "const":
            return self.op("Reshape", [x, self.ints(key, [1, v.seq, *tail])])
        shape = self.op("Shape", [like])
        dims = [
            self.op(
                "Unsqueeze",
                [
                    self.op("Gather", [shape, self.ints(f"idx{k}", k)], axis=0),
                    self.ints("ax0", [0]),
                ],
            )
            for k in (0, 1)
        ]
        target = self.op("Concat", [*dims, self.ints(key + "_tail", tail)], axis=0)
        return self.op("Reshape", [x, target])

    def norm(self, x: str, key: str) -> str:
        v, h = self.v, self.v.hidden
        gamma = self.weight(key + "_g", (h,), 1.0)
        if v.norm == "layernorm":
            beta = self.weight(key + "_b", (h,), 0.0)
            return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        axes = self.ints("axes_last", [-1])
        if v.norm == "layernorm_decomposed":
            mean = self.op("ReduceMean", [x, axes], keepdims=1)
            d = self.op("Sub", [x, mean])
            var = self.op("ReduceMean", [self.op("Pow", [d, self.const("two", 2.0)]), axes])
            std = self.op("Sqrt", [self.op("Add", [var, self.const("eps", 1e-5)])])
            y = self.op("Mul", [self.op("Div", [d, std]), gamma])
            return self.op("Add", [y, self.weight(key + "_b", (h,), 0.0)])
        if v.norm == "rms":  # issue 38's spelling: x / sqrt(mean(x^2) + eps) * gamma
            ms = self.op("ReduceMean", [self.op("Pow", [x, self.const("two", 2.0)]), axes])
            rt = self.op("Sqrt", [self.op("Add", [ms, self.const("eps", 1e-6)])])
            return self.op("Mul", [self.op("Div", [x, rt]), gamma])
        # rms_cast: HF's spelling, computed in fp32 whatever the model's dtype
        xf = self.op("Cast", [x], to=TensorProto.FLOAT)
        ms = self.op("ReduceMean", [self.op("Mul", [xf, xf]), axes])
        eps = self.const("eps32", 1e-6) if v.dtype == "fp32" else self._f32("eps32", 1e-6)
        r = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [ms, eps])])])
        y = self.op("Cast", [self.op("Mul", [xf, r])], to=self.onnx_dtype)
        return self.op("Mul", [gamma, y])

    def _f32(self, key: str, value: float) -> str:
        """An fp32 scalar in an fp16 model (HF's upcast norms and softmax)."""
        keep = self.np_dtype
        self.np_dtype = np.float32
        try:
            return self.const(key, value)
        finally:
            self.np_dtype = keep

    def softmax(self, s: str) -> str:
        v = self.v
        if v.dtype == "fp16":  # softmax in fp32, as HF's attention does
            s = self.op("Cast", [s], to=TensorProto.FLOAT)
        if v.softmax == "fused":
            p = self.op("Softmax", [s], axis=-1)
        else:
            axes = self.ints("axes_last", [-1])
            m = self.op("ReduceMax", [s, axes], keepdims=1)
            e = self.op("Exp", [self.op("Sub", [s, m])])
            p = self.op("Div", [e, self.op("ReduceSum", [e, axes], keepdims=1)])
        return self.op("Cast", [p], to=self.onnx_dtype) if v.dtype == "fp16" else p

    def rope(self, x: str, cos: str, sin: str) -> str:
        """Rotary embedding of x [B, S, H, D] (rotate_half: Slice, Neg, Concat)."""
        half = self.v.head_dim // 2
        ax = self.ints("ax_last", [-1])
        x1 = self.op("Slice", [x, self.ints("zero1", [0]), self.ints("rope_half", [half]), ax])
        x2 = self.op("Slice", [x, self.ints("rope_half", [half]), self.ints("big", [1 << 30]), ax])
        rot = self.op("Concat", [self.op("Neg", [x2]), x1], axis=-1)
        return self.op("Add", [self.op("Mul", [x, cos]), self.op("Mul", [rot, sin])])

    def repeat_kv(self, t: str, tail: list[int]) -> str:
        """[B, kv, a, b] -> [B, heads, a, b] (GQA): Unsqueeze, Expand or Tile, Reshape."""
        v = self.v
        rep = v.heads // v.kv_heads
        if rep == 1:
            return t
        u = self.op("Unsqueeze", [t, self.ints("ax2", [2])])
        if v.kv_repeat == "expand":
            shape = self.ints(f"kv_expand_{tail[0]}x{tail[1]}", [1, v.kv_heads, rep, *tail])
            r = self.op("Expand", [u, shape])
        else:
            r = self.op("Tile", [u, self.ints("kv_tile", [1, 1, rep, 1, 1])])
        merged = self.ints(f"kv_merge_{tail[0]}x{tail[1]}", [1, v.heads, *tail])
        return self.op("Reshape", [r, merged])

    def qkv(self, h: str) -> tuple[str, str, str]:
        v, d = self.v, self.v.head_dim
        nq, nkv = v.heads * d, v.kv_heads * d
        if v.qkv == "separate":
            return (
                self.linear(h, "wq", v.hidden, nq, v.bias),
                self.linear(h, "wk", v.hidden, nkv, v.bias),
                self.linear(h, "wv", v.hidden, nkv, v.bias),
            )
        fused = self.linear(h, "wqkv", v.hidden, nq + 2 * nkv, v.bias)
        if v.qkv == "split":
            q, k, val = self.op(
                "Split", [fused, self.ints("qkv_sizes", [nq, nkv, nkv])], 3, axis=-1
            )
            return q, k, val
        ax = self.ints("ax_last", [-1])
        bounds = [0, nq, nq + nkv, nq + 2 * nkv]
        outs = [
            self.op("Slice", [fused, self.ints(f"qkv_s{k}", [a]), self.ints(f"qkv_e{k}", [b]), ax])
            for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))
        ]
        return outs[0], outs[1], outs[2]

    def attention(self, h: str, mask: str, rope: tuple[str, str] | None) -> str:
        v, d = self.v, self.v.head_dim
        q, k, val = self.qkv(h)
        q = self.reshape(q, "split_q", [v.heads, d], h)
        k = self.reshape(k, "split_kv", [v.kv_heads, d], h)
        val = self.reshape(val, "split_kv", [v.kv_heads, d], h)
        if rope is not None:
            q, k = self.rope(q, *rope), self.rope(k, *rope)
        q = self.op("Transpose", [q], perm=[0, 2, 1, 3])
        if v.scale == "mul_q":
            q = self.op("Mul", [q, self.const("inv_sqrt_d", 1.0 / math.sqrt(d))])
        if v.k_perm == "0231":
            kt = self.repeat_kv(self.op("Transpose", [k], perm=[0, 2, 3, 1]), [d, v.seq])
        else:
            k = self.repeat_kv(self.op("Transpose", [k], perm=[0, 2, 1, 3]), [v.seq, d])
            kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        val = self.repeat_kv(self.op("Transpose", [val], perm=[0, 2, 1, 3]), [v.seq, d])
        s = self.op("MatMul", [q, kt])
        if v.scale == "div":
            s = self.op("Div", [s, self.const("sqrt_d", math.sqrt(d))])
        if v.mask == "where":
            s = self.op("Where", [mask, s, self.const("neg", float(np.finfo(self.np_dtype).min))])
        else:
            s = self.op("Add", [s, mask])
        c = self.op("MatMul", [self.softmax(s), val])
        c = self.reshape(self.op("Transpose", [c], perm=[0, 2, 1, 3]), "merge", [v.hidden], h)
        return self.linear(c, "wo", v.hidden, v.hidden, v.bias)

    def mlp(self, h: str) -> str:
        v = self.v
        if v.activation == "swiglu":
            g = self.linear(h, "w_gate", v.hidden, v.inter, v.bias)
            u = self.linear(h, "w_up", v.hidden, v.inter, v.bias)
            a = self.op("Mul", [self.op("Mul", [g, self.op("Sigmoid", [g])]), u])
            return self.linear(a, "w_down", v.inter, v.hidden, v.bias)
        u = self.linear(h, "w_up", v.hidden, v.inter, v.bias)
        if v.activation == "silu":
            a = self.op("Mul", [u, self.op("Sigmoid", [u])])
        elif v.activation == "gelu_erf":
            e = self.op("Erf", [self.op("Div", [u, self.const("sqrt2", math.sqrt(2.0))])])
            a = self.op("Mul", [self.op("Mul", [u, self.op("Add", [e, self.const("one", 1.0)])]),
                                self.const("half", 0.5)])  # fmt: skip
        else:  # gelu_tanh
            cube = self.op("Mul", [self.op("Pow", [u, self.const("three", 3.0)]),
                                   self.const("gelu_c", 0.044715)])  # fmt: skip
            inner = self.op("Mul", [self.op("Add", [u, cube]),
                                    self.const("sqrt_2_pi", math.sqrt(2 / math.pi))])  # fmt: skip
            t = self.op("Add", [self.op("Tanh", [inner]), self.const("one", 1.0)])
            a = self.op("Mul", [self.op("Mul", [self.const("half", 0.5), u]), t])
        return self.linear(a, "w_down", v.inter, v.hidden, v.bias)

    def layer_block(self, i: int, x: str, mask: str, rope: tuple[str, str] | None) -> str:
        self.layer = f"l{i}"
        if self.v.residual == "parallel":
            h = self.norm(x, "ln1")
            a = self.attention(h, mask, rope)
            return self.op("Add", [self.op("Add", [x, a]), self.mlp(h)])
        x = self.op("Add", [x, self.attention(self.norm(x, "ln1"), mask, rope)])
        return self.op("Add", [x, self.mlp(self.norm(x, "ln2"))])

    # -- graph-level inputs --------------------------------------------------------
    def mask_input(self) -> str:
        v, s = self.v, self.v.seq
        if v.mask == "additive":
            self.inputs.append(helper.make_tensor_value_info("attention_mask", self.onnx_dtype,
                                                             [1, 1, s, s]))  # fmt: skip
            return "attention_mask"
        if v.mask == "where":
            self.inputs.append(helper.make_tensor_value_info("mask_bool", TensorProto.BOOL,
                                                             [1, 1, s, s]))  # fmt: skip
            return "mask_bool"
        # causal: built once from Range and Less (row < col is the future)
        pos = self.op("Range", [self.ints("r0", 0), self.ints("seq", s), self.ints("r1", 1)])
        rows = self.op("Unsqueeze", [pos, self.ints("ax1", [1])])
        cols = self.op("Unsqueeze", [pos, self.ints("ax0", [0])])
        future = self.op("Less", [rows, cols])
        neg = self.const("neg", float(np.finfo(self.np_dtype).min))
        return self.op("Where", [future, neg, self.const("zero", 0.0)])

    def rope_tables(self) -> tuple[str, str] | None:
        if not self.v.rope:
            return None
        d, s = self.v.head_dim, self.v.seq
        inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
        ang = np.outer(np.arange(s), inv)
        ang = np.concatenate([ang, ang], axis=-1)[:, None, :]  # [S, 1, D]
        cos, sin = np.cos(ang).astype(self.np_dtype), np.sin(ang).astype(self.np_dtype)
        self.inits += [numpy_helper.from_array(cos, "rope_cos"),
                       numpy_helper.from_array(sin, "rope_sin")]  # fmt: skip
        return "rope_cos", "rope_sin"


def stack_model(
    v: Variant, layers: int, weights_form: str | None = None
) -> tuple[onnx.ModelProto, list]:
    """The ``layers``-deep stack of ``v`` and its external tensors [(TensorProto, bytes)]
    (empty unless ``weights_form`` is ``external``; ``build_stack`` places them)."""
    form = weights_form or v.weights
    if form not in WEIGHT_FORMS:
        raise ValueError(f"weights form {form!r} not in {WEIGHT_FORMS}")
    if form == "initializers" and v.weight_bytes_per_layer() * layers > INITIALIZER_LIMIT:
        raise ValueError(
            f"{v.name}: {layers} layers of initializers would hold "
            f"{v.weight_bytes_per_layer() * layers / 2**30:.1f} GiB; use inputs or external"
        )
    b = _Builder(v, form)
    b.inputs.append(helper.make_tensor_value_info("x", b.onnx_dtype, [1, v.seq, v.hidden]))
    mask = b.mask_input()
    rope = b.rope_tables()
    x = "x"
    for i in range(layers):
        x = b.layer_block(i, x, mask, rope)
    b.layer = "final"
    out = b.norm(x, "ln_f")
    graph = helper.make_graph(
        b.nodes,
        f"{v.name.replace(':', '_')}_{layers}",
        b.inputs,
        [helper.make_tensor_value_info(out, b.onnx_dtype, [1, v.seq, v.hidden])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    # make_graph copied the initializers: hand back the model's own external tensors
    mine = {t.name: t for t in model.graph.initializer}
    return model, [(mine[t.name], nbytes) for t, nbytes in b.external]


def _place_external(path: Path, tensors: list[tuple[onnx.TensorProto, int]]) -> None:
    """Point each external tensor at its slice of ``path``.data and write that file:
    random values while small, else one sparse hole of the full length."""
    data = path.with_name(path.name + ".data")
    total = 0
    for t, nbytes in tensors:
        del t.external_data[:]
        for k, val in (("location", data.name), ("offset", str(total)), ("length", str(nbytes))):
            t.external_data.add(key=k, value=val)
        total += (nbytes + 63) // 64 * 64  # 64-byte aligned, as onnx's own writer
    with open(data, "wb") as fh:
        if total <= REAL_DATA_BYTES:
            rng = np.random.default_rng(0)
            for t, nbytes in tensors:
                off = int(t.external_data[1].value)
                fh.seek(off)
                n = nbytes // (2 if t.data_type == TensorProto.FLOAT16 else 4)
                kind = np.float16 if t.data_type == TensorProto.FLOAT16 else np.float32
                fh.write((rng.standard_normal(n) * 0.05).astype(kind).tobytes())
        fh.truncate(total)  # the rest (or all of it) a hole


def build_stack(
    v: Variant | str, layers: int, path: Path | str, weights_form: str | None = None
) -> Path:
    """Write the ``layers``-deep stack of variant ``v`` (a Variant or a name) to ``path``
    with its weights as ``weights_form`` (default: the variant's own); return the path."""
    v = variant(v) if isinstance(v, str) else v
    path = Path(path)
    model, external = stack_model(v, layers, weights_form)
    if external:
        _place_external(path, external)
    onnx.save(model, str(path))
    return path


def signature(model: onnx.ModelProto) -> tuple:
    """What a stack is made of, for telling variants apart: op types with counts, the
    Transpose perms, the element types and how many inputs and initializers."""
    ops: dict[str, int] = {}
    perms = set()
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
        for a in n.attribute:
            if n.op_type == "Transpose" and a.name == "perm":
                perms.add(tuple(a.ints))
    types = sorted({i.type.tensor_type.elem_type for i in model.graph.input})
    return (
        tuple(sorted(ops.items())),
        tuple(sorted(perms)),
        tuple(types),
        len(model.graph.input),
        len(model.graph.initializer),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", nargs="?", help="a name of VARIANTS or random:SEED")
    ap.add_argument("layers", nargs="?", type=int)
    ap.add_argument("path", nargs="?")
    ap.add_argument("--weights", choices=WEIGHT_FORMS, help="default: the variant's own")
    ap.add_argument("--small", action="store_true", help="test sizes (hidden 32, seq 6)")
    ap.add_argument("--list", action="store_true", help="the named variants and their axes")
    args = ap.parse_args()
    if args.list or not args.path:
        for v in VARIANTS.values():
            dims = f"h{v.hidden} heads{v.heads}/{v.kv_heads} i{v.inter} s{v.seq}"
            print(f"{v.name:24s} {dims:30s} {v.notes}")
        return
    v = variant(args.variant)
    v = v.small() if args.small else v
    p = build_stack(v, args.layers, args.path, args.weights)
    print(f"{p} ({os.path.getsize(p)} bytes)")


if __name__ == "__main__":
    main()


# -- stacks from real exports: one layer repeated ------------------------------------


def _constant_tensors(g: onnx.GraphProto) -> set[str]:
    """Initializers and what is computed from them alone (Constant nodes included)."""
    const = {t.name for t in g.initializer} | {""}
    for n in g.node:
        if all(i in const for i in n.input):
            const.update(n.output)
    return const


def _crossing_counts(g: onnx.GraphProto, const: set[str]) -> list[int]:
    """For every position p (between node p-1 and node p), how many non-constant tensors
    made before p are read at or after p (graph outputs are read at the end)."""
    nodes = g.node
    made = {o: i for i, n in enumerate(nodes) for o in n.output if o not in const}
    last = dict.fromkeys(made, -1)
    for i, n in enumerate(nodes):
        for t in n.input:
            if t in last:
                last[t] = i
    for o in g.output:
        if o.name in last:
            last[o.name] = len(nodes)
    diff = [0] * (len(nodes) + 2)
    for t, i in made.items():
        if last[t] > i:
            diff[i + 1] += 1
            diff[last[t] + 1] -= 1
    counts, run = [], 0
    for p in range(len(nodes) + 1):
        run += diff[p]
        counts.append(run)
    return counts


def _node_sig(n: onnx.NodeProto) -> tuple:
    return (n.domain, n.op_type, len(n.input), len(n.output))


def _repeated_units(g: onnx.GraphProto, const: set[str]) -> Iterator[tuple[int, int, int]]:
    """(a, b, period): units [a, b) of nodes whose sequence (op types, arity) equals the
    ``period`` nodes just before it, longest first (a layer; shortened to its own smallest
    period when it is several layers), each period's places by how few non-constant
    tensors cross there (a layer boundary first), the last place first."""
    sigs = [hash(_node_sig(n)) for n in g.node]
    n = len(sigs)
    mod, base = (1 << 61) - 1, 1_000_003
    pre, pw = [0] * (n + 1), [1] * (n + 1)
    for i, x in enumerate(sigs):
        pre[i + 1] = (pre[i] * base + x) % mod
        pw[i + 1] = pw[i] * base % mod

    def h(i: int, length: int) -> int:
        return (pre[i + length] - pre[i] * pw[length]) % mod

    def repeats(i: int, period: int) -> bool:
        return (
            h(i - period, period) == h(i, period) and sigs[i - period : i] == sigs[i : i + period]
        )

    counts = _crossing_counts(g, const)
    seen: set[int] = set()
    for period in range(n // 2, 4, -1):
        starts = [i for i in range(period, n - period + 1) if repeats(i, period)]
        if not starts:
            continue
        for d in range(5, period):  # several layers: one of them
            if period % d == 0 and all(repeats(starts[0] + k, d) for k in range(0, period, d)):
                period = d
                starts = [i for i in range(period, n - period + 1) if repeats(i, period)]
                break
        if period in seen:
            continue
        seen.add(period)
        for a in sorted(starts, key=lambda i: (counts[i], -i))[:8]:
            yield a, a + period, period


def _carried(nodes: list, a: int, b: int, period: int, const: set[str]) -> dict[str, str]:
    """What the unit [a, b) reads of the unit before it, each with the tensor of the unit
    that the next copy reads instead (the same output of the same node). ValueError when
    it reads nothing of it, or something with no counterpart."""
    prev, unit = nodes[a - period : a], nodes[a:b]
    made = {o for n in unit for o in n.output}
    carry = {}
    for k, n in enumerate(prev):
        for j, o in enumerate(n.output):
            if o and o not in const:
                carry[o] = unit[k].output[j]
    reads = {t for n in unit for t in n.input} - made
    carried = {t: carry[t] for t in reads if t in carry}
    if not carried:
        raise ValueError("the repeated unit reads nothing of the unit before it")
    return carried


def _copied(nodes: list, a: int, b: int, copies: int, carried: dict[str, str]) -> tuple:
    """The nodes with the unit [a, b) present ``copies`` times (what follows reads the
    last copy), and the last copy's name of each tensor the unit makes."""
    import copy as _copy

    unit = nodes[a:b]
    made = {o for n in unit for o in n.output if o}
    out = list(nodes[:b])
    last = {t: t for t in made}
    for c in range(1, copies):
        rename = {t: f"{t}__r{c}" for t in made}
        feed = {t: last[src] for t, src in carried.items()}
        for n in unit:
            nn = _copy.deepcopy(n)
            nn.name = f"{n.name}__r{c}"
            for k, t in enumerate(nn.input):
                nn.input[k] = rename.get(t, feed.get(t, t))
            for k, t in enumerate(nn.output):
                nn.output[k] = rename.get(t, t)
            out.append(nn)
        last = rename
    for n in nodes[b:]:
        nn = _copy.deepcopy(n)
        for k, t in enumerate(nn.input):
            nn.input[k] = last.get(t, t)
        out.append(nn)
    return out, last


def repeat_layers(path: Path | str, copies: int, out: Path | str) -> dict[str, int]:
    """Rebuild the export at ``path`` with one repeated layer (``_repeated_units``, found
    by structure, never by node names) present ``copies`` times, written to ``out``
    (weights shared by the copies). Returns the number of such layers, of nodes and of
    nodes in the unit. ValueError when no repeated unit carries the stream from one copy
    to the next, or the copies do not pass strict shape inference (a unit that changes
    its input's shape: strided convolutions)."""
    m = onnx.load(str(path), load_external_data=False)
    g = m.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for n in g.node for a in n.attribute):  # fmt: skip
        raise ValueError("subgraphs (If/Loop/Scan): outer names are not renamed")
    const = _constant_tensors(g)
    nodes = list(g.node)
    why = "no repeated layer found (no unit of 5+ nodes equal to the one before)"
    for a, b, period in _repeated_units(g, const):
        try:
            carried = _carried(nodes, a, b, period, const)
        except ValueError as exc:
            why = str(exc)
            continue
        new_nodes, last = _copied(nodes, a, b, copies, carried)
        trial = onnx.ModelProto()
        trial.CopyFrom(m)
        tg = trial.graph
        del tg.node[:]
        tg.node.extend(new_nodes)
        for o in tg.output:
            o.name = last.get(o.name, o.name)
        del tg.value_info[:]  # shapes inferred again by whoever loads it
        try:
            onnx.shape_inference.infer_shapes(trial, strict_mode=True)
        except Exception as exc:  # onnx raises several kinds: the copies do not fit
            why = f"the repeated copies do not infer: {str(exc)[:100]}"
            continue
        onnx.save(trial, str(out))
        sigs = [_node_sig(n) for n in nodes]
        unit = sigs[a:b]
        found = sum(1 for k in range(len(nodes) - period + 1) if sigs[k : k + period] == unit)
        return {"layers": found + copies - 1, "nodes": len(new_nodes), "unit_nodes": period}
    raise ValueError(why)
