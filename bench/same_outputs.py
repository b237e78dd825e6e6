"""Outputs before and after a speed change: digests of everything ``fuse`` and ``analyze``
decide, to compare two trees' results byte for byte (issue 13: memory and CPU changes
must leave every result as it was).

    .venv/bin/python bench/same_outputs.py --write before.json [--layers 96,512] [--families]
    .venv/bin/python bench/same_outputs.py --check before.json [same options] [--jobs 2]

Cases: the shared models (``/work/shared/models``, ``--families`` adds the families
folder) fused with the compact plan; LLaMA-style stacks (``synthetic.decoder_stack_weights``)
of each ``--layers`` size in the three weight forms, fused with the compact plan, the
smallest size also with ``plan_detail="full"`` (every rejection and its reason) and
through ``analyze`` (every scored record's verdict, code, reason and numbers, every
near miss's reason, the chosen groups, every lost record and its reason). Per case and
output file one SHA-256, with the run's timings left out (report.json ``timings_s``,
``cpu_s`` and the solver's seconds, report.txt's solver time). Exit status 1 when a digest differs.
``--jobs`` (default 1) is passed to ``fuse`` and ``analyze``: with 2, the forked paths
(shape inference, the matcher's shared Datalog and signatures, the check, the DOT graph,
the catalog) run on the stacks of 512 layers (over the 4,000-node fork bound), and
their outputs must equal digests written with 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

SHARED = Path(os.environ.get("AUTOFUSION_SHARED", "/work/shared/models"))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _report_bytes(raw: bytes) -> bytes:
    report = json.loads(raw)
    report.pop("timings_s", None)
    report.pop("cpu_s", None)
    if isinstance(report.get("solver"), dict):
        report["solver"].pop("seconds", None)
    return json.dumps(report, sort_keys=True).encode()


JOBS = 1  # --jobs


def fuse_digests(model: Path, detail: str = "compact") -> dict[str, str]:
    from ruleengine.pipeline import fuse, write_outputs

    with tempfile.TemporaryDirectory() as tmp:
        result = fuse(model, outdir=tmp, plan_detail=detail, jobs=JOBS)
        write_outputs(result, tmp)
        out: dict[str, str] = {}
        for f in sorted(Path(tmp).rglob("*")):
            if not f.is_file():
                continue
            data = f.read_bytes()
            if f.name == "report.json":
                data = _report_bytes(data)
            elif f.name == "report.txt":  # the solver's time is on its line
                data = re.sub(rb"(solver: .*), [0-9.]+ m?s\n", rb"\1\n", data)
            out[str(f.relative_to(tmp))] = _sha(data)
        return out


def analyze_digests(model: Path) -> dict[str, str]:
    from ruleengine.pipeline import analyze

    a = analyze(model, jobs=JOBS)

    def cost(c: object) -> object:
        return None if c is None else repr(c)

    scored = [
        (
            s.candidate.rule,
            s.candidate.nodes,
            s.candidate.alternative,
            s.candidate.inputs,
            s.candidate.outputs,
            str(s.verdict),
            s.code,
            s.reason,
            cost(s.cost),
            repr(sorted((k, repr(v)) for k, v in s.details.items())),
        )
        for s in a.scored
    ]
    near = [(n.candidate.key, n.code, n.reason) for n in a.match.near_misses]
    cands = [(c.key, c.bindings, c.inputs, c.outputs) for c in a.match.candidates]
    chosen = [(s.candidate.key, cost(s.cost)) for s in a.resolution.chosen]
    lost = [
        (s.candidate.key, str(s.verdict), s.code, s.reason, why) for s, why in a.resolution.lost
    ]
    return {
        "candidates": _sha(repr(cands).encode()),
        "near_misses": _sha(repr(near).encode()),
        "scored": _sha(repr(scored).encode()),
        "chosen": _sha(repr(chosen).encode()),
        "lost": _sha(repr(lost).encode()),
        "objective": str(a.resolution.objective),
    }


def cases(layers: list[int], families: bool, folder: Path) -> list[tuple[str, Path, str]]:
    from scale import write_model  # the same stacks, saved the same way, as bench/scale.py

    out: list[tuple[str, Path, str]] = []
    shared = sorted(SHARED.glob("*.onnx"))
    if families:
        shared += sorted((SHARED / "families").glob("*.onnx"))
    out += [(f"shared/{m.name}", m, "compact") for m in shared]
    for n in layers:
        for form in ("initializers", "inputs", "external"):
            path, _ = write_model(n, form, folder)
            out.append((f"stack{n}-{form}", path, "compact"))
            if n == layers[0]:
                out.append((f"stack{n}-{form}-full", path, "full"))
                if form == "initializers":
                    out.append((f"stack{n}-{form}-analyze", path, "analyze"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--write", help="write the digests to this JSON file")
    how.add_argument("--check", help="compare with the digests in this JSON file")
    ap.add_argument("--layers", default="96,512")
    ap.add_argument("--families", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="processes for fuse and analyze")
    args = ap.parse_args()
    global JOBS
    JOBS = args.jobs
    layers = [int(x) for x in args.layers.split(",")]
    got: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, kind in cases(layers, args.families, Path(tmp)):
            got[name] = analyze_digests(path) if kind == "analyze" else fuse_digests(path, kind)
            print(name, flush=True)
    if args.write:
        Path(args.write).write_text(json.dumps(got, indent=1, sort_keys=True))
        print(f"{len(got)} cases written to {args.write}")
        return
    want = json.loads(Path(args.check).read_text())
    bad = 0
    for name, digests in got.items():
        if name not in want:
            print(f"{name}: not in {args.check}")
            continue
        for f in sorted(set(digests) | set(want[name])):
            if digests.get(f) != want[name].get(f):
                bad += 1
                print(f"DIFFERS {name}: {f}")
    print(f"{len(got)} cases, {bad} differing outputs")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
