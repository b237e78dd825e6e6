"""ONNX's whole-graph shape inference of a long graph, run in segments.

One ``infer_shapes`` call on a whole 2048-layer stack costs more per node than on a
512-layer one (onnx's own tables outgrow the caches: 0.12 -> 0.55-0.78 s warm, 4.5-6.5x
for 4x the nodes), while the same nodes inferred in runs of a few thousand cost 0.075 ->
0.28 s (3.75x): docs/speed.md. So a long graph is cut, in file order, into segments of
``SEGMENT_NODES`` nodes, and each segment is inferred as a small model of its own:

* its inputs are what its nodes read from outside it: the model's graph inputs (their
  declared ``ValueInfoProto``), initializers (copied when they hold at most
  ``VALUE_NUMEL`` elements, a typed input otherwise: weight bytes are never copied), and
  the outputs of earlier segments with the types inferred there; a small ``Constant``
  node of an earlier segment is copied in, so a Reshape, Expand or Slice reads its value
  as in one whole call;
* its outputs are the model's graph outputs that its nodes produce (their declared
  types, which onnx merges with what it infers, as in one whole call);
* onnx names a dim it cannot know ``unk__N``, numbering them in one counter per call and
  skipping names the model already uses. Each segment's counter starts at 0, so the
  names it makes are renumbered to continue the whole call's counter: a probe node at
  the end of each segment (``NonZero`` of a 1-element input: its second dim is always
  made) tells where the segment's counter stopped, names made and then dropped (merged
  into a declared output) included.

The result is what one whole call gives, entry for entry (tests/graph/test_segments.py
checks it against one whole call, ``unk__`` names included). ``segmented_types`` returns
None, and the caller makes the one whole call, when segmenting could differ from it:
data propagation (a graph input with a symbolic dim: its partial values do not cross a
segment), control flow or other
subgraphs, model-local functions, sparse initializers, a non-tensor type at a segment's
edge or among the declared inputs and outputs, a name read before (or without) being
produced, an IR version below 4 or an opset without ``NonZero``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ruleengine.graph import onnxlite

if TYPE_CHECKING:
    import onnx

    from ruleengine.graph.typeread import TypeReader

# Nodes per segment, and the fewest nodes worth segmenting. Measured (docs/speed.md): in
# one process the segmented child costs 17%, 9% and 12% more CPU than one whole call at
# 4k, 8k and 22k nodes, as much at 88k (the whole call's cost per node grows with the
# graph, the segments' does not); forked, it makes half the page faults. From four
# segments on, every graph takes the segments: the work per node is then the same at
# every size (one path: a switch at 50,000 nodes made the 512 -> 2048-layer stacks'
# graph stage grow 4.4-4.7x in instructions for 4x the nodes), for 0.016 s more child
# CPU at 22k nodes, beside the parent's own work.
SEGMENT_NODES = 2000
SEGMENT_FROM_NODES = 4 * SEGMENT_NODES

# Initializers and Constant values of at most this many elements are carried into a
# segment as values (shape vectors, axes, scalars: what an op's inference may read);
# larger ones become typed inputs.
VALUE_NUMEL = 4096

_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})
_STANDARD = frozenset({"", "ai.onnx", "ai.onnx.ml"})
_GRAPH_ATTRS = (5, 10)  # AttributeProto.GRAPH, GRAPHS
_PROBE = "__autofusion_segment_probe__"
_PROBE_OUT = _PROBE + "_out"
_PREFIX = "unk__"

Shape = tuple  # dims: int, str (symbolic) or None (unknown); see typeread.type_shape
Entry = tuple[int, Shape | None]  # (ONNX element type, shape)


class NodeFields(NamedTuple):
    """The fields of every node, in file order, as the loader reads them once."""

    nodes: Sequence[Any]  # the NodeProtos (the graph's repeated field: indexed, not held)
    ins: Sequence[tuple[str, ...]]
    outs: Sequence[tuple[str, ...]]
    ops: Sequence[str]
    doms: Sequence[str]
    names: Sequence[str] = ()
    attrs: Sequence[tuple[bytes, ...]] = ()  # each node's AttributeProtos, serialized


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # negative int64: ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_SMALL = [bytes([i]) for i in range(128)]  # the varints of 0..127: one byte each


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    n = len(payload)
    return _SMALL[number << 3 | 2] + (_SMALL[n] if n < 128 else _varint(n)) + payload


def _type_bytes(elem: int, shape: Shape | None) -> bytes:
    """A serialized TypeProto of a tensor (dims as ``type_shape`` reads them back)."""
    tensor = b"\x08" + _varint(elem)
    if shape is not None:
        dims = b""
        for d in shape:
            if d is None:
                dims += _field(1, b"")
            elif isinstance(d, str):
                dims += _field(1, _field(2, d.encode()))
            else:
                dims += _field(1, b"\x08" + _varint(int(d)))
        tensor += _field(2, dims)
    return _field(1, tensor)


def type_proto(elem: int, shape: Shape | None) -> onnx.TypeProto:
    """The TypeProto of a tensor type as ``typeread.type_shape`` reads it."""
    return onnxlite.TypeProto.FromString(_type_bytes(elem, shape))


def _value_info(name: str, type_bytes: bytes) -> bytes:
    return _field(1, name.encode()) + _field(2, type_bytes)


def _symbols(shape: Shape | None) -> Iterator[str]:
    if shape:
        for d in shape:
            if isinstance(d, str):
                yield d


class _Counter:
    """The whole call's ``unk__`` counter: the next index to try, and the names the
    model itself uses (skipped, as onnx's symbol table skips them)."""

    def __init__(self, existing: set[str]) -> None:
        self.next = 0
        self.existing = existing

    def take(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            name = f"{_PREFIX}{self.next}"
            self.next += 1
            if name not in self.existing:
                out.append(name)
        return out


def _made_in_segment(probe: int, seen: set[str]) -> list[str]:
    """The names a segment's own counter made, in order: every ``unk__i`` below the
    probe's that the segment did not already know."""
    return [f"{_PREFIX}{i}" for i in range(probe) if f"{_PREFIX}{i}" not in seen]


def segmentable(model: onnx.ModelProto, fields: NodeFields) -> bool:
    """Whether ``segmented_types`` may run on ``model`` (the cheap checks: the others,
    a symbolic graph input among them, are made while segmenting)."""
    ops = fields.ops
    if len(ops) < SEGMENT_FROM_NODES or model.ir_version < 4:
        return False
    if len(model.functions) or len(model.graph.sparse_initializer):
        return False
    opset = {o.domain or "": o.version for o in model.opset_import}.get("")
    if opset is None or opset < 9:  # the probe is a NonZero
        return False
    if _CONTROL_FLOW.intersection(ops):
        return False
    nodes = fields.nodes
    for i, dom in enumerate(fields.doms):
        if dom not in _STANDARD:  # an op onnx does not know may still carry a subgraph
            if any(a.type in _GRAPH_ATTRS for a in nodes[i].attribute):
                return False
    return True


def segmented_types(
    model: onnx.ModelProto,
    fields: NodeFields,
    inline: Mapping[int, np.ndarray],
    reader: TypeReader,
    size: int | None = None,
) -> dict[str, Entry] | None:
    """name -> (element type, shape) of the graph's inputs, of every tensor onnx's
    inference types and of the graph's outputs, in that order: what ``propagate`` reads
    from one whole ``infer_shapes`` call of ``model`` (without value_info, data
    propagation off), made in segments of ``size`` nodes (``SEGMENT_NODES``).
    ``fields``: the nodes and their fields, in file order; ``inline``: initializers (by
    position) whose small integer values, kept in external data, are written in, as in
    the whole call. None when segmenting could differ from the whole call."""
    io = _Declared.read(model.graph, reader)
    if io is None:
        return None
    run = _Segments.start(model, fields, inline, reader, io)
    if run is None:
        return None
    size = size or SEGMENT_NODES
    n = len(fields.ops)
    for a in range(0, n, size):
        if not run.infer(a, min(a + size, n)):
            return None
    return run.entries()


class _Declared(NamedTuple):
    """The model's initializers, declared graph inputs and outputs: positions, types and
    the symbolic names they use."""

    inits: dict[str, int]  # name -> position (the first)
    inputs: dict[str, int]
    in_order: list[tuple[str, Entry]]  # the typed graph inputs, in order
    declared: dict[str, Entry]  # the same, by name
    outputs: dict[str, int]
    out_declared: dict[str, Entry]
    existing: set[str]  # the symbolic dim names they use

    @classmethod
    def read(cls, g: onnx.GraphProto, reader: TypeReader) -> _Declared | None:
        """None for a non-tensor type, or for a graph input (not an initializer) whose
        shape is not static: that means data propagation (``propagate._symbolic_inputs``),
        and its partial values do not cross a segment."""
        inits: dict[str, int] = {}
        for k, t in enumerate(g.initializer):
            inits.setdefault(t.name, k)
        inputs: dict[str, int] = {}
        in_order: list[tuple[str, Entry]] = []
        static: dict[Any, bool] = {}
        for k, vi in enumerate(g.input):
            name = vi.name
            inputs.setdefault(name, k)
            if vi.HasField("type"):
                got = reader.read(vi.type)
                if got is None:
                    return None  # a sequence or map: its names are not read here
                known = static.get(got[1])
                if known is None:
                    shape = got[1]
                    known = static[got[1]] = shape is not None and all(
                        type(d) is int for d in shape
                    )
                if not known and name not in inits:
                    return None
                in_order.append((name, got))
        declared = dict(in_order)
        outputs: dict[str, int] = {}
        out_declared: dict[str, Entry] = {}
        for k, vi in enumerate(g.output):
            outputs.setdefault(vi.name, k)
            if vi.HasField("type"):
                got = reader.read(vi.type)
                if got is None:
                    return None
                out_declared[vi.name] = got
        existing = {d for _, s in {*declared.values(), *out_declared.values()} for d in _symbols(s)}
        return cls(inits, inputs, in_order, declared, outputs, out_declared, existing)


class _Segments:
    """The segments inferred so far, in file order: the types onnx gave their tensors
    (renamed to the whole call's ``unk__`` names) and what the next segment needs to be
    made (the graph's bytes, where each node begins, the Constants)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        fields: NodeFields,
        inline: Mapping[int, np.ndarray],
        reader: TypeReader,
        io: _Declared,
        scanned: tuple[bytes, list[int], list[tuple[int, int]]],
    ) -> None:
        self.g = model.graph
        self.fields = fields
        self.inline = inline
        self.reader = reader
        self.io = io
        node_bytes, self.starts, self.init_spans = scanned
        self.view = memoryview(node_bytes)  # (slices of it are not copies)
        outs, ops = fields.outs, fields.ops
        self.constants = {outs[i][0]: i for i, op in enumerate(ops) if op == "Constant" and outs[i]}
        header = onnxlite.ModelProto()
        header.ir_version = model.ir_version
        header.opset_import.extend(model.opset_import)
        self.head = header.SerializeToString()
        self.probe = _field(11, _value_info(_PROBE, _type_bytes(1, (1,)))) + _field(
            1,
            _field(1, _PROBE.encode()) + _field(2, _PROBE_OUT.encode()) + _field(4, b"NonZero"),
        )
        self.counter = _Counter(io.existing)
        # every node output typed so far (the whole call's names), in the whole call's
        # value_info order; the graph outputs, as merged with their declared types
        self.types: dict[str, Entry] = {}
        self.out_types: dict[str, Entry] = {}
        self.sym_cache: dict[Shape, tuple[str, ...]] = {}  # shape -> its symbolic dims
        self.produced: list[set[str]] = []  # node outputs of the segments done (untyped too)
        self.typed_bytes: dict[Entry, bytes] = {}  # one TypeProto's bytes per (dtype, shape)

    @classmethod
    def start(
        cls,
        model: onnx.ModelProto,
        fields: NodeFields,
        inline: Mapping[int, np.ndarray],
        reader: TypeReader,
        io: _Declared,
    ) -> _Segments | None:
        """None when the probe's names are taken or the nodes' bytes cannot be found."""
        if {_PROBE, _PROBE_OUT} & (io.inputs.keys() | io.outputs.keys() | io.inits.keys()):
            return None
        scanned = _node_starts(model.graph, len(fields.nodes))
        if scanned is None:
            return None
        return cls(model, fields, inline, reader, io, scanned)

    def init_field(self, k: int) -> bytes | memoryview:
        """Initializer ``k`` as a segment's field: its bytes in the graph's, unless a
        small integer value kept in external data is written in (``inline``)."""
        if k in self.inline:
            return _field(5, _init_bytes(self.g.initializer[k], k, self.inline))
        start, end = self.init_spans[k]
        return self.view[start:end]

    def syms(self, shape: Shape) -> tuple[str, ...]:
        """The symbolic dims of ``shape`` (each distinct shape read once)."""
        got = self.sym_cache.get(shape)
        if got is None:
            got = self.sym_cache[shape] = tuple(_symbols(shape))
        return got

    def typed_input(self, t: str, got: Entry) -> bytes:
        """``t`` as a segment input of type ``got`` (a ValueInfoProto field)."""
        tb = self.typed_bytes.get(got)
        if tb is None:
            tb = self.typed_bytes[got] = _type_bytes(*got)
        return _field(11, _value_info(t, tb))

    def infer(self, a: int, b: int) -> bool:
        """Infer the segment of nodes [a, b) and keep its types; False when segmenting
        could differ from the whole call."""
        ins, outs = self.fields.ins, self.fields.outs
        made: set[str] = set().union(*outs[a:b])
        needed = set().union(*ins[a:b]) - made
        made.discard("")
        needed.discard("")
        if _PROBE in needed or _PROBE_OUT in needed or _PROBE in made or _PROBE_OUT in made:
            return False
        got = self._inputs(a, needed)
        if got is None:
            return False
        parts, carried, seen_syms = got
        io, g = self.io, self.g
        parts.insert(len(carried), self.view[self.starts[a] : self.starts[b]])
        for t in sorted(made.intersection(io.outputs), key=io.outputs.__getitem__):
            parts.append(_field(12, g.output[io.outputs[t]].SerializeToString()))
            seen_syms.update(_symbols(io.out_declared.get(t, (0, None))[1]))
        parts.append(self.probe)
        data = b"".join(parts)
        del parts
        # (the result's value_info and outputs read from its bytes: no message made)
        inferred = _inferred(onnxlite.infer_shapes_bytes(self.head + _field(7, data), False))
        del data
        if inferred is None or not self._take(*inferred, made, carried, seen_syms):
            return False
        self.produced.append(made)
        return True

    def _inputs(self, a: int, needed: set[str]) -> tuple[list[Any], set[str], set[str]] | None:
        """The fields that give the segment starting at node ``a`` what it reads from
        outside it: the Constants copied in (first), then the typed inputs and small
        initializers; with the Constants' outputs and the names its symbol table starts
        with. None when a name is read before (or without) being produced."""
        io, g, nodes = self.io, self.g, self.fields.nodes
        parts: list[Any] = []  # the Constants copied in, then (below) the nodes
        carried: set[str] = set()  # Constant outputs copied in (not inferred here)
        seen_syms: set[str] = set()  # the names this segment's symbol table starts with
        for t in sorted(needed):
            if t in io.inputs:
                got = io.declared.get(t)
                # a tensor type with its element type and every dim known or named (a
                # dim read as None may be an empty name: as declared, then)
                if got is not None and got[0] and (got[1] is None or None not in got[1]):
                    parts.append(self.typed_input(t, got))
                else:  # as declared (no type, or no element type)
                    parts.append(_field(11, g.input[io.inputs[t]].SerializeToString()))
                if got is not None and got[1]:
                    seen_syms.update(self.syms(got[1]))
                if t in io.inits:
                    k = io.inits[t]
                    if _numel(g.initializer[k]) <= VALUE_NUMEL:
                        parts.append(self.init_field(k))
                continue
            k = io.inits.get(t, -1)
            if k >= 0:
                init = g.initializer[k]
                if _numel(init) <= VALUE_NUMEL:
                    parts.append(self.init_field(k))
                else:  # a weight: its type only
                    got = (init.data_type, tuple(init.dims))
                    if not got[0]:
                        return None
                    parts.append(self.typed_input(t, got))
                continue
            j = self.constants.get(t)
            if j is not None and j < a and _small_constant(nodes[j]):
                parts.insert(len(carried), self.view[self.starts[j] : self.starts[j + 1]])
                carried.add(t)
                continue
            got = self.types.get(t) or self.out_types.get(t)
            if got is not None:
                if got[1] is not None and None in got[1]:
                    return None  # an empty dim name (onnx names every unknown dim)
                parts.append(self.typed_input(t, got))
                if got[1]:
                    seen_syms.update(self.syms(got[1]))
                continue
            if any(t in earlier for earlier in self.produced):
                continue  # an earlier node's output onnx left untyped: untyped here too
            return None  # read before it is produced (or never): the whole call
        return parts, carried, seen_syms

    def _take(
        self,
        vis: list[NameType],
        rg_outputs: list[NameType],
        made: set[str],
        carried: set[str],
        seen_syms: set[str],
    ) -> bool:
        """Keep a segment's inferred types (value_info ``vis``, outputs ``rg_outputs``),
        its own ``unk__`` names renumbered as the whole call numbers them."""
        read = self.reader.read_bytes
        # the probe, last: where the segment's counter stopped
        stop = read(vis[-1][1] or b"") if vis else None
        if not vis or vis[-1][0] != _PROBE_OUT or stop is None:
            return False
        last = stop[1][-1] if stop[1] else None
        if not isinstance(last, str) or not last.startswith(_PREFIX):
            return False  # (the probe's dim is always made: a different onnx)
        if not last[len(_PREFIX) :].isdigit():
            return False
        own = _made_in_segment(int(last[len(_PREFIX) :]), seen_syms)
        rename = dict(zip(own, self.counter.take(len(own)), strict=True)) if own else None
        fixed: dict[Entry, Entry] = {}  # (each distinct entry renamed once)
        types = self.types
        for name, tb in vis:
            got = read(tb or b"")  # (no type field: the empty TypeProto, no tensor type)
            if got is None:
                if name in made:  # a node output of no tensor type: not representable
                    return False
                continue
            if carried and name in carried:
                continue
            if rename is not None:
                got = _renamed(got, rename, fixed)
            types[name] = got
        del types[_PROBE_OUT]
        for name, tb in rg_outputs:
            if tb is None:
                continue  # (its inferred type went to value_info, as in one call)
            got = read(tb)
            if got is None:
                return False
            if rename is not None:
                got = _renamed(got, rename, fixed)
            self.out_types[name] = got
        return True

    def entries(self) -> dict[str, Entry]:
        """The graph inputs', the tensors' and the graph outputs' types, in that order."""
        entries: dict[str, Entry] = dict(self.io.in_order)
        entries.update(self.types)
        for vi in self.g.output:
            got = self.out_types.get(vi.name)
            if got is None:
                got = self.io.out_declared.get(vi.name)  # produced by no node: as declared
            if got is not None:
                entries[vi.name] = got
        return entries


def _renamed(got: Entry, rename: dict[str, str], fixed: dict[Entry, Entry]) -> Entry:
    """``got`` with the names ``rename`` maps."""
    new = fixed.get(got)
    if new is None:
        shape = got[1]
        if shape and any(isinstance(d, str) and d in rename for d in shape):
            new = (got[0], tuple(rename.get(d, d) if isinstance(d, str) else d for d in shape))
        else:
            new = got
        fixed[got] = new
    return new


def _node_starts(
    g: onnx.GraphProto, n: int
) -> tuple[bytes, list[int], list[tuple[int, int]]] | None:
    """The graph's bytes, where each of its ``n`` nodes begins in them (and where the
    last one ends), and where each initializer's field begins and ends: a segment's
    nodes are then one slice and its initializers slices, not ``n`` serializations.
    (protobuf writes a message's fields in field order, the nodes, field 1, first; None
    if these bytes are not so.)"""
    data = g.SerializeToString()
    try:
        starts = _scan(data, n)
        inits = _spans(data, starts[n], len(data), _INIT_TAG)
    except (IndexError, ValueError):
        return None
    if len(inits) != len(g.initializer):
        return None
    return data, starts, inits


_INIT_TAG = 5 << 3 | 2  # GraphProto.initializer, length-delimited
_OUTPUT_TAG = 12 << 3 | 2  # GraphProto.output
_VALUE_INFO_TAG = 13 << 3 | 2  # GraphProto.value_info
_GRAPH_TAG = 7 << 3 | 2  # ModelProto.graph


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(tag, start of the field, start of its payload, end of the field) of each field
    of the message in ``data[pos:end]``, in order (a length-delimited field's payload
    is its bytes; ValueError or IndexError when the bytes are not a message)."""
    while pos < end:
        start = pos
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint_at(data, pos)
        wire = tag & 7
        if wire == 2:
            size = data[pos]
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint_at(data, pos)
            payload = pos
            pos += size
        elif wire == 0:
            payload = pos
            _, pos = _varint_at(data, pos)
        elif wire in (1, 5):
            payload = pos
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
        yield tag, start, payload, pos
    if pos != end:
        raise ValueError("cut short")


def _spans(data: bytes, pos: int, end: int, tag: int) -> list[tuple[int, int]]:
    """(start, end) of each field with ``tag`` of the message in ``data[pos:end]``."""
    return [(start, stop) for t, start, _, stop in _fields(data, pos, end) if t == tag]


NameType = tuple[str, bytes | None]  # a ValueInfoProto: its name, its type's bytes


def _inferred(data: bytes) -> tuple[list[NameType], list[NameType]] | None:
    """The value_info and the outputs of the graph of the serialized model ``data`` (an
    inferred segment), each a name and its TypeProto's bytes (None: no type field), read
    from the bytes (no message is made); None when the bytes are not as expected."""
    try:
        graphs = [(p, stop) for t, _, p, stop in _fields(data, 0, len(data)) if t == _GRAPH_TAG]
        if len(graphs) != 1:
            return None
        vis: list[NameType] = []
        outs: list[NameType] = []
        pos, end = graphs[0]
        while pos < end:  # (_fields, unrolled: a segment's 2,000 nodes are skipped here)
            tag = data[pos]
            if tag >= 0x80 or tag & 7 != 2:  # not a length-delimited field of number < 16
                for tag, _, p, stop in _fields(data, pos, end):
                    if tag == _VALUE_INFO_TAG:
                        vis.append(_name_type(data, p, stop))
                    elif tag == _OUTPUT_TAG:
                        outs.append(_name_type(data, p, stop))
                pos = end
                break
            size = data[pos + 1]
            if size < 0x80:
                p = pos + 2
            else:
                size, p = _varint_at(data, pos + 1)
            pos = p + size
            if tag == _VALUE_INFO_TAG:
                vis.append(_name_type(data, p, pos))
            elif tag == _OUTPUT_TAG:
                outs.append(_name_type(data, p, pos))
        if pos != end:
            return None
        return vis, outs
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _name_type(data: bytes, pos: int, end: int) -> NameType:
    """A serialized ValueInfoProto's name and type bytes (as protobuf merges them: the
    last name, the types' bytes joined)."""
    if data[pos] == 0x0A:  # most often: the name, then the type, both under 128 bytes
        n = data[pos + 1]
        q = pos + 2 + n
        if n < 0x80 and q + 1 < end and data[q] == 0x12:
            m = data[q + 1]
            if m < 0x80 and q + 2 + m == end:
                return data[pos + 2 : q].decode(), data[q + 2 : end]
    name = b""
    type_bytes: bytes | None = None
    for tag, _, p, stop in _fields(data, pos, end):
        if tag == 0x0A:
            name = data[p:stop]
        elif tag == 0x12:
            type_bytes = (type_bytes or b"") + data[p:stop]
    return name.decode(), type_bytes


def _scan(data: bytes, n: int) -> list[int]:
    starts = [0] * (n + 1)
    pos = 0
    end = len(data)
    for k in range(n):
        if pos >= end or data[pos] != 0x0A:
            raise ValueError("not a node")
        starts[k] = pos
        b1 = data[pos + 1]
        if b1 < 0x80:  # (a node of under 128 bytes, or under 16 KiB: most of them)
            pos += 2 + b1
            continue
        b2 = data[pos + 2]
        if b2 < 0x80:
            pos += 3 + ((b1 & 0x7F) | b2 << 7)
            continue
        length, pos = _varint_at(data, pos + 1)
        pos += length
    if pos > end:
        raise ValueError("cut short")
    starts[n] = pos
    return starts


def _numel(t: onnx.TensorProto) -> int:
    return math.prod(t.dims)


def _init_bytes(init: onnx.TensorProto, k: int, inline: Mapping[int, np.ndarray]) -> bytes:
    v = inline.get(k)
    if v is None:
        return init.SerializeToString()
    return onnxlite.from_array(np.asarray(v), init.name).SerializeToString()


def _small_constant(node: onnx.NodeProto) -> bool:
    """A Constant whose value is small enough to copy (a dense ``value`` of at most
    ``VALUE_NUMEL`` elements, or a list attribute as short)."""
    for a in node.attribute:
        if a.name == "value":
            return a.HasField("t") and _numel(a.t) <= VALUE_NUMEL
        if a.name == "sparse_value":
            return False
        if a.name in ("value_ints", "value_floats", "value_strings"):
            return len(a.ints) + len(a.floats) + len(a.strings) <= VALUE_NUMEL
        return True  # value_int, value_float, value_string
    return True
