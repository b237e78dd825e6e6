"""The few parts of ONNX that reading a graph needs, without ``import onnx``.

``import onnx`` costs ~0.8 s of CPU, nearly all of it ml_dtypes registering its numpy
loops (bfloat16, float8, ...), which graph loading never uses; onnx's generated protobuf
module (``onnx.onnx_ml_pb2``) and its C++ extension (``onnx.onnx_cpp2py_export``: shape
inference, operator schemas) load on their own in ~20-40 ms. This module loads those two
under their own names, so a later ``import onnx`` (rewriting, verification) finds them in
``sys.modules`` and reuses them: the message classes are the same objects either way. If
``onnx`` is imported already, or the files are not where this onnx version keeps them,
the whole package is imported instead (``full``).

On top of them: the element-type table, ``to_array`` for the plain numeric types,
``attribute_value`` (``onnx.helper.get_attribute_value``), ``from_array``, schema
lookups and whole-model shape inference, each equal to onnx's own for what it handles
(``tests/graph/test_onnxlite.py`` compares them); anything else (bfloat16, float8, int4,
strings, text model formats, per-node inference) goes through the full package.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib.machinery
import importlib.util
import numbers
import os
import sys
from types import ModuleType
from typing import Any

import numpy as np

_PB = "onnx.onnx_ml_pb2"
_EXT = "onnx.onnx_cpp2py_export"


def full() -> ModuleType:
    """The ``onnx`` package itself (imported on first need)."""
    import onnx

    return onnx


def _standalone(name: str, path: str, extension: bool) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, path) if extension else None
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _load() -> tuple[ModuleType, ModuleType]:
    """(protobuf module, C++ extension), without onnx's ``__init__`` when possible."""
    if "onnx" not in sys.modules and os.environ.get("AUTOFUSION_FULL_ONNX") != "1":
        try:
            pb = sys.modules.get(_PB)
            ext = sys.modules.get(_EXT)
            spec = importlib.util.find_spec("onnx")
            folder = (spec.submodule_search_locations or [None])[0] if spec else None
            if folder is not None:
                if pb is None:
                    pb = _standalone(_PB, os.path.join(folder, "onnx_ml_pb2.py"), False)
                if ext is None:
                    suffixes = importlib.machinery.EXTENSION_SUFFIXES
                    path = next(
                        p
                        for s in suffixes
                        if os.path.isfile(p := os.path.join(folder, "onnx_cpp2py_export" + s))
                    )
                    ext = _standalone(_EXT, path, True)
                if hasattr(ext, "shape_inference") and hasattr(ext, "defs"):
                    return pb, ext
        except Exception:  # another onnx layout: the whole package
            pass
    full()
    import onnx.onnx_cpp2py_export as ext_full
    import onnx.onnx_ml_pb2 as pb_full

    return pb_full, ext_full


_pb, _C = _load()

ModelProto: Any = _pb.ModelProto
GraphProto: Any = _pb.GraphProto
NodeProto: Any = _pb.NodeProto
TensorProto: Any = _pb.TensorProto
TypeProto: Any = _pb.TypeProto
AttributeProto: Any = _pb.AttributeProto
OperatorSetIdProto: Any = _pb.OperatorSetIdProto
FunctionProto: Any = _pb.FunctionProto
ValueInfoProto: Any = _pb.ValueInfoProto

# element type -> numpy dtype, for the types numpy has natively (onnx's _mapping)
_NP = {
    TensorProto.FLOAT: np.dtype("float32"),
    TensorProto.UINT8: np.dtype("uint8"),
    TensorProto.INT8: np.dtype("int8"),
    TensorProto.UINT16: np.dtype("uint16"),
    TensorProto.INT16: np.dtype("int16"),
    TensorProto.INT32: np.dtype("int32"),
    TensorProto.INT64: np.dtype("int64"),
    TensorProto.BOOL: np.dtype("bool"),
    TensorProto.FLOAT16: np.dtype("float16"),
    TensorProto.DOUBLE: np.dtype("float64"),
    TensorProto.COMPLEX64: np.dtype("complex64"),
    TensorProto.COMPLEX128: np.dtype("complex128"),
    TensorProto.UINT32: np.dtype("uint32"),
    TensorProto.UINT64: np.dtype("uint64"),
    TensorProto.STRING: np.dtype("object"),
}
# plain numeric types ``to_array`` decodes itself: (storage field, storage dtype)
_FIELD = {
    TensorProto.FLOAT: ("float_data", np.float32),
    TensorProto.UINT8: ("int32_data", np.int32),
    TensorProto.INT8: ("int32_data", np.int32),
    TensorProto.INT32: ("int32_data", np.int32),
    TensorProto.INT64: ("int64_data", np.int64),
    TensorProto.DOUBLE: ("double_data", np.float64),
    TensorProto.UINT32: ("uint64_data", np.uint64),
    TensorProto.UINT64: ("uint64_data", np.uint64),
}
# 16-bit and bool values are kept as bit patterns in int32_data
_BITS = {
    TensorProto.FLOAT16: np.uint16,
    TensorProto.INT16: np.uint16,
    TensorProto.UINT16: np.uint16,
    TensorProto.BOOL: np.uint8,
}
_LITTLE = sys.byteorder == "little"


