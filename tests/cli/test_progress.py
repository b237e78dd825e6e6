"""Progress lines on stderr for the long commands, where stderr is a terminal: a real
process with its stderr on a pseudo-terminal, and the same command piped (none)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.suggest.graphs import NOTHING_RULE, save
from tests.suggest.test_branch_tests import CONV_RELU

AUTOFUSION = [sys.executable, "-m", "ruleengine"]


def _stderr_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run ``autofusion ARGS`` with its stderr on a pseudo-terminal: (exit code, what
    it wrote there)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*AUTOFUSION, *args], stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # the follower closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(), b"".join(chunks).decode(errors="replace")


def _suggest_args(tmp_path: Path, out: str) -> list[str]:
    rule = tmp_path / "nothing.yaml"
    rule.write_text(NOTHING_RULE)
    model = save(CONV_RELU, tmp_path / "m.onnx")
    return ["suggest", str(model), "-r", str(rule), "-o", str(tmp_path / out)]


def test_suggest_shows_its_progress_on_a_terminal(tmp_path):
    code, err = _stderr_on_a_terminal(_suggest_args(tmp_path, "out"))
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("autofusion: ")]
    assert any("generating and running the rule tests" in ln for ln in lines), err
    assert all(ln.endswith("...") for ln in lines)


def test_suggest_piped_prints_no_progress(tmp_path):
    res = subprocess.run(
        [*AUTOFUSION, *_suggest_args(tmp_path, "out")], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert "autofusion: " not in res.stderr
