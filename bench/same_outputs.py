"""Outputs before and after a change: digests of everything ``fuse`` and ``analyze``
decide, to compare two trees' results byte for byte (issue 13: memory and CPU changes
must leave every result as it was; issue 37: the refactor must too).

    .venv/bin/python bench/same_outputs.py --write before.json [--layers 96,512]
    .venv/bin/python bench/same_outputs.py --check before.json [--only NAME] [--jobs 2]
    .venv/bin/python bench/same_outputs.py --tree /work/baseline --write before.json

Cases, every one also run through ``analyze`` (its name ends in ``:analyze``):

- every shared model (``../shared/models``: the top folder, ``families/`` and ``real/``)
  fused with the compact plan. The third-party exports of ``real/`` have dims no export
  fixes, bound as ``real/README.md`` gives them (``REAL_SHAPES``), and fused once more
  unbound (``:unbound``). A case that fails records its exception's type and text
  instead of digests, so a changed message shows.
- LLaMA-style stacks (``synthetic.decoder_stack_weights``) of each ``--layers`` size in
  the three weight forms, fused with the compact plan; the smallest size also with
  ``plan_detail="full"`` (every rejection and its reason) and, the initializers form,
  through ``analyze``.

Per case and output file one SHA-256 (``analyze``: every scored record's verdict, code,
reason and numbers, every near miss's reason, the chosen groups, every lost record and
its reason), with the run's timings left out (report.json ``timings_s``, ``cpu_s`` and
the solver's seconds, report.txt's solver time), the temporary folders' paths replaced
by a placeholder, and the outputs added since (``ADDED``) left out. Exit status 1 when a
digest differs or a case is missing from the file.

``--only SUBSTRING`` (several allowed) runs the cases whose name holds one of them,
``--skip SUBSTRING`` leaves out those whose name holds one.
``--tree PATH`` (or env ``AUTOFUSION_TREE``) imports ``ruleengine`` from another checkout,
e.g. an untouched worktree, to write the digests a refactor is checked against; the
stacks are built by this script's own ``bench/`` helpers either way. ``--jobs`` (default
1) is passed to ``fuse`` and ``analyze``: with 2, the forked paths (shape inference, the
matcher's shared Datalog and signatures, the check, the DOT graph, the catalog) run on
the stacks of 512 layers (over the 4,000-node fork bound), and their outputs must equal
digests written with 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import real_models  # noqa: E402  (beside this file)

SHARED = Path(os.environ.get("AUTOFUSION_SHARED", HERE.parent.parent / "shared" / "models"))

# real/README.md: the dims the third-party exports leave open, bound as it suggests
# (one table for the tests and every bench script: real_models.json).
REAL_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {
    name: real_models.input_shapes(name) or {} for name in real_models.table()
}

JOBS = 1  # --jobs

# Outputs added since the digests of record (issue 41: the HTML report and the Model
# Explorer overlay). They are left out, and so are their names in report.json's file
# list and report.txt's "Files written", so that the rest still compares.
ADDED = ("report.html", "model_explorer.json")

Shapes = dict[str, tuple[int, ...]]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _report_bytes(raw: bytes) -> bytes:
    report = json.loads(raw)
    if isinstance(report.get("files"), list):
        report["files"] = [f for f in report["files"] if f not in ADDED]
    report.pop("timings_s", None)
    report.pop("cpu_s", None)
    if isinstance(report.get("solver"), dict):
        report["solver"].pop("seconds", None)
    return json.dumps(report, sort_keys=True).encode()


def _unplace(data: bytes, *folders: Path) -> bytes:
    """Temporary folders differ from run to run: name them by a placeholder."""
    for i, folder in enumerate(folders):
        for form in {str(folder), str(folder.resolve())}:
            data = data.replace(form.encode(), f"<tmp{i}>".encode())
    return data


def fuse_digests(
    model: Path, detail: str = "compact", shapes: Shapes | None = None, folder: Path | None = None
) -> dict[str, str]:
    from ruleengine.pipeline import fuse, write_outputs

    with tempfile.TemporaryDirectory() as tmp:
        result = fuse(model, outdir=tmp, plan_detail=detail, jobs=JOBS, input_shapes=shapes)
        write_outputs(result, tmp)
        out: dict[str, str] = {}
        for f in sorted(Path(tmp).rglob("*")):
            if not f.is_file() or f.name in ADDED:
                continue
            data = f.read_bytes()
            if f.name == "report.json":
                data = _report_bytes(data)
            elif f.name == "report.txt":  # the solver's time is on its line
                data = re.sub(rb"(solver: .*), [0-9.]+ [mu]?s\n", rb"\1\n", data)
                for name in ADDED:
                    data = data.replace(f"\n  {name}\n".encode(), b"\n")
            data = _unplace(data, Path(tmp), *([folder] if folder else []))
            out[str(f.relative_to(tmp))] = _sha(data)
        return out


def analyze_digests(model: Path, shapes: Shapes | None = None) -> dict[str, str]:
    from ruleengine.pipeline import analyze

    a = analyze(model, jobs=JOBS, input_shapes=shapes)

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


Case = tuple[str, Callable[[], dict[str, str]]]


def _model_cases(name: str, path: Path, shapes: Shapes | None, folder: Path) -> list[Case]:
    return [
        (name, lambda: fuse_digests(path, "compact", shapes, folder)),
        (f"{name}:analyze", lambda: analyze_digests(path, shapes)),
    ]


def shared_cases(folder: Path) -> list[Case]:
    out: list[Case] = []
    for sub in ("", "families", "real"):
        for m in sorted((SHARED / sub).glob("*.onnx")):
            shapes = REAL_SHAPES.get(m.name) if sub == "real" else None
            name = "/".join(p for p in ("shared", sub, m.name) if p)
            out += _model_cases(name, m, shapes or None, folder)
            if shapes:  # as a user runs it first: its open dims unbound
                out.append(
                    (f"{name}:unbound", lambda m=m: fuse_digests(m, "compact", None, folder))
                )
    return out


def stack_cases(layers: list[int], folder: Path, wanted: Callable[[str], bool]) -> list[Case]:
    from scale import write_model  # the same stacks, saved the same way, as bench/scale.py

    out: list[Case] = []
    for n in layers:
        for form in ("initializers", "inputs", "external"):
            base = f"stack{n}-{form}"
            names = [base]
            if n == layers[0]:
                names.append(f"{base}-full")
                if form == "initializers":
                    names.append(f"{base}-analyze")
            if not any(wanted(x) for x in names):
                continue  # the model is not even written
            path, _ = write_model(n, form, folder)
            out.append((base, lambda p=path: fuse_digests(p, "compact", None, folder)))
            if n == layers[0]:
                out.append((f"{base}-full", lambda p=path: fuse_digests(p, "full", None, folder)))
                if form == "initializers":
                    out.append((f"{base}-analyze", lambda p=path: analyze_digests(p)))
    return out


def run_case(run: Callable[[], dict[str, str]], folder: Path) -> dict[str, str]:
    """The case's digests, or its failure: the exception's type and text."""
    try:
        return run()
    except Exception as e:  # a failure is an output to compare too
        text = _unplace(f"{type(e).__module__}.{type(e).__name__}: {e}".encode(), folder)
        return {"error": text.decode()}


def _use_tree(tree: str | None) -> None:
    """Import ``ruleengine`` from ``tree`` (ahead of the installed one) and say which."""
    if tree:
        sys.path.insert(0, str(Path(tree).resolve()))
    import ruleengine

    print(f"ruleengine: {ruleengine.__file__}", flush=True)
    if tree and not Path(ruleengine.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"ruleengine was not imported from {tree}")


def _compare(got: dict[str, dict[str, str]], want: dict[str, dict[str, str]], src: str) -> int:
    bad = 0
    for name, digests in got.items():
        if name not in want:
            bad += 1
            print(f"MISSING {name}: not in {src}")
            continue
        for f in sorted(set(digests) | set(want[name])):
            if digests.get(f) != want[name].get(f):
                bad += 1
                print(f"DIFFERS {name}: {f}")
                if "error" in (f, *digests, *want[name]):
                    print(f"  now:    {digests.get('error', '(no error)')}")
                    print(f"  before: {want[name].get('error', '(no error)')}")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--write", help="write the digests to this JSON file")
    how.add_argument("--check", help="compare with the digests in this JSON file")
    ap.add_argument("--layers", default="96,512")
    ap.add_argument("--families", action="store_true", help="(always on; kept for old calls)")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING")
    ap.add_argument("--skip", action="append", default=[], metavar="SUBSTRING")
    ap.add_argument("--tree", default=os.environ.get("AUTOFUSION_TREE"), metavar="PATH")
    ap.add_argument("--jobs", type=int, default=1, help="processes for fuse and analyze")
    args = ap.parse_args()
    global JOBS
    JOBS = args.jobs
    _use_tree(args.tree)
    layers = [int(x) for x in args.layers.split(",")]

    def wanted(name: str) -> bool:
        if any(s in name for s in args.skip):
            return False
        return not args.only or any(s in name for s in args.only)

    got: dict[str, dict[str, str]] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, run in shared_cases(folder) + stack_cases(layers, folder, wanted):
            if not wanted(name):
                continue
            t0 = time.perf_counter()
            got[name] = run_case(run, folder)
            note = " (error)" if "error" in got[name] else ""
            print(f"{name}{note} {time.perf_counter() - t0:.1f}s", flush=True)
    took = time.perf_counter() - start
    if args.write:
        Path(args.write).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{len(got)} cases written to {args.write} in {took:.0f}s")
        return
    bad = _compare(got, json.loads(Path(args.check).read_text()), args.check)
    print(f"{len(got)} cases, {bad} differing outputs ({took:.0f}s)")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
