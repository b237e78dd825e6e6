"""Issue 15 item 2: Ctrl-C and SIGTERM end every run the same way ("interrupted" /
"terminated", exit 130 / 143, nothing partial, no temporary), also after OR-Tools ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ruleengine.resolve.exact import solve_component
from ruleengine.runtime import install_signal_handlers, kept_signal_handlers
from tests.hostile.helpers import copy_model, leftovers


@pytest.fixture(autouse=True)
def _restore_handlers():
    """The tests install the CLI's handlers in this process; put pytest's back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_forked_worker_dies_of_sigterm_as_its_pool_expects():
    """The CLI's SIGTERM handler raised inside forked matching workers, so Pool.terminate
    (SIGTERM, then wait) hung; forked children get the default back."""
    install_signal_handlers()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: says it runs, then waits for SIGTERM, which must kill it
        try:
            os.write(ready_w, b"1")
            time.sleep(60)
        finally:
            os._exit(0)  # reached only if SIGTERM raised instead of killing
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    os.close(ready_w)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


def test_ctrl_c_still_raises_after_a_cp_sat_solve():
    """OR-Tools set SIGINT back to SIG_DFL after solving: the next Ctrl-C killed the
    process with no clean-up (Python still reported its own handler)."""
    install_signal_handlers()
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    sol = solve_component([3, 2, 2], [frozenset({1, 2}), frozenset({1}), frozenset({2})], [])
    assert sol.status == "OPTIMAL" and sol.objective == 4
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises long before this ends


def test_kept_signal_handlers_reinstalls_a_handler_a_library_replaced():
    seen = []
    handler = lambda signum, frame: seen.append(signum)  # noqa: E731
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        saved = signal.getsignal(signal.SIGTERM)
        with kept_signal_handlers():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what a native library may do
        assert signal.getsignal(signal.SIGTERM) is saved
    finally:
        signal.signal(signal.SIGUSR1, old)


# The real CLI in a subprocess; the signal is sent from inside the run at a chosen point
# (after the exact solver ran, in the middle of writing the set), so no timing is involved.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import ruleengine.rewrite.writer as writer
    import ruleengine.resolve.exact as exact

    sig = getattr(signal, sys.argv[1])
    solved = []
    real_solve, real_write = exact.solve_component, writer._write_file

    def solve(*a, **k):
        solved.append(1)
        return real_solve(*a, **k)

    def write(dest, data):
        real_write(dest, data)
        if dest.name == "plan.json":
            sys.stderr.write(f"cp-sat solves: {len(solved)}\\n")
            os.kill(os.getpid(), sig)

    exact.solve_component, writer._write_file = solve, write
    import ruleengine.resolve.component_solver as resolve
    resolve.ENUMERATE_UP_TO, resolve.INTERVALS_FROM = 1, 10**9  # every conflict to CP-SAT
    sys.argv = ["autofusion", "fuse", *sys.argv[2:]]
    from ruleengine.cli import main
    main()
    """
)


@pytest.mark.parametrize(
    ("sig", "code", "word"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")]
)
def test_a_signal_while_writing_ends_cleanly_with_the_exact_solver(tmp_path, sig, code, word):
    model = copy_model(tmp_path)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, sig, str(model), "-o", str(out),
         "--solver", "exact"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert "cp-sat solves: 0" not in res.stderr  # the exact solver did run before
    assert res.returncode == code, res.stderr
    assert res.stderr.strip().endswith(word), res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()
    assert leftovers(tmp_path) == []
