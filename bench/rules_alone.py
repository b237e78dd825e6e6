"""Every bundled rule alone over every dev model, fused and verified (issue 36).

For each (rule, model) pair: ``fuse MODEL --rules rules/<dir>/<rule>.yaml --verify``
in-process. A pair *fuses* when the rule alone chooses at least one group; it *fails*
when verification fails (AF406: a group its kernel does not accept, or numbers that
differ) or fuse raises. The goal: 0 failures, with at least 958 pairs fusing.

    python bench/rules_alone.py [--only SUBSTR ...] [--rules SUBSTR ...] [--analyze]
    python bench/rules_alone.py --default [--only SUBSTR ...]

``--only`` keeps models whose file name contains one of the strings, ``--rules`` rules
whose name does; ``--analyze`` decides only (no rewrite, no verification): it prints the
pairs that fuse and the candidates the contract verdict turned away. ``--default`` runs
each model once with the default rules instead (the preset ``fuse`` uses with no
``--rules``): no AF406 may fire there either. CPU-heavy: run it with ``nice`` on subsets.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import real_models  # bench/: the real models' table (bindings, explicit inputs)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "models"


def models() -> list[Path]:
    """The dev corpus: ../shared/models, families/ and real/."""
    out: list[Path] = []
    for sub in ("", "families", "real"):
        folder = SHARED / sub
        if folder.is_dir():
            out += sorted(folder.resolve().glob("*.onnx"))
    return out


def rules() -> list[Path]:
    """Every bundled rule file, rules/<dir>/<rule>.yaml."""
    return sorted((ROOT / "rules").glob("*/*.yaml"))


def one(model: Path, rule: Path | None, tmp: Path, analyze_only: bool) -> tuple[int, str | None]:
    """(groups chosen, failure or None) of ``rule`` alone on ``model`` (None: the default
    rules)."""
    from ruleengine.pipeline import analyze, fuse

    shapes = real_models.input_shapes(model)  # the bindings of ../shared/models/real/README.md
    if analyze_only:
        a = analyze(model, [rule] if rule else [], input_shapes=shapes, jobs=1)
        return len(a.resolution.chosen), None
    out = tmp / f"{model.stem}.{rule.stem if rule else 'default'}"
    try:
        r = fuse(
            model,
            [rule] if rule else [],
            verify=True,
            input_shapes=shapes,
            inputs=real_models.write_inputs(model, tmp),
            outdir=out,
            jobs=1,
        )
    except Exception as exc:  # a refusal or a crash is a failure of the pair
        return 0, f"{type(exc).__name__}: {exc}"[:300]
    v = r.plan.verification
    n = len(r.groups)
    if v is None or v.ok:
        return n, None
    return n, (v.error or "outputs differ")[:300]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=[], help="model name substrings")
    p.add_argument("--rules", nargs="*", default=[], help="rule name substrings")
    p.add_argument("--analyze", action="store_true", help="decide only, no verification")
    p.add_argument("--default", action="store_true", help="the default rules, not each alone")
    args = p.parse_args(argv)
    ms = [m for m in models() if not args.only or any(s in m.name for s in args.only)]
    rs: list[Path | None] = [
        r for r in rules() if not args.rules or any(s in r.stem for s in args.rules)
    ]
    if args.default:
        rs = [None]
    fusing, failures, t0 = 0, [], time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        for model in ms:
            for rule in rs:
                n, failure = one(model, rule, Path(d), args.analyze)
                name = f"{rule.parent.name}/{rule.stem}" if rule else "default rules"
                if n and failure is None:
                    fusing += 1
                    print(f"fuses  {name} {model.name}: {n} groups")
                if failure is not None:
                    failures.append((rule, model, failure))
                    print(f"FAILS  {name} {model.name}: {failure}")
                sys.stdout.flush()
    print(
        f"{len(ms)} models x {len(rs)} rules: {fusing} pairs fuse and verify, "
        f"{len(failures)} fail ({time.perf_counter() - t0:.0f} s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
