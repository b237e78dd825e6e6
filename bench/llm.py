"""LLM-size benchmark: fuse a 32-layer LLaMA-3-8B-shaped model, weights never read.

    .venv/bin/python bench/llm.py [--layers 32] [--seq 2048] [--sample 3] [--keep DIR]

Builds with onnx.helper a decoder of ``--layers`` LLaMA-3-8B layers (hidden 4096, 32
query heads and 8 key/value heads of 128, SwiGLU 14336, RMSNorm, rotary embeddings,
vocabulary 128256, fp32, batch 1, sequence ``--seq``); every weight (about 30 GiB at 32
layers) is an external tensor in one *sparse* file, truncated to size, so no disk is
used. Then, each in a fresh process (peak RSS is the child's ``ru_maxrss``):

1. ``autofusion fuse MODEL -o OUT`` (the default: the weights copied into OUT, as a
   reflink where the filesystem has one, else a sparse-aware copy, so the sparse file
   stays sparse) and ``-o`` the model's own folder (the zero-copy way: the weights
   shared): wall time, peak RSS, RSS / weight bytes (checked against RSS_BOUND), the disk
   the copy uses (``du``, not its apparent size); then onnx.checker on each output's path
   and on the original's, and a check that every external tensor resolves from OUT (file
   inside OUT, one name only, large enough);
2. per-group verification of ``--sample`` groups (one per rule, the largest first):
   each fused node against its original subgraph on random inputs of the real shapes,
   weights memory-mapped: wall time, peak RSS, RSS / weight bytes.

Exits 1 when fuse's peak RSS exceeds RSS_BOUND of the weight bytes, or a check fails;
the figures go in docs/fuse.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
RSS_BOUND = 0.05  # fuse's peak RSS / weight bytes: the weights are never read
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4096, 32, 8, 128, 14336, 128256


class Weights:
    """External tensors laid out one after the other in one sparse file."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.offset = 0
        self.tensors: list[TensorProto] = []

    def add(self, name: str, dims: list[int], dtype: int = TensorProto.FLOAT) -> str:
        t = TensorProto()
        t.name, t.data_type = name, dtype
        t.dims.extend(dims)
        size = int(np.prod(dims)) * helper.tensor_dtype_to_np_dtype(dtype).itemsize
        self.offset += (-self.offset) % 4096
        for key, value in (("location", self.location), ("offset", self.offset), ("length", size)):
            e = t.external_data.add()
            e.key, e.value = key, str(value)
        t.data_location = TensorProto.EXTERNAL
        self.offset += size
        self.tensors.append(t)
        return name


