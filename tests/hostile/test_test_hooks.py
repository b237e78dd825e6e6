"""Issue 15 item 5: a test-only hook is unreachable from the installed CLI."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.hostile.helpers import ROOT, copy_model


def test_the_corruption_env_var_does_nothing_in_the_cli(tmp_path):
    """AUTOFUSION_TEST_CORRUPT_RULES made the installed CLI write a wrong model, exit 0."""
    model = copy_model(tmp_path)
    rules = ROOT / "tests" / "golden" / "fuse" / "rules"
    res = subprocess.run(
        [sys.executable, "-m", "ruleengine", "fuse", str(model), "--rules", str(rules), "-o",
         str(tmp_path / "out"), "--verify"],
        capture_output=True,
        text=True,
        env={"AUTOFUSION_TEST_CORRUPT_RULES": "golden_matmul_bias,golden_gelu_erf",
             "PATH": "/usr/bin:/bin"},
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "PASSED" in res.stdout


def test_no_environment_variable_reaches_a_test_hook():
    sources = "\n".join(p.read_text() for p in (ROOT / "ruleengine").rglob("*.py"))
    assert not re.search(r"AUTOFUSION_TEST", sources)
    assert "corrupt" not in (ROOT / "ruleengine" / "cli" / "fuse.py").read_text()
