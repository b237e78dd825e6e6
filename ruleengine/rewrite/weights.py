"""Where a model's weights live, and where the fused model's weight references point.

Fusion changes no weight, so nothing here reads weight bytes to rewrite a model: the
fused model keeps each external tensor's reference, rewritten so that it resolves from
OUTDIR. onnx (>= 1.16) and onnxruntime refuse external data outside the model's
directory, absolute paths and symbolic links, so a reference is one of:

- ``inside``: the original file already lies inside OUTDIR (``-o`` is the model's folder
  or a parent of it): a relative path to it; the fused model shares the original's file
  (nothing copied or linked: the zero-copy way);
- ``copy``: the default elsewhere: a copy in OUTDIR, a reflink (FICLONE) where the
  filesystem has one, else a sparse-aware copy (holes stay holes);
- ``link``: ``--weights link`` only: a hard link to the original file in OUTDIR (same
  filesystem, else a copy). onnx (>= 1.18) then refuses to load both the fused model and
  the original (a data file with two names is a "hardlink attack" to it);
- ``outside``: ``--weights share`` with weights outside OUTDIR: a relative path leaving
  OUTDIR (written, with a warning: onnx.checker and onnxruntime refuse it);
- ``missing``: the weights file is absent (structure-only export): the reference names the
  same location as before, relative to OUTDIR, with a warning.

Verification reads weights through ``tensor_array`` (a read-only memory map of just that
tensor) or ``external_buffers`` (memory maps of whole files handed to onnxruntime), so a
weight page is read only when a computation touches it.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ruleengine.graph import onnxlite
from ruleengine.graph.onnxlite import TensorProto

if TYPE_CHECKING:
    import onnx

Progress = Callable[[str], None]

# Inline tensors at least this large move to the fused model's own data file when the
# fused model would not fit one protobuf message (they were inline in the input, so their
# bytes are in memory already).
EXTERNAL_MIN_BYTES = 1024
HOW = ("inside", "link", "copy", "outside", "missing")
# --weights: what fuse does with an external file outside OUTDIR (one inside is shared)
MODES = ("copy", "share", "link")
FICLONE = 0x40049409  # Linux ioctl: share the source's extents (btrfs, XFS, bcachefs)
# errors of FICLONE / copy_file_range that mean "not here", not "failed"
NOT_HERE = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.ENOSYS,
     errno.EBADF, errno.EPERM}
)  # fmt: skip
COPY_CHUNK = 64 << 20  # bytes per copy_file_range / pread call
PROGRESS_SECONDS = 5.0  # a progress line at most this often while copying


@dataclass(frozen=True)
class ExternalFile:
    """One external data file the model references (``location`` as the model spells it)."""

    location: str
    path: Path  # absolute, resolved against the model's directory
    present: bool
    needed_bytes: int  # the largest offset + length any tensor reads from it
    tensors: int


@dataclass(frozen=True)
class WeightSurvey:
    """The model's weights by where they are: inline bytes and external files."""

    model_dir: Path
    files: tuple[ExternalFile, ...]
    external_bytes: int
    inline_bytes: int

    @property
    def missing(self) -> tuple[ExternalFile, ...]:
        return tuple(f for f in self.files if not f.present)

    @property
    def total_bytes(self) -> int:
        return self.external_bytes + self.inline_bytes


@dataclass(frozen=True)
class Placement:
    """Where one external file is referenced from OUTDIR, and how it gets there."""

    location: str  # as the input model spells it
    new_location: str  # relative to OUTDIR, POSIX separators
    how: str  # one of HOW
    source: Path


