"""onnxscript's rewriter with the four reference patterns (the counterpart of
``autofusion match --rules <ONNXSCRIPT_RULES>``), one whole process, for bench/scale.py.

    .venv/bin/python bench/onnxscript_four.py MODEL.onnx

Needs the bench extra (``pip install -e .[bench]``). Prints the number of rewrites.
"""

from __future__ import annotations

import sys

import onnx
from onnxscript import ir
from onnxscript.rewriter import pattern


def _matmul_add(op, x, w, b):
    return op.Add(op.MatMul(x, w), b)


def _matmul_add_r(op, x, w, b):
    return op.MatMulAdd(x, w, b, _domain="bench")


def _silu(op, x):
    return op.Mul(x, op.Sigmoid(x))


def _silu_r(op, x):
    return op.SiLU(x, _domain="bench")


def _rmsnorm(op, x, two, axes, eps, one, w):
    ms = op.ReduceMean(op.Pow(x, two), axes)
    inv = op.Div(one, op.Sqrt(op.Add(ms, eps)))
    return op.Mul(w, op.Mul(x, inv))


def _rmsnorm_r(op, x, two, axes, eps, one, w):
    return op.RMSNorm(x, w, _domain="bench")


def _scores(op, q, k, scale, mask):
    return op.Add(op.Div(op.MatMul(q, k), scale), mask)


def _scores_r(op, q, k, scale, mask):
    return op.ScaledScores(q, k, scale, mask, _domain="bench")


RULES = pattern.RewriteRuleSet(
    [
        pattern.RewriteRule(_matmul_add, _matmul_add_r),
        pattern.RewriteRule(_silu, _silu_r),
        pattern.RewriteRule(_rmsnorm, _rmsnorm_r),
        pattern.RewriteRule(_scores, _scores_r),
    ]
)


def main() -> None:
    model = ir.serde.deserialize_model(onnx.load(sys.argv[1], load_external_data=False))
    print(RULES.apply_to_model(model))


if __name__ == "__main__":
    main()
