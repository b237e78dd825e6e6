"""How much memory a whole-model onnxruntime run would take, and how much there is.

The estimate is deliberately simple and errs high: every weight once (onnxruntime holds
the initializers; the memory maps it reads them from are page cache, but count them)
plus every activation the graph declares with a known size (onnxruntime's arena reuses
buffers, so the real peak is lower) plus the inputs. A model whose estimate exceeds the
share of available memory verification may take is verified group by group.
"""

from __future__ import annotations

import os
from pathlib import Path

from ruleengine.graph.model import Graph

# Verification may take this share of the memory available when it starts (other
# processes share the machine; the reference outputs are held while the fused model runs).
SHARE = 0.5


def estimate_whole_bytes(graph: Graph, weight_bytes: int) -> int:
    """Estimated peak memory of running the model once in onnxruntime (and comparing)."""
    activations = sum(
        t.nbytes or 0 for t in graph.tensors.values() if not t.is_initializer and not t.is_constant
    )
    return int(weight_bytes + activations)


def available_bytes() -> int | None:
    """Memory available now: /proc/meminfo MemAvailable, capped by a cgroup v2 limit."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            avail = min(avail, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return avail


def fmt(n: int | None) -> str:
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{n} B"