def build(layers: int, seq: int, location: str) -> tuple[onnx.ModelProto, int]:  # noqa: PLR0915 - one layer, op by op
    """The model (graph only) and the size of its weights file."""
    w = Weights(location)
    nodes: list[onnx.NodeProto] = []
    small: list[TensorProto] = []

    def const(name: str, values: list[int] | list[float], dtype=np.int64) -> str:
        small.append(onnx.numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    const("eps", [1e-5], np.float32)
    const("two", [2.0], np.float32)
    const("one", [1.0], np.float32)
    const("scale", [1.0 / np.sqrt(HEAD_DIM)], np.float32)
    const("q_shape", [1, seq, HEADS, HEAD_DIM])
    const("kv_shape", [1, seq, KV_HEADS, HEAD_DIM])
    const("kv_rep", [1, KV_HEADS, HEADS // KV_HEADS, seq, HEAD_DIM])
    const("kv_full", [1, HEADS, seq, HEAD_DIM])
    const("o_shape", [1, seq, HIDDEN])
    const("ax1", [2])
    const("half0", [0])
    const("half1", [HEAD_DIM // 2])
    const("halfend", [HEAD_DIM])
    const("last", [-1])
    cos = w.add("rope_cos", [seq, HEAD_DIM])
    sin = w.add("rope_sin", [seq, HEAD_DIM])
    mask = w.add("causal_mask", [1, 1, seq, seq])

    def rmsnorm(x: str, weight: str, p: str) -> str:
        sq = node("Pow", [x, "two"], f"{p}_sq")
        mean = node("ReduceMean", [sq, "last"], f"{p}_mean", keepdims=1)
        var = node("Add", [mean, "eps"], f"{p}_var")
        std = node("Sqrt", [var], f"{p}_std")
        inv = node("Div", ["one", std], f"{p}_inv")
        normed = node("Mul", [x, inv], f"{p}_normed")
        return node("Mul", [normed, weight], f"{p}_out")

    def rope(x: str, p: str) -> str:
        lo = node("Slice", [x, "half0", "half1", "last"], f"{p}_lo")
        hi = node("Slice", [x, "half1", "halfend", "last"], f"{p}_hi")
        neg = node("Neg", [hi], f"{p}_neg")
        rot = node("Concat", [neg, lo], f"{p}_rot", axis=-1)
        a = node("Mul", [x, cos], f"{p}_cos")
        b = node("Mul", [rot, sin], f"{p}_sin")
        return node("Add", [a, b], f"{p}_out")

    embed = w.add("embed_tokens", [VOCAB, HIDDEN])
    x = node("Gather", [embed, "input_ids"], "embedded", axis=0)
    for i in range(layers):
        p = f"l{i}"
        h = rmsnorm(x, w.add(f"{p}.input_norm", [HIDDEN]), f"{p}_norm1")
        q = node("MatMul", [h, w.add(f"{p}.wq", [HIDDEN, HIDDEN])], f"{p}_q")
        k = node("MatMul", [h, w.add(f"{p}.wk", [HIDDEN, KV_HEADS * HEAD_DIM])], f"{p}_k")
        v = node("MatMul", [h, w.add(f"{p}.wv", [HIDDEN, KV_HEADS * HEAD_DIM])], f"{p}_v")
        q = node(
            "Transpose", [node("Reshape", [q, "q_shape"], f"{p}_q4")], f"{p}_qt", perm=[0, 2, 1, 3]
        )
        k = node(
            "Transpose", [node("Reshape", [k, "kv_shape"], f"{p}_k4")], f"{p}_kt", perm=[0, 2, 1, 3]
        )
        v = node(
            "Transpose", [node("Reshape", [v, "kv_shape"], f"{p}_v4")], f"{p}_vt", perm=[0, 2, 1, 3]
        )
        q, k = rope(q, f"{p}_rq"), rope(k, f"{p}_rk")
        kv = []
        for name, t in (("k", k), ("v", v)):
            u = node("Unsqueeze", [t, "ax1"], f"{p}_{name}u")
            e = node("Expand", [u, "kv_rep"], f"{p}_{name}e")
            kv.append(node("Reshape", [e, "kv_full"], f"{p}_{name}rep"))
        kT = node("Transpose", [kv[0]], f"{p}_kT", perm=[0, 1, 3, 2])
        s = node("MatMul", [q, kT], f"{p}_scores")
        s = node("Mul", [s, "scale"], f"{p}_scaled")
        s = node("Add", [s, mask], f"{p}_masked")
        a = node("Softmax", [s], f"{p}_probs", axis=-1)
        o = node("MatMul", [a, kv[1]], f"{p}_ctx")
        o = node("Transpose", [o], f"{p}_ctxt", perm=[0, 2, 1, 3])
        o = node("Reshape", [o, "o_shape"], f"{p}_ctx3")
        o = node("MatMul", [o, w.add(f"{p}.wo", [HIDDEN, HIDDEN])], f"{p}_attn")
        x = node("Add", [x, o], f"{p}_res1")
        h = rmsnorm(x, w.add(f"{p}.post_norm", [HIDDEN]), f"{p}_norm2")
        g = node("MatMul", [h, w.add(f"{p}.w1", [HIDDEN, FFN])], f"{p}_gate")
        g = node("Mul", [g, node("Sigmoid", [g], f"{p}_sig")], f"{p}_silu")
        u = node("MatMul", [h, w.add(f"{p}.w3", [HIDDEN, FFN])], f"{p}_up")
        m = node(
            "MatMul",
            [node("Mul", [g, u], f"{p}_swiglu"), w.add(f"{p}.w2", [FFN, HIDDEN])],
            f"{p}_down",
        )
        x = node("Add", [x, m], f"{p}_res2")
    h = rmsnorm(x, w.add("final_norm", [HIDDEN]), "final_norm")
    node("MatMul", [h, w.add("lm_head", [HIDDEN, VOCAB])], "logits")
    graph = helper.make_graph(
        nodes,
        f"llama3-8b-{layers}l",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, VOCAB])],
        initializer=[*small, *w.tensors],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model, w.offset


def child(code: str, *args: str) -> tuple[float, int, str]:
    """Run ``code`` in a fresh interpreter: (wall seconds, its peak RSS bytes, stdout)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=out, stderr=err, cwd=ROOT
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"child failed ({proc.returncode}):\n{err.read().decode()[-3000:]}")
        return wall, usage.ru_maxrss * 1024, out.read().decode()


FUSE = """
import sys
from ruleengine.cli import main
sys.argv = ["autofusion", "fuse", sys.argv[1], "-o", sys.argv[2], "-f", "json", *sys.argv[3:]]
main()
"""

CHECK = """
import json, os, sys
from pathlib import Path
import onnx
out = Path(sys.argv[1])
model = next(out.glob("*.fused.onnx"))
onnx.checker.check_model(str(model), full_check=True)
m = onnx.load(str(model), load_external_data=False)
bad, n = [], 0
for t in m.graph.initializer:
    if t.data_location != onnx.TensorProto.EXTERNAL:
        continue
    n += 1
    info = {e.key: e.value for e in t.external_data}
    f = (out / info["location"]).resolve()
    inside = f.is_relative_to(out.resolve()) and f.is_file() and not f.is_symlink()
    inside = inside and f.stat().st_nlink == 1  # onnx refuses a data file with two names
    if not inside or f.stat().st_size < int(info["offset"]) + int(info["length"]):
        bad.append(t.name)
print(json.dumps({"external": n, "unresolved": bad[:5], "unresolved_count": len(bad)}))
"""

CHECK_ORIGINAL = """
import json, os, sys
import onnx
onnx.checker.check_model(sys.argv[1], full_check=True)  # refuses hard-linked data files
m = onnx.load(sys.argv[1], load_external_data=False)
links = os.stat(sys.argv[1] + ".data").st_nlink
print(json.dumps({"nodes": len(m.graph.node), "data_links": links}))
"""

PER_GROUP = """
import json, sys, time
from pathlib import Path
import onnx
from ruleengine.pipeline import analyze
from ruleengine.rewrite.onnx_rewrite import rewrite_model
from ruleengine.rewrite.plan import build_groups
from ruleengine.verification.groups import check_groups
from ruleengine.verification.numerics import make_inputs
path = Path(sys.argv[1]); sample = int(sys.argv[2])
a = analyze(path)
proto = onnx.load(str(path), load_external_data=False)
groups = build_groups(a.graph, a.resolution.chosen, a.rule_set)
by_rule = {}
for g in groups:
    by_rule.setdefault(g.rule, g)
picked = sorted(by_rule.values(), key=lambda g: -len(g.nodes))[:sample]
fused = rewrite_model(proto, a.graph, groups)
t0 = time.perf_counter()
checks = check_groups(proto, fused, a.graph, picked, model_dir=path.parent,
                      feeds=make_inputs(proto, seed=0))
print(json.dumps({"groups": len(groups), "seconds": time.perf_counter() - t0,
                  "checked": [[c.group, c.rule, c.status, c.error] for c in checks]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--sample", type=int, default=3, help="groups to verify (one per rule)")
    ap.add_argument("--keep", type=Path, help="build in this directory and keep it")
    args = ap.parse_args()
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="autofusion-llm-")
    work = args.keep or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    name = f"llama3-8b-{args.layers}l.onnx"
    model, size = build(args.layers, args.seq, f"{name}.data")
    onnx.save(model, str(work / name))
    with open(work / f"{name}.data", "wb") as fh:
        fh.truncate(size)  # sparse: no block is allocated
    used = os.stat(work / f"{name}.data").st_blocks * 512
    print(f"model: {len(model.graph.node)} nodes, {args.layers} layers, seq {args.seq}")
    print(f"weights: {size / 2**30:.1f} GiB in a sparse file ({used >> 20} MiB on disk)")
    failed = False
    for how, out in (("copy (default)", work / "out"), ("share (-o the model's folder)", work)):
        wall, rss, stdout = child(FUSE, str(work / name), str(out))
        report = json.loads(stdout)
        data = out / f"{name}.data"
        print(
            f"fuse, weights by {how}: {wall:.1f} s wall, peak RSS {rss / 2**30:.2f} GiB, "
            f"RSS/weights {rss / size:.4f} (bound {RSS_BOUND}), "
            f"{report['totals']['groups']} groups; {data.name}: "
            f"{os.stat(data).st_blocks * 512 >> 20} MiB on disk (du), "
            f"{data.stat().st_size / 2**30:.1f} GiB apparent"
        )
        failed |= rss > RSS_BOUND * size
        _, _, checked = child(CHECK, str(out))
        print(f"  onnx.checker on its path passed; {checked.strip()}")
        failed |= json.loads(checked)["unresolved_count"] > 0
    _, _, checked = child(CHECK_ORIGINAL, str(work / name))
    print(f"original after both runs: onnx.checker on its path passed; {checked.strip()}")
    wall, rss2, stdout = child(PER_GROUP, str(work / name), str(args.sample))
    res = json.loads(stdout)
    print(
        f"per-group verification of {len(res['checked'])} of {res['groups']} groups: "
        f"{res['seconds']:.1f} s (process {wall:.1f} s), peak RSS {rss2 / 2**30:.2f} GiB, "
        f"RSS/weights {rss2 / size:.4f}"
    )
    for gid, rule, status, error in res["checked"]:
        print(f"  group {gid} {rule}: {status}{' (' + error + ')' if error else ''}")
    if tmp is not None:
        tmp.cleanup()
    if failed:
        sys.exit("fuse went over its memory bound, or a weight reference does not resolve")


if __name__ == "__main__":
    main()
