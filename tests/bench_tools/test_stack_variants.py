"""bench/stack_variants.py: every variant is a valid model onnxruntime runs, the variants
differ in structure, issue 38's unseen stack is what the issue lists, and real-size
weights are never materialised."""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("stack_variants", BENCH / "stack_variants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stack_variants"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sv = _load()
NAMES = [*sv.VARIANTS, "random:1", "random:2", "random:3"]


def _run(path: Path) -> np.ndarray:
    """The stack's output in onnxruntime, every input random (masks: causal)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in s.get_inputs():
        if i.type == "tensor(bool)":
            feeds[i.name] = np.tril(np.ones(i.shape, dtype=bool))
        elif i.name == "attention_mask":
            feeds[i.name] = np.zeros(i.shape, np.float16 if "16" in i.type else np.float32)
        else:
            dt = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = (rng.standard_normal(i.shape) * 0.1).astype(dt)
    return s.run(None, feeds)[0]


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def test_at_least_twelve_named_variants_and_unseen38():
    assert len(sv.VARIANTS) >= 12
    assert "unseen38" in sv.VARIANTS


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_is_checked_and_runs(name, tmp_path):
    v = sv.variant(name).small()
    path = sv.build_stack(v, 2, tmp_path / "m.onnx")
    onnx.checker.check_model(str(path), full_check=True)
    out = _run(path)
    assert out.shape == (1, v.seq, v.hidden)
    assert np.isfinite(out.astype(np.float32)).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_at_its_real_size_passes_the_checker(name):
    # one layer, weights as inputs: shapes at the real size (head size != seq) cost nothing
    model, _ = sv.stack_model(sv.variant(name), 1, "inputs")
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("form", ["initializers", "inputs", "external"])
def test_every_weight_form(form, tmp_path):
    v = sv.VARIANTS["llama_gqa_fp16"].small()
    path = sv.build_stack(v, 2, tmp_path / "m.onnx", form)
    onnx.checker.check_model(str(path), full_check=True)
    m = onnx.load(str(path), load_external_data=False)
    weights_in = [i.name for i in m.graph.input if i.name.startswith("l1.")]
    external = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert bool(weights_in) == (form == "inputs")
    assert bool(external) == (form == "external")
    assert _run(path).shape == (1, v.seq, v.hidden)


def test_named_variants_differ_in_structure(tmp_path):
    sigs = {}
    for name, v in sv.VARIANTS.items():
        model, _ = sv.stack_model(v.small(), 2, "inputs")
        sigs[name] = sv.signature(model)
    assert len(set(sigs.values())) == len(sigs), "two named variants build the same graph"
    axes = [tuple(v.axes().items()) for v in sv.VARIANTS.values()]
    assert len(set(axes)) == len(axes)
    # every value of every axis is taken by some named variant
    for axis, values in sv.AXES.items():
        taken = {getattr(v, axis) for v in sv.VARIANTS.values()}
        assert taken == set(values), f"{axis}: {set(values) - taken} never used"


def test_unseen38_is_the_issue_stack(tmp_path):
    v = sv.VARIANTS["unseen38"]
    assert (v.hidden, v.seq, v.heads, v.inter, v.weights) == (4096, 2048, 32, 14336, "inputs")
    m2, _ = sv.stack_model(v, 2)
    m4, _ = sv.stack_model(v, 4)
    ops = _ops(m4)
    assert ops["Softmax"] == 0 and ops["ReduceMax"] == 4 and ops["Exp"] == 4
    assert ops["ReduceSum"] == 4 and ops["Sigmoid"] == 4  # SwiGLU
    perms = [tuple(a.ints) for n in m4.graph.node for a in n.attribute if a.name == "perm"]
    assert (0, 2, 3, 1) in perms
    # no bias after the Q/K/V projections: each feeds its Reshape alone
    for w in (".wq", ".wk", ".wv"):
        mm = [n for n in m4.graph.node if n.op_type == "MatMul" and n.input[1].endswith(w)]
        assert len(mm) == 4
        consumers = [n.op_type for n in m4.graph.node if mm[0].output[0] in n.input]
        assert consumers == ["Reshape"]
    # constants shared: as many initializers at 4 layers as at 2; weights are inputs
    assert len(m2.graph.initializer) == len(m4.graph.initializer)
    assert len(m4.graph.input) > len(m2.graph.input) + 8
    # the RMSNorm of the issue: Pow, ReduceMean, Add, Sqrt, Div, Mul
    assert ops["Pow"] == 8 + 1 and ops["Sqrt"] == 8 + 1 and ops["Div"] == 4 + 4 + 9


def test_real_size_weights_are_never_materialised(tmp_path):
    v = sv.VARIANTS["llama_gqa_fp16"]
    path = sv.build_stack(v, 2, tmp_path / "big.onnx")  # external: one sparse hole
    data = tmp_path / "big.onnx.data"
    assert data.stat().st_size > 1 << 29  # 2 layers: 0.8 GiB of fp16 weights
    assert data.stat().st_blocks * 512 < 1 << 20
    assert path.stat().st_size < 4 << 20
    with pytest.raises(ValueError, match="use inputs or external"):
        sv.stack_model(v, 2, "initializers")


def test_random_variants_are_seeded_and_varied():
    assert sv.random_variant(5) == sv.random_variant(5)
    drawn = {tuple(sv.random_variant(s).axes().items()) for s in range(20)}
    assert len(drawn) >= 15


def test_repeat_layers_rebuilds_a_deeper_stack(tmp_path):
    v = sv.VARIANTS["gpt2_like"].small()
    src = sv.build_stack(v, 3, tmp_path / "three.onnx", "initializers")
    info = sv.repeat_layers(src, 5, tmp_path / "rep.onnx")
    rep = onnx.load(str(tmp_path / "rep.onnx"))
    seven, _ = sv.stack_model(v, 7, "initializers")
    assert info["layers"] == 7
    assert _ops(rep) == _ops(seven)
    onnx.checker.check_model(rep, full_check=True)
    assert _run(tmp_path / "rep.onnx").shape == (1, v.seq, v.hidden)


def test_repeat_layers_refuses_a_graph_without_repeats(tmp_path):
    v = sv.VARIANTS["gpt2_like"].small()
    src = sv.build_stack(v, 1, tmp_path / "one.onnx", "initializers")
    with pytest.raises(ValueError):
        sv.repeat_layers(src, 4, tmp_path / "rep.onnx")
