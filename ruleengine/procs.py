"""A native call run in a forked child process, beside the parent's Python work.

ONNX's C++ entry points (whole-model shape inference, the checker) hold the GIL for
their whole run: a thread beside them does not run (measured: a Python loop in the main
thread made no progress while ``infer_shapes`` ran in another, 0.93 s at 2048 layers). A
forked child runs them on a core of its own instead: it inherits the arguments
copy-on-write (nothing is pickled to it), sends back the call's bytes (or the exception
it raised) through a pipe and exits with ``os._exit`` (no clean-up of the parent's state,
no flush of its buffers). ``result`` reads them and reaps the child; a ``Forked`` dropped
unread (an error in the parent) kills and reaps its child.

``forkable`` says when a child may be forked: more than one job, ``os.fork`` exists and
no other thread runs (a fork while another thread holds a lock can leave the child
waiting on it for ever).
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Below this many nodes a fork and the result's transfer cost more than the work they
# overlap saves (the matcher's rule split, ONNX's inference, the fused model's check).
FORK_FROM_NODES = 4000

_HEADER = struct.Struct("<BQ")  # status (0 bytes, 1 pickled exception, 2 described), length


def cores() -> int:
    """The number of cores this process may run on (the default of ``--jobs``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (a forked
    inference or check counts where it is reaped)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Tally:
    """CPU seconds (user + system, from ``os.wait4``) of the forked children reaped while
    it is open (``tally``): the whole child, its fork, pickling and exit included; and the
    wall seconds ``result`` waited for them (and read their bytes)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wait = 0.0


_TALLIES: list[Tally] = []


@contextmanager
def tally() -> Iterator[Tally]:
    """Count the CPU of every child reaped inside the block: the work of a stage done by
    children that another stage reaps (the rules' and the catalog's, finished after the
    model is read) is moved back to its own stage with it (``laps.Laps.reaped``)."""
    counted = Tally()
    _TALLIES.append(counted)
    try:
        yield counted
    finally:
        _TALLIES.remove(counted)


def forkable(jobs: int) -> bool:
    """May work be forked off now (``jobs`` processes allowed)?"""
    return jobs > 1 and hasattr(os, "fork") and threading.active_count() == 1


class Forked:
    """``fn(*args)`` (which returns bytes) running in a forked child."""

    def __init__(self, fn: Callable[..., bytes], *args: Any) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read)
            _child(write, fn, args)
        os.close(write)
        self._pid, self._fd = pid, read
        self._finalizer = weakref.finalize(self, _reap, pid, read, True)

    def result(self) -> bytes:
        """The call's bytes; raises what the call raised (same type and message)."""
        began = time.perf_counter()
        head = b""
        while len(head) < _HEADER.size:  # the header first: the payload is joined once
            chunk = os.read(self._fd, _HEADER.size - len(head))
            if not chunk:
                break
            head += chunk
        chunks = []
        while True:
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        self._finalizer.detach()
        waited = time.perf_counter() - began
        for counted in _TALLIES:
            counted.wait += waited
        status = _reap(self._pid, self._fd, False)
        if len(head) < _HEADER.size:
            raise ChildProcessError(f"the forked worker ended without a result (status {status})")
        kind, size = _HEADER.unpack(head)
        payload = b"".join(chunks)
        del chunks
        if len(payload) != size:
            raise ChildProcessError("the forked worker's result was cut short")
        if kind == 0:
            return payload
        raise _exception(kind, payload)


def _child(fd: int, fn: Callable[..., bytes], args: tuple) -> None:
    code = 0
    try:
        # the parent's handlers raise into its stack; here the defaults apply
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            out = _HEADER.pack(0, 0)
            data = fn(*args)
            out = _HEADER.pack(0, len(data))
        except BaseException as exc:  # handed to the parent
            data = _described(exc)
            out = _HEADER.pack(data[0], len(data) - 1)
            data = data[1:]
        with open(fd, "wb", closefd=True) as pipe:
            pipe.write(out)
            pipe.write(data)
    except BaseException:  # the parent sees a missing result
        code = 1
    finally:
        os._exit(code)


def _described(exc: BaseException) -> bytes:
    """The exception for the parent: pickled (kind 1), or (kind 2) its class's module,
    qualified name and message when its class cannot be pickled by reference (the
    exceptions of ONNX's C++ extension)."""
    try:
        return b"\x01" + pickle.dumps(exc)
    except Exception:  # unpicklable: described instead
        cls = type(exc)
        return b"\x02" + pickle.dumps((cls.__module__, cls.__qualname__, str(exc)))


def _exception(kind: int, payload: bytes) -> BaseException:
    if kind == 1:
        return pickle.loads(payload)
    module, qualname, message = pickle.loads(payload)
    cls = _class(module, qualname)
    if cls is not None:
        try:
            return cls(message)
        except Exception:  # built below instead
            pass
    # the same class name and message (what a diagnostic shows) if the class is not found
    return type(qualname.rsplit(".", 1)[-1], (Exception,), {"__module__": module})(message)


def _class(module: str, qualname: str) -> type | None:
    """The class named, looked up among loaded modules only (ONNX's extension names its
    submodules ``onnx.onnx_cpp2py_export.checker`` etc. without registering them)."""
    parts = (*module.split("."), *qualname.split("."))
    for k in range(len(parts) - 1, 0, -1):
        obj: Any = sys.modules.get(".".join(parts[:k]))
        if obj is None:
            continue
        for name in parts[k:]:
            obj = getattr(obj, name, None)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return obj
        return None
    return None


def _reap(pid: int, fd: int, kill: bool) -> int:
    """Close the pipe and wait for the child (killed first when its result is not
    wanted); its exit status."""
    try:
        os.close(fd)
    except OSError:
        pass
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return -1
    for counted in _TALLIES:
        counted.cpu += usage.ru_utime + usage.ru_stime
    return status