def all_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every tensor of the model that can hold weights: initializers (of the graph, its
    subgraphs and functions) and tensor attributes (Constant values)."""

    def from_graph(g: onnx.GraphProto) -> Iterator[TensorProto]:
        yield from g.initializer
        yield from (s.values for s in g.sparse_initializer)
        yield from from_nodes(g.node)

    def from_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[TensorProto]:
        for n in nodes:
            for a in n.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("g"):
                    yield from from_graph(a.g)
                for sg in a.graphs:
                    yield from from_graph(sg)

    yield from from_graph(model.graph)
    for f in model.functions:
        yield from from_nodes(f.node)


def is_external(t: TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL


def external_info(t: TensorProto) -> tuple[str, int, int | None]:
    """(location, offset, length) of an external tensor (length None: to the end)."""
    info = {e.key: e.value for e in t.external_data}
    length = info.get("length")
    return (
        info.get("location", ""),
        int(info.get("offset", 0) or 0),
        (int(length) if length not in (None, "") else None),
    )


def tensor_nbytes(t: TensorProto) -> int:
    """Bytes of a tensor's values from its header (dims and dtype), never its data."""
    try:
        itemsize = onnxlite.np_dtype(t.data_type).itemsize
    except Exception:  # exotic types (4-bit, strings): count one byte
        itemsize = 1
    dims = t.dims
    n = math.prod(dims)
    if not 0 <= n < 1 << 63:  # as numpy's int64 product gives it (negative dims, overflow)
        n = int(np.prod([int(d) for d in dims], dtype=np.int64))
    return n * itemsize


def survey(model: onnx.ModelProto, model_path: str | Path) -> WeightSurvey:
    """Which weights are inline and which files the external ones live in (stat only)."""
    base = Path(model_path).resolve().parent
    files: dict[str, list[int]] = {}  # location -> [needed bytes, tensors]
    external = inline = 0
    for t in all_tensors(model):
        size = tensor_nbytes(t)
        if is_external(t):
            location, offset, length = external_info(t)
            entry = files.setdefault(location, [0, 0])
            entry[0] = max(entry[0], offset + (length if length is not None else size))
            entry[1] += 1
            external += size
        else:
            inline += size
    found = []
    for location, (needed, count) in files.items():
        path = (base / location).resolve() if location else base
        found.append(ExternalFile(location, path, path.is_file(), needed, count))
    return WeightSurvey(base, tuple(found), external, inline)


def tensor_array(t: TensorProto, model_dir: Path) -> np.ndarray:
    """The values of one initializer: inline ones decoded, external ones a read-only
    memory map of exactly the tensor's bytes (nothing read until used)."""
    from onnx import numpy_helper

    if not is_external(t):
        return numpy_helper.to_array(t)
    location, offset, _ = external_info(t)
    dtype = onnxlite.np_dtype(t.data_type)
    shape = tuple(int(d) for d in t.dims)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(model_dir / location, dtype=dtype, mode="r", offset=offset, shape=shape)


def external_buffers(found: WeightSurvey) -> dict[str, np.ndarray]:
    """Location -> a read-only memory map of the whole file, for onnxruntime's
    ``add_external_initializers_from_files_in_memory`` (the model runs from bytes)."""
    buffers: dict[str, np.ndarray] = {}
    for f in found.files:
        if f.present and f.path.stat().st_size > 0:
            with open(f.path, "rb") as fh:
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            buffers[f.location] = np.frombuffer(mapped, dtype=np.uint8)
    return buffers


def _device(path: Path) -> int | None:
    p = path
    while not p.exists():
        if p.parent == p:
            return None
        p = p.parent
    return p.stat().st_dev


def _clean_location(location: str) -> str | None:
    """The location as a path inside OUTDIR, if it is one (no '..', not absolute)."""
    p = PurePosixPath(location.replace("\\", "/"))
    if not location or p.is_absolute() or ".." in p.parts or p.parts[:1] == ("~",):
        return None
    return str(p)


