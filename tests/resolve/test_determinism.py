"""The exact solver's choice among equal optima does not depend on string hashing.

resnet18-narrow.ts-keepbn has two equal-valued ways to fuse a residual block (Conv+BN on
the shortcut or on the main path takes the Add+ReLU); before CP-SAT saw components in a
canonical form, which one came out depended on PYTHONHASHSEED.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "models"
MODEL = SHARED / "resnet18-narrow.ts-keepbn.onnx"
SNIPPET = """
import sys
from ruleengine.pipeline import analyze
a = analyze(sys.argv[1], preset="all")
print([(s.candidate.rule, s.candidate.nodes) for s in a.resolution.chosen])
"""


def test_choice_does_not_depend_on_hash_seed() -> None:
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", SNIPPET, str(MODEL)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outs.add(done.stdout)
    assert len(outs) == 1
