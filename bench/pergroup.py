"""Per-group verification over every dev model: how many groups pass, fail, cannot run.

    .venv/bin/python bench/pergroup.py [--whole] [RULE_TO_CORRUPT ...]

Runs ``pipeline.fuse(verify=True, verify_mode="per-group")`` on every model of
../shared/models, families/ and real/ (bindings and inputs: real_models.json) with the
bundled preset ``all`` and prints
the status counts per model and in total, and how many groups verified against a catalog
kernel's reference semantics, how many against a generated kernel's structural contract,
how many failed, and how many have nothing to verify against, and the contract status
per kernel. Rule names given as arguments are corrupted on
purpose (the test-only hook): their groups must then come out ``failed``.
``--whole`` verifies each model as a whole instead (contract counts stay per group).
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import real_models

from ruleengine.errors import AutofusionError
from ruleengine.pipeline import fuse

MODE = "whole" if "--whole" in sys.argv[1:] else "per-group"
RULES = tuple(a for a in sys.argv[1:] if a != "--whole")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


def main() -> None:
    models = sorted([*SHARED.glob("*.onnx"), *SHARED.glob("families/*.onnx")])
    models += real_models.models()  # real/README.md's bindings and inputs
    total: collections.Counter = collections.Counter()
    contracts: collections.Counter = collections.Counter()
    by_kernel: collections.Counter = collections.Counter()
    tmp = tempfile.mkdtemp()
    for m in models:
        t0 = time.perf_counter()
        try:
            r = fuse(
                m,
                verify=True,
                verify_mode=MODE,
                corrupt_rules=RULES,
                input_shapes=real_models.input_shapes(m),
                inputs=real_models.write_inputs(m, Path(tmp)),
            )
        except AutofusionError as exc:
            print(f"{m.name:45s} error: {exc.message}")
            continue
        checks = r.plan.verification.groups
        if MODE == "whole":
            checks = ()
            total.update({"models passed" if r.plan.verification.ok else "models FAILED": 1})
        contracts.update(
            (g.contract.status, g.contract.verified) for g in r.plan.groups if g.contract
        )
        by_kernel.update(
            (g.target_op, g.contract.status if g.contract else "no-contract") for g in r.plan.groups
        )
        counts = collections.Counter(c.status for c in checks)
        total.update(counts)
        odd = [(c.group, c.rule, c.status, c.error) for c in checks if c.status != "passed"]
        print(f"{m.name:45s} {dict(counts)} {time.perf_counter() - t0:.1f} s {odd[:3]}")
    print(f"TOTAL over {len(models)} models: {dict(total)}")
    print("contracts (status, verified against the catalog kernel):")
    for (status, how), n in sorted(contracts.items()):
        print(f"  {status:13s} {how:12s} {n}")
    print("groups per kernel (target_op: contract status):")
    for kernel in sorted({k for k, _ in by_kernel}):
        row = {s: n for (k, s), n in sorted(by_kernel.items()) if k == kernel}
        print(f"  {kernel:24s} {row}")
    kinds: collections.Counter = collections.Counter()
    for (status, how), n in contracts.items():
        if status in ("bound", "structural") and how != "not at all":
            kinds["reference" if status == "bound" else "structural"] += n
        elif status in ("bound", "structural", "unbound"):
            kinds["failed"] += n
        else:
            kinds["none"] += n
    print(
        f"groups verified against a catalog reference: {kinds['reference']}, against a "
        f"structural contract: {kinds['structural']}, failed: {kinds['failed']}, "
        f"no contract to verify: {kinds['none']} (of {sum(kinds.values())})"
    )


if __name__ == "__main__":
    main()
