"""Loading graphs without ``import onnx`` (``ruleengine.graph.onnxlite``): every helper
equals onnx's own, a fresh process loads the same graphs without importing onnx, and a
later ``import onnx`` shares the protobuf classes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ruleengine.graph import load_graph, onnxlite

MODELS = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
SAMPLE = sorted(MODELS.glob("*.onnx"))[::2] + sorted((MODELS / "families").glob("*.onnx"))[::6]

_DIGEST = """
import hashlib, json, sys
from ruleengine.graph import load_graph
out = {p: hashlib.sha256(repr(load_graph(p)).encode()).hexdigest() for p in sys.argv[1:]}
print(json.dumps({"onnx": "onnx" in sys.modules, "ml_dtypes": "ml_dtypes" in sys.modules,
                  "graphs": out}))
"""


def test_a_fresh_process_loads_the_same_graphs_without_importing_onnx() -> None:
    """The graph (every node, tensor, shape, constant and warning) read through onnxlite
    in a process that never imports onnx equals the one read where onnx is imported."""
    paths = [str(p) for p in SAMPLE]
    done = subprocess.run(
        [sys.executable, "-c", _DIGEST, *paths], capture_output=True, text=True, check=True
    )
    got = json.loads(done.stdout)
    assert not got["onnx"] and not got["ml_dtypes"]
    want = {p: hashlib.sha256(repr(load_graph(p)).encode()).hexdigest() for p in paths}
    assert got["graphs"] == want


def test_onnx_imported_after_onnxlite_shares_its_classes(tmp_path: Path) -> None:
    code = """
