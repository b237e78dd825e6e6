"""The Model Explorer overlay of every shared model, checked two ways.

1. Here (the autofusion venv): analyse each model of ../shared/models (default rules and
   target), build its model_explorer.json and validate it against Model Explorer's node
   data format (ruleengine/report/model_explorer.schema.json).
2. With ``--adapter PYTHON``, a Python that has ``model-explorer-onnx`` installed (e.g. a
   venv made with ``pip install ai-edge-model-explorer model-explorer-onnx``): convert each
   model with Model Explorer's ONNX adapter and check that every overlay key names a node
   of the graph it builds (what the UI matches node data against).

    .venv/bin/python bench/model_explorer_overlays.py --out /tmp/overlays \\
        --adapter /tmp/mevenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / ".." / "shared" / "models"

CHECK = r"""
import json, logging, sys
logging.disable(logging.WARNING)
import model_explorer_onnx.main as adapter
rows = []
for model, overlay in json.load(sys.stdin):
    keys = set(json.load(open(overlay))["results"])
    graph = adapter.ONNXAdapter().convert(model, {})["graphs"][0]
    ids = {n.id for n in graph.nodes}
    rows.append([model, len(keys), sorted(keys - ids)[:5]])
json.dump(rows, sys.stdout)
"""


def make(out: Path, only: str = "") -> list[list]:
    from ruleengine.pipeline import analyze
    from ruleengine.report.files import analysis_plan
    from ruleengine.report.model_explorer import overlay, overlay_bytes, validate_overlay

    rows = []
    for model in sorted(MODELS.resolve().rglob("*.onnx")):
        if only not in model.name:
            continue
        analysis = analyze(model, jobs=1)
        doc = overlay(analysis_plan(analysis, model), analysis.graph)
        path = out / (str(model.relative_to(MODELS.resolve())).replace("/", "__") + ".json")
        path.write_bytes(overlay_bytes(doc))
        rows.append([str(model), str(path), len(doc["results"]), validate_overlay(doc)])
        print(f"{model.name}: {len(doc['results'])} nodes, {len(rows[-1][3])} errors", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the overlays")
    parser.add_argument("--adapter", help="a Python with model-explorer-onnx installed")
    parser.add_argument("--only", default="", help="only models whose file name has this")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = make(args.out, args.only)
    bad = [r for r in rows if r[3]]
    print(f"{len(rows)} models, {len(bad)} overlays invalid")
    if args.adapter:
        pairs = json.dumps([[r[0], r[1]] for r in rows])
        done = subprocess.run(
            [args.adapter, "-c", CHECK], input=pairs, capture_output=True, text=True, check=True
        )
        missing = [r for r in json.loads(done.stdout) if r[2]]
        for model, _, keys in missing:
            print(f"{model}: keys the adapter has no node for: {keys}")
        print(f"adapter: {len(rows) - len(missing)} of {len(rows)} overlays name only its nodes")
        bad += missing
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