def np_dtype(elem_type: int) -> np.dtype:
    """``onnx.helper.tensor_dtype_to_np_dtype``."""
    got = _NP.get(elem_type)
    if got is not None:
        return got
    return full().helper.tensor_dtype_to_np_dtype(elem_type)


def to_array(t: Any) -> np.ndarray:
    """``onnx.numpy_helper.to_array`` of a tensor whose bytes are in the model (callers
    never pass external data: weights are not read)."""
    dt = t.data_type
    np_dt = _NP.get(dt)
    if (
        np_dt is None
        or dt == TensorProto.STRING
        or dt in (TensorProto.COMPLEX64, TensorProto.COMPLEX128)
        or not _LITTLE
        or t.HasField("segment")
        or t.data_location == TensorProto.EXTERNAL
    ):
        return full().numpy_helper.to_array(t)
    dims = tuple(t.dims)
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, dtype=np_dt).reshape(dims)
    bits = _BITS.get(dt)
    if bits is not None:
        return (
            np.array(t.int32_data, dtype=np.int32)
            .view(np.uint32)
            .astype(bits)
            .view(np_dt)
            .reshape(dims)
        )
    field, storage = _FIELD[dt]
    return np.asarray(getattr(t, field), dtype=storage).astype(np_dt).reshape(dims)


def from_array(array: np.ndarray, name: str | None = None) -> Any:
    """``onnx.numpy_helper.from_array`` for plain numeric arrays."""
    array = np.asarray(array)
    elem = next((k for k, v in _NP.items() if v == array.dtype), None)
    if elem is None or elem == TensorProto.STRING or array.dtype.byteorder == ">":
        return full().numpy_helper.from_array(array, name)
    if not _LITTLE and array.dtype.byteorder == "=":
        return full().numpy_helper.from_array(array, name)
    t = TensorProto()
    t.dims.extend(array.shape)
    if name:
        t.name = name
    t.raw_data = array.tobytes()
    t.data_type = elem
    return t


def attribute_value(a: Any) -> Any:
    """``onnx.helper.get_attribute_value``."""
    if a.ref_attr_name:
        raise ValueError(f"Cannot get value of reference attribute: {a}")
    kind = a.type
    got = _ATTR.get(kind)
    if got is None:
        if kind == AttributeProto.UNDEFINED:
            return None
        raise ValueError(f"Unsupported ONNX attribute: {a}")
    field, many = got
    value = getattr(a, field)
    return list(value) if many else value


_ATTR = {
    AttributeProto.FLOAT: ("f", False),
    AttributeProto.INT: ("i", False),
    AttributeProto.STRING: ("s", False),
    AttributeProto.TENSOR: ("t", False),
    AttributeProto.SPARSE_TENSOR: ("sparse_tensor", False),
    AttributeProto.GRAPH: ("g", False),
    AttributeProto.TYPE_PROTO: ("tp", False),
    AttributeProto.FLOATS: ("floats", True),
    AttributeProto.INTS: ("ints", True),
    AttributeProto.STRINGS: ("strings", True),
    AttributeProto.TENSORS: ("tensors", True),
    AttributeProto.SPARSE_TENSORS: ("sparse_tensors", True),
    AttributeProto.GRAPHS: ("graphs", True),
    AttributeProto.TYPE_PROTOS: ("type_protos", True),
}


def get_schema(op_type: str, version: int, domain: str) -> Any:
    """``onnx.defs.get_schema`` (raises when there is none)."""
    return _C.defs.get_schema(op_type, version, domain)


