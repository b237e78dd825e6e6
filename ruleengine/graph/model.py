"""The immutable graph view every later stage reads. Only the graph loader reads ONNX."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from types import MappingProxyType
from typing import Any

from ruleengine.diagnostics.model import Diagnostic

# ONNX dtype name (lower-case, as onnx.helper.tensor_dtype_to_np_dtype names it) -> bytes.
DTYPE_SIZES: Mapping[str, int] = MappingProxyType(
    {
        "float32": 4,
        "float16": 2,
        "bfloat16": 2,
        "float64": 8,
        "int8": 1,
        "uint8": 1,
        "int16": 2,
        "uint16": 2,
        "int32": 4,
        "uint32": 4,
        "int64": 8,
        "uint64": 8,
        "bool": 1,
        "complex64": 8,
        "complex128": 16,
        "float8e4m3fn": 1,
        "float8e4m3fnuz": 1,
        "float8e5m2": 1,
        "float8e5m2fnuz": 1,
        "int4": 1,
        "uint4": 1,
    }
)

Dim = int | str | None  # a static size, a symbolic name, or unknown


_TWINS: dict[type, type] = {}


def _built(cls: type, values: dict[str, Any]) -> Any:
    """An instance of the frozen dataclass ``cls`` holding ``values`` (every field by
    name), equal to ``cls(**values)`` in every respect, made 3x faster: a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, and the
    loader makes one per node and tensor (2 x 10^5 on a 2048-layer stack). A plain
    twin class with the same fields is built and its class switched to ``cls``."""
    obj = _twin(cls)(**values)
    obj.__class__ = cls
    return obj


def _twin(cls: type) -> type:
    twin = _TWINS.get(cls)
    if twin is None:
        twin = _TWINS[cls] = make_dataclass(
            f"_{cls.__name__}Init",
            [(f.name, f.type) for f in fields(cls)],
            eq=False,
            slots=True,  # the same slots as ``cls``: an instance can switch classes
        )
    return twin


def record_maker(cls: type) -> Callable[..., Any]:
    """``_built`` taking every field positionally, in the order ``fields(cls)`` lists
    them (missing or extra values raise): 3-4x faster again than by name, which packs
    and unpacks a dict per record."""
    twin = _twin(cls)

    def make(*values: Any) -> Any:
        obj = twin(*values)
        obj.__class__ = cls
        return obj

    return make


_PLAIN_FIELDS: dict[type, frozenset[str]] = {}


def replaced(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace(obj, **changes)`` for a dataclass whose instances keep their
    fields in ``__dict__`` and whose ``__init__`` only stores them (no ``__post_init__``,
    no init-only or non-init field, no cached_property): the fields copied and the
    changed ones set, ~3x faster (kernel binding and the rewrite replace one record per
    group, 10^4 at 2048 layers). Anything else, or a name that is no field, goes
    through ``replace``."""
    cls = type(obj)
    names = _PLAIN_FIELDS.get(cls)
    if names is None:
        own = fields(cls)
        plain = (
            hasattr(obj, "__dict__")
            and not hasattr(cls, "__post_init__")
            and all(f.init for f in own)
            and len(own) == len(cls.__dataclass_fields__)  # no InitVar or ClassVar
            # a cached_property keeps its value in __dict__: a copy would carry it over
            and not any(isinstance(v, functools.cached_property) for v in vars(cls).values())
        )
        names = _PLAIN_FIELDS[cls] = frozenset(f.name for f in own) if plain else frozenset()
    if not names or not names.issuperset(changes):
        return dataclasses.replace(obj, **changes)
    out = object.__new__(cls)
    state = out.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return out


@dataclass(frozen=True, slots=True)  # no __dict__: ~10^5 records per big model
class Tensor:
    name: str
    dtype: str | None = None  # e.g. "float32"; None when unknown
    shape: tuple[Dim, ...] | None = None  # None when the rank is unknown
    producer: str | None = None  # node name; None for graph inputs and initializers
    producer_port: int | None = None
    consumers: tuple[tuple[str, int], ...] = ()  # (node name, input port)
    is_initializer: bool = False
    is_constant: bool = False  # initializer or output of a Constant node
    is_graph_input: bool = False
    is_graph_output: bool = False
    # Small constant values (scalars / short vectors) for param checks; None otherwise.
    const_value: tuple[Any, ...] | None = None
    # Computable before run time from constants and static shapes alone (a Shape of a
    # static tensor, a Where over constants, ...): a compiler folds it into a constant.
    # ``is_constant`` stays strict (initializer or Constant output), as rules mean it.
    const_foldable: bool = False

    @classmethod
    def built(cls, **values: Any) -> Tensor:
        """``Tensor(**values)`` for the loader; every field must be given."""
        return _built(cls, values)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        if not self.is_static:
            return None
        n = 1
        for d in self.shape or ():
            n *= int(d)  # type: ignore[arg-type]
        return n

    @property
    def nbytes(self) -> int | None:
        """Bytes the tensor occupies in HBM, or None when dtype or shape are unknown."""
        n = self.numel
        size = DTYPE_SIZES.get(self.dtype or "")
        if n is None or size is None:
            return None
        return n * size


@dataclass(frozen=True, slots=True)
class Node:
    name: str  # unique; generated stably (``<op_type>_<index>``) when the model has none
    op_type: str
    domain: str = ""
    inputs: tuple[str, ...] = ()  # "" for an omitted optional input
    outputs: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    index: int = 0  # position in a topological order
    opaque: bool = False  # has a subgraph (If/Loop/Scan) or an unknown domain
    # Position in the model file's ``graph.node`` list: lets the rewriter find the original
    # NodeProto even when the loader generated or de-duplicated the name.
    source_index: int = -1
    source_name: str = ""  # the name as written in the model ("" when it had none)
    # Computable before run time (every output ``const_foldable``: shape arithmetic, a
    # Transpose or Cast of a weight): a compiler folds it, so it is never a kernel, never
    # a candidate, and moves no HBM bytes.
    compile_time: bool = False

    @classmethod
    def built(cls, **values: Any) -> Node:
        """``Node(**values)`` for the loader; every field must be given."""
        return _built(cls, values)


@dataclass(frozen=True)
class Graph:
    name: str
    nodes: tuple[Node, ...]  # topological order
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int
    model_path: str | None = None
    bound_dims: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Graph-input axes of unknown size, as ``input_ids[1]`` (bind with --input-shape/--dim)
    unbound_dims: tuple[str, ...] = ()
    # symbolic dim name of a graph input -> the axis it names (``seq`` -> ``input_ids[1]``)
    dim_sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    compile_time_nodes: tuple[str, ...] = ()  # names of the nodes a compiler folds
    opaque_nodes: tuple[str, ...] = ()
    # Non-fatal findings of loading (renamed duplicate node names, failed shape inference).
    warnings: tuple[Diagnostic, ...] = ()
    opsets: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    _node_index: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def unknown_size_tensors(self) -> tuple[str, ...]:
        """Tensors whose byte size is not known statically (their traffic is unpriced)."""
        return tuple(name for name, t in self.tensors.items() if t.nbytes is None)

    def node(self, name: str) -> Node:
        if self._node_index:
            return self._node_index[name]
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]
