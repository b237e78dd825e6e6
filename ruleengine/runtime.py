"""Process-level helpers the heavy stages share."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


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
            gc.enable()