def attribute_default(attr: Any) -> Any:
    """A schema attribute's default as an ``AttributeProto`` (type UNDEFINED if none):
    ``OpSchema.Attribute.default_value``, which onnx adds in Python on import."""
    out = AttributeProto()
    out.ParseFromString(attr._default_value)
    return out


def parse_model(data: bytes) -> Any:
    """A binary ModelProto, as ``onnx.load_from_string`` parses it."""
    from google.protobuf.message import DecodeError

    model = ModelProto()
    decoded = model.ParseFromString(data)
    if decoded is not None and decoded != len(data):
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {len(data)}")
    return model


def infer_shapes(model: Any, data_prop: bool = False) -> Any:
    """``onnx.shape_inference.infer_shapes(model, data_prop=...)``: a new model."""
    out = _C.shape_inference.infer_shapes(model.SerializeToString(), False, False, data_prop)
    return parse_model(out)


def infer_shapes_strict(model: Any) -> Any:
    """``infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)``: a new
    model, or onnx's error when a node's types contradict its schema."""
    out = _C.shape_inference.infer_shapes(model.SerializeToString(), True, True, True)
    return parse_model(out)


def infer_shapes_bytes(data: bytes, data_prop: bool = False) -> bytes:
    """``infer_shapes`` on a serialized model, giving the inferred model's bytes (the C++
    call runs without the GIL: a thread may run it beside Python work)."""
    return _C.shape_inference.infer_shapes(data, False, False, data_prop)


def all_schemas_with_history() -> list[Any]:
    """``onnx.defs.get_all_schemas_with_history`` (a new list of the same schemas)."""
    return list(_all_schemas())


@functools.cache
def _all_schemas() -> tuple[Any, ...]:
    """The schemas, listed once: onnx builds ~1,200 schema objects on each call (8 ms),
    and loading the kernel catalog asks once per op and attribute it checks."""
    return tuple(_C.defs.get_all_schemas_with_history())


def tensor_type_proto(elem_type: int, shape: list[int | str | None] | None) -> Any:
    """``onnx.helper.make_tensor_type_proto(elem_type, shape)``."""
    out = TypeProto()
    tt = out.tensor_type
    tt.elem_type = elem_type
    if shape is not None:
        tt.shape.dim.extend([])  # an explicitly empty shape (a scalar) is kept, as onnx does
        for d in shape:
            dim = tt.shape.dim.add()
            if d is None:
                continue
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
            else:
                raise ValueError(f"Invalid item in shape: {d}. Needs to be of int or str.")
    return out


def infer_node_outputs(
    schema: Any,
    node: Any,
    input_types: dict[str, Any],
    input_data: dict[str, Any],
    opset_imports: list[Any],
) -> dict[str, Any]:
    """``onnx.shape_inference.infer_node_outputs`` (no sparse data, current IR version)."""
    types = {t: input_types[t].SerializeToString() for t in node.input if t != ""}
    for t, tp in input_types.items():  # also the outer scope's types, as onnx passes them
        if t not in types:
            types[t] = tp.SerializeToString()
    data = {t: input_data[t].SerializeToString() for t in node.input if t in input_data}
    outputs = schema._infer_node_outputs(
        node.SerializeToString(),
        types,
        data,
        {},
        {o.domain: o.version for o in opset_imports},
        _pb.IR_VERSION,
    )
    return {t: TypeProto.FromString(b) for t, b in outputs.items()}


# ---------------------------------------------------------------------------------------
# Writing and checking models (the rewriter, the kernel catalog and the check of ``fuse``),
# each equal to onnx's function of the same name for what it handles.


class ParseError(Exception):
    """``onnx.parser.ParseError`` (raised with the parser's message as onnx raises it)."""


def parse_function(text: str) -> Any:
    """``onnx.parser.parse_function``."""
    ok, msg, blob = _C.parser.parse_function(text)
    if not ok:
        raise ParseError(msg)
    fn = FunctionProto()
    fn.ParseFromString(blob)
    return fn


