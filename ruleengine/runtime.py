"""Process-level helpers the heavy stages share."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

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


def one_shot() -> bool:
    """Was this process declared one-shot (``one_shot_process``)?"""
    return _ONE_SHOT


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


# The stop signals received, first first (``signum``, monotonic time): the first decides
# the exit code; a repeat within ``REPEAT_GRACE_S`` does not raise again.
_STOPS: list[tuple[int, float]] = []
REPEAT_GRACE_S = 0.5


def _on_stop_signal(signum: int, frame: object) -> None:
    """Raise the stop exception in the main thread (once: see ``install_signal_handlers``)."""
    now = time.monotonic()
    _STOPS.append((signum, now))
    if len(_STOPS) > 1 and now - _STOPS[0][1] < REPEAT_GRACE_S:
        return  # the first one's clean-up is running: do not cut it short
    if _STOPS[0][0] == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


def stop_signal() -> int | None:
    """The signal (SIGINT or SIGTERM) that asked this process to stop, if one did."""
    return _STOPS[0][0] if _STOPS else None


def install_signal_handlers() -> None:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM raises Terminated: both unwind the
    stack, so temporaries and staging folders are removed before the process exits.

    A second signal within ``REPEAT_GRACE_S`` of the first does not raise again: it
    would cut the first one's clean-up (a staging folder's removal) short; a later one
    does (the first was swallowed somewhere). The first one decides the exit code.

    A forked child (a parallel matching worker) gets SIGTERM's default back: its pool
    stops it with SIGTERM and waits for it to die, and an exception unwinding inside
    the worker's queue handling would leave both waiting forever.
    """
    global _AT_FORK_REGISTERED
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_stop_signal)
        signal.signal(signal.SIGTERM, _on_stop_signal)
        if not _AT_FORK_REGISTERED:
            os.register_at_fork(after_in_child=_default_sigterm_in_child)
            _AT_FORK_REGISTERED = True


_AT_FORK_REGISTERED = False


def _default_sigterm_in_child() -> None:
    _STOPS.clear()  # the parent's stop is not the child's
    if signal.getsignal(signal.SIGTERM) is _on_stop_signal:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def hold_stop_signals() -> None:
    """Block Ctrl-C and SIGTERM in this thread: one that arrives stays pending (and dies
    with the process) instead of raising into a clean-up or an import."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def release_stop_signals() -> None:
    """Unblock them again (a pending one is handled now)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def end_process(code: int, told: Callable[[int], None] | None = None) -> NoReturn:
    """End a one-shot process now with ``code``, its clean-up done by the caller.

    Python's own exit frees every object one by one: seconds for a multi-gigabyte graph
    and match result, during which a further Ctrl-C or SIGTERM goes unanswered (measured
    0.2-1.5 s at 1024 layers, more than 5 s at 18 GB). The process ends with
    ``os._exit`` instead, after the exit functions (``atexit``: pending finalizers such
    as temporary folders) and flushing stdout and stderr; further stop signals are
    blocked meanwhile, so none raises into that; then ``told(code)``, if given (the
    supervisor, ``procs.tell_supervisor``). A library process (no ``one_shot_process``)
    gets ``SystemExit(code)`` instead.
    """
    if not _ONE_SHOT:
        raise SystemExit(code)
    hold_stop_signals()
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed or gone: nothing to flush
                pass
        if told is not None:
            told(code)
        os._exit(code)


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


STOP_WAIT_S = 0.5  # how long an interrupted native call is given to return


def run_interruptibly(work: Callable[[], T], stop: Callable[[], None]) -> T:
    """Run a long native call in a worker thread, so Ctrl-C/SIGTERM reach the main thread
    at once (a native call holds off Python's handlers until it returns); on one, ``stop``
    asks the call to end, the worker is given ``STOP_WAIT_S`` to return and the interrupt
    propagates."""
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
            # bounded: a call slow to honour ``stop`` must not hold the process (the
            # thread is a daemon; a one-shot process ends with ``end_process``)
            worker.join(STOP_WAIT_S)
            raise
    if failure:
        raise failure[0]
    return result[0]
