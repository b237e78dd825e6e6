"""onnx's full check of the fused model in a forked child, beside the rendering of the
outputs.

The check (``onnxlite.check_model(full_check=True)``: onnx's C++ checker, then its strict
shape inference) holds the GIL for its whole run (0.4-0.8 s at 2048 layers), and nothing
that follows it in ``fuse`` needs its result but the decision to write the files. With
more than one job, a forked child runs it on its copy-on-write view of the fused model
while the parent builds the plan and renders plan.json and the DOT graph; the parent
waits for it before the reports (which give its time) and before any file is written.
If the child finds a fault, the parent checks again in process, so a failure raises
exactly the error of the in-process check (``model_check.check_in_memory``).
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

from ruleengine.procs import FORK_FROM_NODES, Forked, forkable

if TYPE_CHECKING:
    import onnx
_TIMES = struct.Struct("<dd")


def _check(fused: onnx.ModelProto) -> bytes:
    """The child's work: the check, and its own wall and CPU seconds."""
    from ruleengine.graph import onnxlite
    from ruleengine.rewrite import weights
    from ruleengine.rewrite.emit import INLINE_LIMIT_BYTES

    wall, cpu = time.perf_counter(), time.process_time()
    checked = weights.checkable(fused, INLINE_LIMIT_BYTES)
    onnxlite.check_model(checked, full_check=True, at_once=True)
    return _TIMES.pack(time.perf_counter() - wall, time.process_time() - cpu)


class PendingCheck:
    """The check of ``fused`` running in a forked child."""

    def __init__(self, fused: onnx.ModelProto) -> None:
        self._child = Forked(_check, fused)

    def passed(self) -> tuple[float, float] | None:
        """Wait for the child: its (wall, CPU) seconds when the model passed, None when
        the check raised (the caller checks again in process for the error)."""
        try:
            got = self._child.result()
        except Exception:  # any fault: the in-process check reports it
            return None
        wall, cpu = _TIMES.unpack(got)
        return wall, cpu


def start_check(fused: onnx.ModelProto, jobs: int, nodes: int) -> PendingCheck | None:
    """The check begun in a forked child, or None where it is not worth a process
    (one job, a graph of fewer than ``FORK_FROM_NODES`` nodes) or cannot be forked."""
    if nodes < FORK_FROM_NODES or not forkable(jobs):
        return None
    return PendingCheck(fused)