import sys
from ruleengine.graph import onnxlite
assert "onnx" not in sys.modules
import onnx
from onnx import helper, numpy_helper
assert onnx.ModelProto is onnxlite.ModelProto and onnx.TensorProto is onnxlite.TensorProto
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m)
assert len(onnx.shape_inference.infer_shapes(m).graph.value_info) > 0
assert onnx.defs.get_schema("Gelu", 20, "").attributes["approximate"].default_value.s == b"none"
print("ok")
"""
    model = str(sorted(MODELS.glob("*.onnx"))[0])
    done = subprocess.run(
        [sys.executable, "-c", code, model], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "ok"


def _tensors() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    out = []
    for elem in (
        TensorProto.FLOAT,
        TensorProto.UINT8,
        TensorProto.INT8,
        TensorProto.UINT16,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.BOOL,
        TensorProto.FLOAT16,
        TensorProto.DOUBLE,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.COMPLEX64,
        TensorProto.BFLOAT16,
        TensorProto.FLOAT8E4M3FN,
        TensorProto.INT4,
        TensorProto.STRING,
    ):
        dt = helper.tensor_dtype_to_np_dtype(elem)
        for dims in ((), (3,), (2, 3)):
            n = int(np.prod(dims))
            if elem == TensorProto.STRING:
                vals = np.array([f"s{i}" for i in range(n)], dtype=object).reshape(dims)
            elif elem == TensorProto.BOOL:
                vals = rng.integers(0, 2, n).astype(bool).reshape(dims)
            else:
                vals = rng.integers(-3, 7, n) if dt.kind == "i" else rng.integers(0, 7, n)
                vals = vals.astype(np.float32).astype(dt).reshape(dims)
            for raw in (False, True):
                if raw and elem == TensorProto.STRING:
                    continue
                out.append(helper.make_tensor("t", elem, dims, vals.reshape(-1), raw=raw))
    return out


def test_to_array_and_from_array_equal_onnx() -> None:
    tensors = _tensors()
    for t in tensors:
        want = numpy_helper.to_array(t)
        got = onnxlite.to_array(t)
        assert got.dtype == want.dtype and got.shape == want.shape, t
        assert got.tobytes() == want.tobytes() or np.array_equal(got, want), t
        if (
            want.dtype.kind in "biuf"
            and want.dtype.isnative
            and want.dtype.name
            in (
                "float32",
                "int64",
                "int32",
                "bool",
                "float16",
                "uint8",
            )
        ):
            assert onnxlite.from_array(want, "n") == numpy_helper.from_array(want, "n")
    for elem in range(1, 27):
        try:
            want_dt = helper.tensor_dtype_to_np_dtype(elem)
        except Exception:
            continue
        assert onnxlite.np_dtype(elem) == want_dt


@pytest.mark.parametrize("path", SAMPLE[:4], ids=lambda p: p.name)
def test_attribute_values_equal_onnx(path: Path) -> None:
    m = onnx.load(str(path), load_external_data=False)
    for n in m.graph.node:
        for a in n.attribute:
            assert repr(onnxlite.attribute_value(a)) == repr(helper.get_attribute_value(a))
    a = helper.make_attribute("x", [1.5, 2.5])
    assert onnxlite.attribute_value(a) == helper.get_attribute_value(a)
    with pytest.raises(ValueError, match="reference attribute"):
        onnxlite.attribute_value(AttributeProto(name="x", ref_attr_name="y", type=2))


def test_schema_defaults_and_inference_equal_onnx() -> None:
    for schema in onnxlite.all_schemas_with_history()[::7]:
        for name, attr in schema.attributes.items():
            want = onnx.defs.get_schema(schema.name, schema.since_version, schema.domain)
            assert onnxlite.attribute_default(attr) == want.attributes[name].default_value
    m = onnx.load(str(sorted(MODELS.glob("*.onnx"))[0]), load_external_data=False)
    assert onnxlite.infer_shapes(m) == onnx.shape_inference.infer_shapes(m)


def test_type_protos_and_node_inference_equal_onnx() -> None:
    for shape in (None, [], [2, "n", None]):
        want = helper.make_tensor_type_proto(TensorProto.FLOAT, shape)
        assert onnxlite.tensor_type_proto(TensorProto.FLOAT, shape) == want
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    types = {
        "x": helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3, 4]),
        "s": helper.make_tensor_type_proto(TensorProto.INT64, [2]),
    }
    data = {"s": numpy_helper.from_array(np.array([6, -1], np.int64), "s")}
    imports = [helper.make_opsetid("", 17)]
    schema = onnx.defs.get_schema("Reshape", 17, "")
    want = onnx.shape_inference.infer_node_outputs(schema, node, types, data, None, imports)
    got = onnxlite.infer_node_outputs(
        onnxlite.get_schema("Reshape", 17, ""), node, types, data, imports
    )
    assert got == want and got["y"].tensor_type.shape.dim[1].dim_value == 4


@pytest.mark.parametrize(
    "value",
    [3, -1, True, np.int64(7), 0.5, np.float32(1e-5), "mean", b"raw", [1, 2], (3,),
     [1, 2.5], [0.1, 0.2], ["a", b"b"], numpy_helper.from_array(np.arange(3), "t")],
)  # fmt: skip
def test_make_attribute_and_node_equal_onnx(value: object) -> None:
    ours = onnxlite.make_attribute("k", value)
    assert ours.SerializeToString() == helper.make_attribute("k", value).SerializeToString()
    args = (["a", ""], ["y"])
    node = onnxlite.make_node("Op", *args, name="n", domain="d", k=value, z=None, b=1)
    ref = helper.make_node("Op", *args, name="n", domain="d", k=value, z=None, b=1)
    assert node.SerializeToString() == ref.SerializeToString()


def test_writing_helpers_equal_onnx() -> None:
    nodes = [helper.make_node("Relu", ["x0"], ["y0"], name="n0")]
    opsets = [onnxlite.make_opsetid("", 17)]
    assert opsets[0] == helper.make_opsetid("", 17)
    ours = onnxlite.make_function("dom", "F", ["x0"], ["y0"], nodes, opsets)
    ref = helper.make_function("dom", "F", ["x0"], ["y0"], nodes, [helper.make_opsetid("", 17)])
    assert ours.SerializeToString(deterministic=True) == ref.SerializeToString(deterministic=True)
    for shape in ([2, "n", None], [], None):
        got = onnxlite.make_tensor_value_info("v", TensorProto.FLOAT, shape)
        assert got == helper.make_tensor_value_info("v", TensorProto.FLOAT, shape)
    assert (
        onnxlite.newest_schema("Gelu").since_version == onnx.defs.get_schema("Gelu").since_version
    )


def test_parser_and_checker_equal_onnx(tmp_path: Path) -> None:
    text = '<domain: "d", opset_import: ["": 17]>\nF (x) => (y) { y = Relu(x) }\n'
    assert onnxlite.parse_function(text) == onnx.parser.parse_function(text)
    with pytest.raises(onnxlite.ParseError) as ours:
        onnxlite.parse_function("F (x) => (y) { y = }")
    with pytest.raises(onnx.parser.ParseError) as ref:
        onnx.parser.parse_function("F (x) => (y) { y = }")
    assert str(ours.value) == str(ref.value)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    good = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [x])
    )
    bad = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["q"], ["y"])], "g", [x], [x])
    )
    onnxlite.check_model(good, full_check=True)
    onnxlite.check_model(good.SerializeToString(), full_check=True)
    onnxlite.check_model(good, full_check=True, at_once=True)
    onnx.save(good, tmp_path / "m.onnx")
    onnxlite.check_model_path(str(tmp_path / "m.onnx"), full_check=True)
    with pytest.raises(Exception) as ours_bad:
        onnxlite.check_model(bad, full_check=True)
    with pytest.raises(Exception) as ref_bad:
        onnx.checker.check_model(bad, full_check=True)
    assert type(ours_bad.value) is type(ref_bad.value)
    assert str(ours_bad.value) == str(ref_bad.value)


def _broken_models() -> dict[str, onnx.ModelProto]:
    """Models that pass onnx's checker but not its strict shape inference (full_check),
    and one that fails the checker itself: each must be refused with onnx's own error."""
    f2 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    i2 = helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    y_wrong = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])

    def model(nodes, inputs, outputs, inits=(), functions=(), opsets=None):
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        return helper.make_model(
            graph,
            functions=list(functions),
            opset_imports=opsets or [helper.make_opsetid("", 17)],
        )

    body = helper.make_function(
        "d",
        "F",
        ["a", "b"],
        ["c"],
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [helper.make_opsetid("", 17)],
    )
    d = [helper.make_opsetid("", 17), helper.make_opsetid("d", 1)]
    return {
        # Add of a float and an int64 tensor: a type error only inference finds
        "mixed types": model([helper.make_node("Add", ["x", "i"], ["y"])], [f2, i2], [y]),
        # the declared output shape contradicts the inferred one
        "shape conflict": model([helper.make_node("Relu", ["x"], ["y"])], [f2], [y_wrong]),
        # a Reshape to a shape of another size
        "reshape size": model(
            [helper.make_node("Reshape", ["x", "s"], ["y"])],
            [f2],
            [y],
            [helper.make_tensor("s", TensorProto.INT64, [2], [4, 4])],
        ),
        # a model-local function whose body is wrong for the call's types
        "function body": model(
            [helper.make_node("F", ["x", "i"], ["y"], domain="d")],
            [f2, i2],
            [y],
            functions=[body],
            opsets=d,
        ),
        # an undefined input: the checker's own error, before any inference
        "undefined input": model([helper.make_node("Relu", ["q"], ["y"])], [f2], [y]),
    }


