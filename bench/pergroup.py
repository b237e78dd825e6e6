"""Per-group verification over every dev model: how many groups pass, fail, cannot run.

    .venv/bin/python bench/pergroup.py [RULE_TO_CORRUPT ...]

Runs ``pipeline.fuse(verify=True, verify_mode="per-group")`` on every model of
../shared/models and ../shared/models/families with the bundled preset ``all`` and prints
the status counts per model and in total. Rule names given as arguments are corrupted on
purpose (the test-only hook): their groups must then come out ``failed``.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ruleengine.errors import AutofusionError  # noqa: E402
from ruleengine.pipeline import fuse  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


def main() -> None:
    models = sorted([*SHARED.glob("*.onnx"), *SHARED.glob("families/*.onnx")])
    total: collections.Counter = collections.Counter()
    for m in models:
        t0 = time.perf_counter()
        try:
            r = fuse(m, verify=True, verify_mode="per-group", corrupt_rules=tuple(sys.argv[1:]))
        except AutofusionError as exc:
            print(f"{m.name:45s} error: {exc.message}")
            continue
        checks = r.plan.verification.groups
        counts = collections.Counter(c.status for c in checks)
        total.update(counts)
        odd = [(c.group, c.rule, c.status, c.error) for c in checks if c.status != "passed"]
        print(f"{m.name:45s} {dict(counts)} {time.perf_counter() - t0:.1f} s {odd[:3]}")
    print(f"TOTAL over {len(models)} models: {dict(total)}")


if __name__ == "__main__":
    main()