def place(
    found: WeightSurvey,
    outdir: str | Path,
    *,
    mode: str = "copy",
    reserved: Iterable[str] = (),
) -> tuple[Placement, ...]:
    """Decide, for each external file, how the fused model in ``outdir`` references it.

    A file already inside ``outdir`` is shared as it is, whatever the mode; one outside is
    copied (``mode`` "copy"), hard-linked ("link") or referenced where it lies ("share").
    Pure decision (stat calls only); ``emit.write_atomically`` makes the links and copies.
    ``reserved`` are OUTDIR paths taken by other outputs (a weights file never overwrites
    one of them).
    """
    if mode not in MODES:
        raise ValueError(f"weights mode {mode!r}: one of {', '.join(MODES)}")
    root = Path(outdir).resolve()
    taken = set(reserved)
    placements: list[Placement] = []
    for f in found.files:
        inside = _relative_inside(f.path, root)
        if inside is not None and f.present:
            placements.append(Placement(f.location, inside, "inside", f.path))
            continue
        if not f.present or mode == "share":
            rel = Path(os.path.relpath(f.path, root)).as_posix()
            how = "missing" if not f.present else "outside"
            placements.append(Placement(f.location, rel, how, f.path))
            continue
        name = _clean_location(f.location) or f.path.name
        while name in taken:
            name = f"weights/{name}" if not name.startswith("weights/") else f"_{name}"
        taken.add(name)
        dest = root / name
        if mode == "link" and dest.exists() and _same_file(dest, f.path):
            placements.append(Placement(f.location, name, "inside", f.path))
        elif mode == "link" and _device(root) == f.path.stat().st_dev:
            placements.append(Placement(f.location, name, "link", f.path))
        else:  # a hard link an earlier run left in OUTDIR is replaced by the copy
            placements.append(Placement(f.location, name, "copy", f.path))
    return tuple(placements)


