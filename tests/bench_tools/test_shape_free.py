"""bench/shape_free.py's guard rails: a blow-up or a hang is a failure row, not a dead
machine (no model is fused here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("shape_free", BENCH / "shape_free.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["shape_free"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sf = _load()
PY = sys.executable


def test_a_process_past_the_memory_limit_is_a_memory_row(tmp_path):
    grab = "b = bytearray(3 << 30); print(len(b))"
    run = sf.measured([PY, "-c", grab], tmp_path, mem_gb=1.0, timeout=60)
    assert run.status == "memory"
    assert not run.ok


def test_a_process_past_its_time_is_stopped(tmp_path):
    run = sf.measured([PY, "-c", "import time; time.sleep(60)"], tmp_path, 1.0, timeout=1)
    assert run.status == "timeout"
    assert run.term_s is not None and run.term_s < sf.KILL_GRACE_S
    assert run.wall < 10


def test_an_ordinary_exit_keeps_its_output_and_code(tmp_path):
    ok = sf.measured([PY, "-c", "print('hello')"], tmp_path, 1.0, 60)
    assert (ok.status, ok.stdout.strip()) == ("ok", "hello")
    bad = sf.measured([PY, "-c", "import sys; sys.exit(3)"], tmp_path, 1.0, 60)
    assert bad.status == "exit 3"
    internal = sf.measured(
        [PY, "-c", "import sys; sys.stderr.write('internal error: X\\n'); sys.exit(2)"],
        tmp_path,
        1.0,
        60,
    )
    assert internal.status == "internal"
    assert internal.stderr_tail == "internal error: X"
