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
import select
import signal
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

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
        _LIVE.add(pid)
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
        # the parent's handlers raise into its stack; here SIGTERM kills, and a terminal's
        # Ctrl-C is left to the parent, which ends its children (its result must not go
        # missing, read as an error, before the parent sees the Ctrl-C)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent()
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
    if kill and pid in _LIVE:  # (not reaped by ``kill_children``: the pid may be reused)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        _LIVE.discard(pid)
        return -1
    _LIVE.discard(pid)
    for counted in _TALLIES:
        counted.cpu += usage.ru_utime + usage.ru_stime
    return status


# The pids of the ``Forked`` children not reaped yet.
_LIVE: set[int] = set()
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this (forked) process when its parent ends, however the
    parent ends (SIGKILL included): no worker outlives the command. Linux only; a no-op
    elsewhere. Called first thing in a forked child."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux / no prctl
        return
    if os.getppid() != parent:  # the parent ended before the request was made
        os._exit(1)


def kill_children() -> None:
    """SIGKILL and reap every child this process forked that still runs: the ``Forked``
    calls not reaped yet and ``multiprocessing``'s workers (a parallel match's pool).
    For a process about to end on Ctrl-C or SIGTERM without unwinding further."""
    for pid in sorted(_LIVE):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    mp = sys.modules.get("multiprocessing")
    workers = mp.active_children() if mp is not None else []
    for worker in workers:
        worker.kill()
    for pid in sorted(_LIVE):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        _LIVE.discard(pid)
    for worker in workers:
        worker.join(1.0)


# How long a supervised command is given to end on its own after Ctrl-C or SIGTERM
# before it is killed (its own clean-up takes ~0.1 s; the promise is one second).
STOP_GRACE_S = 0.5

REAP_WAIT_S = 0.1  # how long the supervisor waits for an ended command to be reaped
_TOLD: int | None = None  # in a supervised command: the pipe to its supervisor


class _Stop(Exception):
    """Raised once by the supervisor's handler: ends its wait for the command."""


def supervise() -> None:
    """Fork: the command runs on in the child (this returns there), and this process
    waits for it, forwards Ctrl-C and SIGTERM to it, and exits as it did.

    Python answers a signal only between bytecodes: a long native call (a C extension's
    import, protobuf parsing, a huge sort, memory thrash at 18 GB) holds the answer off
    for seconds. The supervisor, which only waits, answers at once; the command gets
    ``STOP_GRACE_S`` to clean up and say it stops (``tell_supervisor``: 130/143), then it
    is killed (SIGKILL; its own forked children die with it: ``die_with_parent``) and the
    supervisor says ``interrupted``/``terminated`` and exits 130/143. Either way the
    supervisor does not wait for the kernel to take the command's memory back (about a
    second per 10 GB). A staging folder such a kill leaves is removed by the next run
    that writes there (rewrite.writer). Call it with SIGINT/SIGTERM blocked (they are
    unblocked in the supervisor; the child keeps them blocked for its caller to install
    its handlers first)."""
    global _TOLD
    if not hasattr(os, "fork"):  # pragma: no cover - not POSIX: no supervisor
        return
    sys.stdout.flush()
    sys.stderr.flush()
    told, tell = os.pipe()
    pid = os.fork()
    if pid == 0:
        die_with_parent()
        os.close(told)
        _TOLD = tell
        return
    os.close(tell)
    _exit_as(_wait_supervised(pid, told))


def supervised() -> bool:
    """Is this process a command run by ``supervise`` (which says why it stopped)?"""
    return _TOLD is not None


def tell_supervisor(code: int) -> None:
    """In a supervised command about to end on a stop (its clean-up done, its output
    flushed): hand the exit code to the supervisor, which says ``interrupted`` or
    ``terminated`` (130, 143) and exits with it at once."""
    if _TOLD is not None:
        try:
            os.write(_TOLD, bytes([code & 0xFF]))
        except OSError:  # the supervisor is gone
            pass


class _Ended(NamedTuple):
    """How a supervised command ended: its wait status, or the exit code it told (on a
    stop), or the stop signal it was killed for (it did not end in time)."""

    status: int = 0
    told: int | None = None
    killed_for: int | None = None


def _wait_supervised(pid: int, told: int) -> _Ended:
    """Wait for the command ``pid`` (its exit code comes on ``told`` after a stop)."""
    stops: list[int] = []

    def forward(signum: int, frame: object) -> None:
        stops.append(signum)
        try:
            os.kill(pid, signum)  # (a terminal's Ctrl-C reached it already: a repeat)
        except ProcessLookupError:
            pass
        if len(stops) == 1:
            raise _Stop

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        status = os.waitpid(pid, 0)[1]
        # (a stop it got on its own, e.g. from itself, is told too)
        said = os.read(told, 1) if select.select([told], [], [], 0)[0] else b""
        return _Ended(status=status, told=said[0] if said else None)
    except _Stop:
        pass
    deadline = time.monotonic() + STOP_GRACE_S
    watched = [told]
    while time.monotonic() < deadline:
        if select.select(watched, [], [], 0.005)[0]:
            code = os.read(told, 1)
            if code:  # said and flushed: the kernel may take its memory back after we end
                _reap_within(pid, REAP_WAIT_S)
                return _Ended(told=code[0])
            watched = []  # every writer closed: the command ended
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped as the stop came (its status lost): the stop's
            return _Ended(killed_for=stops[0])
        if done:
            return _Ended(status=status)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap_within(pid, REAP_WAIT_S)
    return _Ended(killed_for=stops[0])


def _reap_within(pid: int, seconds: float) -> None:
    """Reap the ended command if the kernel is done with it within ``seconds`` (a small
    one is; a large one's memory takes longer to hand back: init reaps it)."""
    deadline = time.monotonic() + seconds
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
    except ChildProcessError:  # reaped already
        pass


def _exit_as(ended: _Ended) -> None:
    """End this process as the command ended: the exit code it told or exited with, or
    the signal that killed it (the same signal, default action), or 128 + the stop
    signal when it had to be killed after one."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    code = ended.told if ended.killed_for is None else 128 + ended.killed_for
    if code is not None:
        word = {128 + signal.SIGTERM: "terminated", 128 + signal.SIGINT: "interrupted"}
        if code in word:
            os.write(2, f"{word[code]}\n".encode())
        os._exit(code)
    status = ended.status
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