def check_model(model: Any, full_check: bool = False, at_once: bool = False) -> None:
    """``onnx.checker.check_model(model, full_check)`` of an in-memory model (a
    ModelProto or its bytes); raises onnx's own errors.

    ``full_check`` runs onnx's two parts one after the other: its checker, then its shape
    inference in strict mode with type checks (``ShapeInferenceOptions{true, 1, false}``
    and the default schema registry, as ``checker::check_model`` calls it). In one call
    the C++ holds the parsed model and a copy of it for the inference (2048 layers: +85
    MiB); in two, one parse at a time (+68 MiB). Same checks in the same order, same
    errors (tests/graph/test_onnxlite.py).

    ``at_once`` makes the one call, as onnx does: the inference then runs on the parsed
    model, without parsing the bytes again nor serializing its result back to Python
    (which the two calls do, and drop). Fused 2048-layer initializers stack, a fresh
    process: 0.66 s CPU against 0.76 s (first call; 512 layers 0.165 against 0.18), the
    same peak (+144 MiB). The forked check uses it: its memory is its own."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    if len(data) > 2**31:  # onnx.checker.MAXIMUM_PROTOBUF
        raise ValueError(
            "This protobuf of onnx model is too large (>2GiB). Call check_model with model "
            "path instead."
        )
    if at_once:
        _C.checker.check_model(data, full_check, False, False)
        return
    _C.checker.check_model(data, False, False, False)
    if full_check:  # check_type, strict mode, no data propagation; the result is dropped
        _C.shape_inference.infer_shapes(data, True, True, False)


def check_model_path(path: str, full_check: bool = False) -> None:
    """``onnx.checker.check_model(path, full_check)``: external data resolve from its folder."""
    _C.checker.check_model_path(path, full_check, False, False)


def newest_schema(op_type: str, domain: str = "") -> Any:
    """``onnx.defs.get_schema(op_type, domain)``: the op's newest schema."""
    return _C.defs.get_schema(op_type, domain)


def make_opsetid(domain: str, version: int) -> Any:
    """``onnx.helper.make_opsetid``."""
    out = OperatorSetIdProto()
    out.domain = domain
    out.version = version
    return out


def make_function(
    domain: str,
    fname: str,
    inputs: collections.abc.Sequence[str],
    outputs: collections.abc.Sequence[str],
    nodes: collections.abc.Sequence[Any],
    opset_imports: collections.abc.Sequence[Any],
) -> Any:
    """``onnx.helper.make_function`` without attributes, doc string or overload."""
    f = FunctionProto()
    f.domain = domain
    f.name = fname
    f.input.extend(inputs)
    f.output.extend(outputs)
    f.node.extend(nodes)
    f.opset_import.extend(opset_imports)
    return f


def make_attribute(key: str, value: Any) -> Any:
    """``onnx.helper.make_attribute(key, value)``: numbers, strings and lists of them
    here, every other kind of value by onnx itself."""
    attr = AttributeProto()
    attr.name = key
    if isinstance(value, numbers.Integral):
        attr.i = int(value)
        attr.type = AttributeProto.INT
    elif isinstance(value, numbers.Real):
        attr.f = float(value)
        attr.type = AttributeProto.FLOAT
    elif isinstance(value, (str, bytes)):
        attr.s = value.encode("utf-8") if isinstance(value, str) else value
        attr.type = AttributeProto.STRING
    elif isinstance(value, TensorProto):
        attr.t.CopyFrom(value)
        attr.type = AttributeProto.TENSOR
    elif isinstance(value, (list, tuple)) and value:
        types = {type(v) for v in value}
        if all(issubclass(t, numbers.Integral) for t in types):
            attr.ints.extend(value)
            attr.type = AttributeProto.INTS
        elif all(issubclass(t, numbers.Real) for t in types):
            attr.floats.extend(value)
            attr.type = AttributeProto.FLOATS
        elif all(issubclass(t, (str, bytes)) for t in types):
            attr.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in value)
            attr.type = AttributeProto.STRINGS
        else:
            return full().helper.make_attribute(key, value)
    else:
        return full().helper.make_attribute(key, value)
    return attr


def make_node(
    op_type: str,
    inputs: collections.abc.Sequence[str],
    outputs: collections.abc.Sequence[str],
    name: str | None = None,
    domain: str | None = None,
    **kwargs: Any,
) -> Any:
    """``onnx.helper.make_node``."""
    node = NodeProto()
    node.op_type = op_type
    node.input.extend(inputs)
    node.output.extend(outputs)
    if name:
        node.name = name
    if domain is not None:
        node.domain = domain
    if kwargs:
        node.attribute.extend(
            make_attribute(key, value) for key, value in sorted(kwargs.items()) if value is not None
        )
    return node


def make_tensor_value_info(name: str, elem_type: int, shape: list[int | str | None] | None) -> Any:
    """``onnx.helper.make_tensor_value_info``."""
    out = ValueInfoProto()
    out.name = name
    out.type.CopyFrom(tensor_type_proto(elem_type, shape))
    return out
