"""Process-level helpers the heavy stages share."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector around allocation-heavy work.

    Matching (pyDatalog's many small objects), scoring and resolving create no reference
    cycles worth collecting, but their allocations trigger full collections that walk
    the whole graph and match result each time: measured as about a fifth of the cost
    stage on a 512-layer decoder, and more in matching.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if _ONE_SHOT:
                # Everything allocated while paused sits in the youngest generation: the
                # first allocation after ``enable`` would walk it all (~1 s for a
                # 2048-layer graph and its match result). In a one-shot process those
                # objects live until exit, so they are moved out of the collector's
                # sight instead (``gc.freeze``: O(1)).
                gc.freeze()
            gc.enable()


_ONE_SHOT = False


def one_shot_process() -> None:
    """Declare this process one-shot (the ``autofusion`` command): what a ``paused_gc``
    block allocated is frozen when it ends rather than collected (see there). Library
    callers, which match and fuse many times in one process, keep the plain behaviour:
    a frozen reference cycle is never reclaimed."""
    global _ONE_SHOT
    _ONE_SHOT = True


_LIBC: Any = None


def release_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``).

    Protobuf messages and ONNX's C++ shape inference live on the C heap; once freed,
    glibc keeps their pages, and the Python objects built next come from separate
    arenas, so the process's peak RSS would count both. ~20 ms on a 2048-layer stack;
    a no-op where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same clean-up runs (the CLI exits 143)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def install_signal_handlers() -> None:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM raises Terminated: both unwind the
    stack, so temporaries and staging folders are removed before the process exits.

    A forked child (a parallel matching worker) gets SIGTERM's default back: its pool
    stops it with SIGTERM and waits for it to die, and an exception unwinding inside
    the worker's queue handling would leave both waiting forever.
    """
    global _AT_FORK_REGISTERED
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _raise_terminated)
        if not _AT_FORK_REGISTERED:
            os.register_at_fork(after_in_child=_default_sigterm_in_child)
            _AT_FORK_REGISTERED = True


_AT_FORK_REGISTERED = False


def _default_sigterm_in_child() -> None:
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def kept_signal_handlers() -> Iterator[None]:
    """Re-install our SIGINT/SIGTERM handlers after a library call that replaces them.

    A native library may install its own C handler and, when done, reset the signal to
    SIG_DFL (OR-Tools does, for SIGINT): Python still reports its handler, but the next
    Ctrl-C would kill the process with no clean-up. ``signal.signal`` with the saved
    handler puts the C-level disposition back.
    """
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def run_interruptibly(work: Callable[[], T], stop: Callable[[], None]) -> T:
    """Run a long native call in a worker thread, so Ctrl-C/SIGTERM reach the main thread
    at once (a native call holds off Python's handlers until it returns); on one, ``stop``
    asks the call to end, the worker is joined and the interrupt propagates."""
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)

    worker = threading.Thread(target=target, name="autofusion-native", daemon=True)
    with kept_signal_handlers():
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.1)
        except BaseException:
            stop()
            worker.join()
            raise
    if failure:
        raise failure[0]
    return result[0]
