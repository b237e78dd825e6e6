"""Issue 38: Ctrl-C and SIGTERM stop ``autofusion fuse`` within a second at any stage.

The real command in a subprocess, its stderr on a pseudo-terminal so that it prints a
progress line as each stage begins; the signal is sent as soon as the stage's line
appears. Each run must end within ``LIMIT_S`` of the signal (a monotonic clock; one
retry, for a loaded machine), with the documented exit code (130 Ctrl-C, 143 SIGTERM),
``interrupted``/``terminated`` as its last line, no traceback, no output folder, no
temporary, and no process it forked still running (the supervised command itself, the
forked rule and catalog loaders).

The stack is bench/synthetic.py's (8 layers, 344 nodes), matched with four rules so
that every stage is reached in a few seconds; the stages' children forked from 4,000
nodes (matching, shape inference, the check) go the same way (procs.kill_children,
die_with_parent).
"""

from __future__ import annotations

import importlib.util
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 1.0
LAYERS = 8
RULES = ("qkv_projection", "rmsnorm_ffn_swiglu", "elementwise_chain", "cube_epilogue")
WORD = {signal.SIGINT: ("interrupted", 130), signal.SIGTERM: ("terminated", 143)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("synthetic", ROOT / "bench" / "synthetic.py")
    assert spec is not None and spec.loader is not None
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    import onnx

    path = tmp_path_factory.mktemp("stack") / "stack.onnx"
    onnx.save(synthetic.decoder_stack(LAYERS), path)
    return path


@dataclass
class Stopped:
    latency: float  # seconds from the signal to the process's exit
    code: int
    stderr: str
    forked: set[int]  # the descendants alive when the signal was sent


def _descendants(root: int) -> set[int]:
    """The processes below ``root`` now (from /proc's parent links)."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parent_of[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _stop_at(argv: list[str], line: str, sig: signal.Signals, cwd: Path) -> Stopped:
    """Run ``argv``; send ``sig`` when a stderr line holding ``line`` appears."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        start_new_session=True,  # its own process group, which a terminal's Ctrl-C reaches
    )
    os.close(follower)
    text, sent, forked = b"", 0.0, set()
    try:
        while not sent:
            ready, _, _ = select.select([leader], [], [], 120)
            chunk = os.read(leader, 1 << 16) if ready else b""
            if not chunk:
                raise AssertionError(f"{line!r} never appeared:\n{text.decode()}")
            text += chunk
            if line.encode() in text:
                forked = _descendants(proc.pid)
                if sig == signal.SIGINT:  # Ctrl-C: the whole foreground group gets it
                    os.killpg(proc.pid, sig)
                else:  # SIGTERM: the process started (a service manager's stop)
                    os.kill(proc.pid, sig)
                sent = time.monotonic()
        proc.wait(timeout=30)
        latency = time.monotonic() - sent
        while select.select([leader], [], [], 2)[0]:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # every writer closed
                break
            if not chunk:
                break
            text += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return Stopped(latency, proc.returncode, text.decode(errors="replace"), forked)


def _check_stopped(run: Stopped, sig: signal.Signals, out: Path) -> None:
    word, code = WORD[sig]
    assert run.code == code, run.stderr
    assert run.stderr.strip().splitlines()[-1].strip() == word, run.stderr
    assert "Traceback" not in run.stderr
    assert not out.exists()
    left = [p.name for p in out.parent.iterdir() if p.name.startswith(".") and "out" in p.name]
    assert left == [], left
    deadline = time.monotonic() + 2  # a killed child is gone once the kernel has torn it down
    while any(_running(pid) for pid in run.forked) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [pid for pid in run.forked if _running(pid)] == []


def _stopped_in_time(argv: list[str], line: str, sig: signal.Signals, cwd: Path) -> Stopped:
    """``_stop_at``, run again once if the first run took longer than ``LIMIT_S`` (a
    loaded machine): the limit must hold on one of two runs."""
    run = _stop_at(argv, line, sig, cwd)
    if run.latency >= LIMIT_S:
        _check_stopped(run, sig, cwd / "out")
        run = _stop_at(argv, line, sig, cwd)
    assert run.latency < LIMIT_S, (run.latency, run.stderr)
    return run


def _fuse(stack: Path, out: Path) -> list[str]:
    enable = [arg for rule in RULES for arg in ("--enable", rule)]
    return [sys.executable, "-m", "ruleengine", "fuse", str(stack), "-o", str(out), *enable]


def _stop_in_stage(stack: Path, tmp_path: Path, line: str, sig: signal.Signals) -> None:
    out = tmp_path / "out"
    argv = [*_fuse(stack, out), "--verify"]
    run = _stopped_in_time(argv, f"autofusion: {line}", sig, tmp_path)
    _check_stopped(run, sig, out)


MAIN_STAGES = [
    ("matching 4 rules", signal.SIGINT),  # forked children (rules, catalog, structure)
    ("resolving conflicts", signal.SIGTERM),  # CP-SAT in a thread
    ("verifying in onnxruntime", signal.SIGINT),  # an onnxruntime session being built
]
OTHER_STAGES = [
    ("loading model", signal.SIGTERM),
    ("costing", signal.SIGTERM),
    ("checking the fused model", signal.SIGTERM),  # then the plan and the writing
]


def _ids(stages: list[tuple[str, signal.Signals]]) -> list[str]:
    return [f"{line.split()[0]}-{sig.name}" for line, sig in stages]


@pytest.mark.parametrize(("line", "sig"), MAIN_STAGES, ids=_ids(MAIN_STAGES))
def test_a_stop_in_a_main_stage_ends_the_run_within_a_second(stack, tmp_path, line, sig):
    _stop_in_stage(stack, tmp_path, line, sig)


@pytest.mark.parametrize(("line", "sig"), OTHER_STAGES, ids=_ids(OTHER_STAGES))
def test_a_stop_in_any_other_stage_ends_the_run_within_a_second(stack, tmp_path, line, sig):
    """(slow: tests/conftest.py SLOW) the remaining stages, one run each."""
    _stop_in_stage(stack, tmp_path, line, sig)


# The command stuck in a native call that holds the GIL (``sum`` over a huge range checks
# no signal): Python never runs its handler, so the supervisor (procs.supervise) kills
# the command after its grace and exits as the signal asks.
STUCK = textwrap.dedent(
    """
    import sys
    import ruleengine.pipeline as pipeline

    def fuse(*args, **kwargs):
        sys.stderr.write("autofusion: stuck in native code...\\n")
        sys.stderr.flush()
        return sum(range(10**15))

    pipeline.fuse = fuse
    sys.argv = ["autofusion", "fuse", *sys.argv[1:]]
    from ruleengine.cli import main
    main()
    """
)


def test_a_stop_during_a_native_call_that_holds_the_gil_ends_the_run(stack, tmp_path):
    sig = signal.SIGTERM
    out = tmp_path / "out"
    argv = [sys.executable, "-c", STUCK, str(stack), "-o", str(out)]
    run = _stopped_in_time(argv, "stuck in native code", sig, tmp_path)
    _check_stopped(run, sig, out)
    assert run.forked  # the supervised command was there, and was killed


def test_a_stop_while_the_command_line_loads_ends_cleanly(stack, tmp_path):
    """Ctrl-C while ``python -m ruleengine`` imports its modules: held until the handlers
    are in place, then answered (no KeyboardInterrupt traceback from an import)."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _fuse(stack, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path
    )
    time.sleep(0.4)  # python's start-up done, the command line's imports under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err.decode() and err.decode().strip().endswith("interrupted")
    assert not out.exists()