def _relative_inside(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class WeightSource(NamedTuple):
    """A weights file of the output set made from an existing one (``emit.write_atomically``
    ``sources``): never read into memory. ``how`` is "link" or "copy"."""

    source: Path
    how: str
    progress: Progress | None = None


def materialize(dest: Path, source: Path, how: str, progress: Progress | None = None) -> None:
    """Put a weights file at ``dest``: a hard link to ``source``, or a copy of it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if how == "link":
        os.link(source, dest)
    else:
        copy_file(source, dest, progress)


def copy_file(source: Path, dest: Path, progress: Progress | None = None) -> str:
    """Copy ``source`` to the new file ``dest``: a reflink where the filesystem has one
    ("reflink": no byte copied, no disk used until either is written), else a sparse-aware
    copy ("sparse": only the data extents, kernel to kernel, in chunks; holes stay holes).
    Never holds the file in memory. ``progress`` gets a line now and then while copying."""
    with open(source, "rb") as src, open(dest, "xb") as dst:
        if reflink(src.fileno(), dst.fileno()):
            how = "reflink"
        else:
            size = os.fstat(src.fileno()).st_size
            copy_sparse(src.fileno(), dst.fileno(), size, _Meter(source.name, size, progress))
            how = "sparse"
        dst.flush()
        os.fsync(dst.fileno())
    return how


def reflink(src: int, dst: int) -> bool:
    """Clone ``src`` into the empty ``dst`` (FICLONE); False where no reflink is possible
    (another filesystem, one without reflinks such as ext4 or tmpfs, not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import fcntl

    try:
        fcntl.ioctl(dst, FICLONE, src)
    except OSError as exc:
        if exc.errno in NOT_HERE:
            return False
        raise
    return True


def copy_sparse(src: int, dst: int, size: int, meter: _Meter | None = None) -> None:
    """Copy the data extents of ``src`` (SEEK_DATA/SEEK_HOLE) into ``dst`` at the same
    offsets, then set its size: a sparse file stays sparse, a dense one is copied whole."""
    pos = 0
    if not hasattr(os, "SEEK_DATA"):  # no hole-finding here: all of it is data
        copy_range(src, dst, 0, size, meter)
        pos = size
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            start = pos  # no SEEK_DATA on this filesystem: all of it is data
        try:
            end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        except OSError:
            end = size
        if meter is not None:
            meter.add(start - pos)  # a hole skipped counts as done
        copy_range(src, dst, start, end, meter)
        pos = end
    os.ftruncate(dst, size)


def copy_range(src: int, dst: int, start: int, end: int, meter: _Meter | None = None) -> None:
    """Bytes ``start:end`` of ``src`` to the same offsets of ``dst``: copy_file_range (in
    the kernel), else pread/pwrite in chunks of COPY_CHUNK."""
    pos = start
    kernel = hasattr(os, "copy_file_range")
    while pos < end:
        n = min(COPY_CHUNK, end - pos)
        done = 0
        if kernel:
            try:
                done = os.copy_file_range(src, dst, n, pos, pos)
            except OSError as exc:
                if exc.errno not in NOT_HERE:
                    raise
                kernel = False
        if not kernel:
            data = os.pread(src, n, pos)
            done = len(data)
            view = memoryview(data)
            while view:
                view = view[os.pwrite(dst, view, pos + done - len(view)) :]
        if done == 0:  # the file shrank under us: ftruncate restores the size
            return
        pos += done
        if meter is not None:
            meter.add(done)


class _Meter:
    """Progress lines while a weights file is copied: one at the start, then one every
    PROGRESS_SECONDS (none at all without a progress callback). ``done`` is how far into
    the file the copy is, holes included."""

    def __init__(self, name: str, size: int, progress: Progress | None) -> None:
        self.name, self.size, self.progress = name, size, progress
        self.done = 0
        self.last = time.monotonic()
        if progress is not None:
            progress(f"copying weights {name} ({_gib(size)})")

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.progress is not None and now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self.progress(f"copying weights {self.name}: {_gib(self.done)} of {_gib(self.size)}")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def rewrite_locations(model: onnx.ModelProto, new: Mapping[str, str]) -> None:
    """Point every external tensor at its new location (in place, on a copy of the model)."""
    for t in all_tensors(model):
        if not is_external(t):
            continue
        for e in t.external_data:
            if e.key == "location" and e.value in new:
                e.value = new[e.value]


def externalize_inline(model: onnx.ModelProto, data_name: str) -> bytes:
    """Move inline tensors of at least EXTERNAL_MIN_BYTES to ``data_name`` (in place);
    returns that file's bytes. Only for a fused model too large for one protobuf message:
    its inline weights came from an input under 2 GB, so they are in memory already."""
    chunks: list[bytes] = []
    offset = 0
    for t in all_tensors(model):
        if is_external(t) or not t.HasField("raw_data") or len(t.raw_data) < EXTERNAL_MIN_BYTES:
            continue
        pad = (-offset) % 4096  # page-aligned, so onnxruntime can map tensors directly
        chunks.append(b"\0" * pad)
        offset += pad
        raw = t.raw_data
        chunks.append(raw)
        del t.external_data[:]
        for key, value in (("location", data_name), ("offset", offset), ("length", len(raw))):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        offset += len(raw)
    return b"".join(chunks)


def checkable(model: onnx.ModelProto, limit: int) -> onnx.ModelProto:
    """A copy of the model for ``onnx.checker`` in memory: external initializers of the
    main graph (which the in-memory checker would look for relative to the working
    directory) become graph inputs of the same type, and so do inline ones when the model
    is over ``limit`` bytes. Their values never matter to the checker. A model with
    nothing to change is returned as it is (no copy: the checker reads, never writes).

    The new inputs are ``make_tensor_value_info(name, data_type, dims)``, written as
    protobuf bytes from one encoded type per distinct (data type, dims) and merged into
    the graph in one call (2048 layers, 24,577 external tensors: 0.17 -> ~0.04 s)."""
    strip_all = model.ByteSize() >= limit
    if not strip_all and not any(is_external(t) for t in model.graph.initializer):
        return model
    out = onnxlite.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inputs = {i.name for i in g.input}
    kept = []
    encoded: list[bytes] = []
    types: dict[tuple[int, tuple[int, ...]], bytes] = {}
    for t in g.initializer:
        if strip_all or is_external(t):
            name = t.name
            if name not in inputs:
                key = (t.data_type, tuple(t.dims))
                typed = types.get(key)
                if typed is None:  # the ValueInfoProto's field 2: its TypeProto
                    tb = onnxlite.tensor_type_proto(key[0], list(key[1])).SerializeToString()
                    typed = types[key] = b"\x12" + _varint(len(tb)) + tb
                raw = name.encode()
                info = b"\x0a" + _varint(len(raw)) + raw + typed  # field 1 (name), then 2
                encoded.append(b"\x5a" + _varint(len(info)) + info)  # GraphProto.input (11)
        else:
            kept.append(t)
    if encoded:
        g.MergeFromString(b"".join(encoded))  # appended to g.input, in this order
    if len(kept) != len(g.initializer):
        copies = [TensorProto() for _ in kept]
        for c, t in zip(copies, kept, strict=True):
            c.CopyFrom(t)
        del g.initializer[:]
        g.initializer.extend(copies)
    return out


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