@pytest.mark.parametrize("case", list(_broken_models()))
def test_full_check_refuses_what_onnx_refuses_with_its_error(case: str) -> None:
    """``check_model(full_check=True)`` runs onnx's checker and its strict inference one
    after the other (less memory than one call): a broken model is refused with the
    exception type and message of ``onnx.checker.check_model(full_check=True)``."""
    bad = _broken_models()[case]
    with pytest.raises(Exception) as ref:
        onnx.checker.check_model(bad, full_check=True)
    for at_once in (False, True):  # two calls, or onnx's one (the forked check's)
        with pytest.raises(Exception) as ours:
            onnxlite.check_model(bad, full_check=True, at_once=at_once)
        assert type(ours.value) is type(ref.value)
        assert str(ours.value) == str(ref.value)
    if case != "undefined input":  # the checker alone passes it: inference refuses it
        onnxlite.check_model(bad, full_check=False)


def test_fuse_never_imports_onnx(tmp_path: Path) -> None:
    """A whole ``fuse`` (rewrite, kernel binding, check, emit) without ``import onnx``:
    its ~0.6 s of CPU (ml_dtypes) is start-up the run does not need."""
    code = (
        "import sys; from ruleengine.pipeline import fuse, write_outputs\n"
        f"r = fuse({str(SAMPLE[0])!r}, outdir={str(tmp_path)!r}, jobs=1)\n"
        f"write_outputs(r, {str(tmp_path)!r})\n"
        "print('onnx' in sys.modules, 'ml_dtypes' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
