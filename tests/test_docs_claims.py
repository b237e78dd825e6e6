"""The docs say what the tool does: every claim a test can check, checked against a run.

- the fields docs/fuse.md lists for plan.json and report.json are the fields written;
- the fused node's inputs are what docs/fuse.md says (kernel ports or the group's inputs);
- report.txt lists a sample of the candidates not fused, as docs/fuse.md says;
- every `--flag` a doc shows on an `autofusion COMMAND` line exists on that command;
- every AF code a doc names is registered; every verdict docs/fuse.md names exists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
import typer.main
from onnx import TensorProto, helper

from ruleengine.cli import app
from ruleengine.cost.model import Verdict
from ruleengine.diagnostics.codes import CODES
from ruleengine.pipeline import fuse, write_outputs

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FUSE_MD = (ROOT / "docs" / "fuse.md").read_text(encoding="utf-8")
EXAMPLE = ROOT / "examples" / "mlp_block.onnx"
GOLDEN_RULES = ROOT / "tests" / "golden" / "fuse" / "rules"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mlp_block fused with the golden rules and verified, its files written."""
    out = tmp_path_factory.mktemp("docs") / "out"
    write_outputs(fuse(EXAMPLE, [GOLDEN_RULES], verify=True), out)
    return out


def _plan_example() -> dict:
    """The plan.json example of docs/fuse.md (its "### plan.json" section)."""
    section = FUSE_MD.split("### plan.json", 1)[1]
    block = section.split("```json", 1)[1].split("```", 1)[0]
    return json.loads(block)


def test_plan_json_fields_are_the_documented_ones(written: Path):
    doc, plan = _plan_example(), json.loads((written / "plan.json").read_text())
    assert set(doc) == set(plan)
    assert set(doc["summary"]) == set(plan["summary"])
    (shown,) = doc["groups"]
    assert plan["groups"]
    for group in plan["groups"]:
        assert set(shown) == set(group), group["id"]
        assert set(shown["function"]) == set(group["function"])
        assert set(shown["kernel"]) == set(group["kernel"])
        assert set(shown["contract"]) == set(group["contract"])
    assert set(doc["rejected"][0]) == set(plan["rejected"][0])
    assert set(doc["rules"][0]) == set(plan["rules"][0])


def test_report_json_fields_are_the_documented_ones(written: Path):
    said = re.search(r"with these top-level fields:(.*?)\.\n", FUSE_MD, re.S)
    assert said, "docs/fuse.md lists report.json's fields"
    fields = set(re.findall(r"`([a-z_]+)`", re.sub(r"\(.*?\)", "", said.group(1), flags=re.S)))
    report = json.loads((written / "report.json").read_text())
    assert fields == set(report)
    assert set(report["rejected"]) == {"total", "by_verdict"}  # "counts only"


def test_the_fused_node_takes_what_the_docs_say(written: Path):
    plan = json.loads((written / "plan.json").read_text())
    model = onnx.load(str(written / "mlp_block.fused.onnx"), load_external_data=False)
    nodes = {n.name: n for n in model.graph.node}
    bound = 0
    for g in plan["groups"]:
        node = nodes[g["node"]]
        contract = g["contract"]
        if contract["status"] == "bound":
            bound += 1
            ports = contract["ports"]
            outputs = set(node.output)
            assert [t for t in node.input if t] == [t for t in ports.values() if t not in outputs]
            assert outputs <= set(ports.values())
        else:
            assert list(node.input) == g["inputs"]
        assert set(node.input) - {""} <= set(g["inputs"])
    assert bound, "the example has kernel-bound groups"


def _escapes_model(path: Path, pairs: int) -> None:
    """``pairs`` Relu -> Sigmoid chains whose Relu output is also a graph output: each
    a near miss of a Relu+Sigmoid rule (intermediate-escapes)."""
    nodes, outputs = [], []
    for i in range(pairs):
        nodes += [
            helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"relu_{i}"),
            helper.make_node("Sigmoid", [f"r{i}"], [f"s{i}"], name=f"sig_{i}"),
        ]
        outputs += [f"r{i}", f"s{i}"]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 64])  # noqa: E731
    graph = helper.make_graph(
        nodes, "escapes", [vi(f"x{i}") for i in range(pairs)], [vi(o) for o in outputs]
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_report_txt_lists_a_sample_of_the_candidates_not_fused(tmp_path: Path):
    (tmp_path / "relu_sig.yaml").write_text(
        "name: relu_sig\nmatch:\n  ops:\n    - type: Relu\n    - type: Sigmoid\n"
        "      input_sources: {input0: {from_op: 0}}\nrewrite:\n  target_op: ReluSig\n"
    )
    _escapes_model(tmp_path / "m.onnx", 10)
    compact = fuse(tmp_path / "m.onnx", [tmp_path / "relu_sig.yaml"]).files["report.txt"]
    text = compact.decode()
    rows = [ln for ln in text.splitlines() if "relu_sig " in ln and "intermediate" in ln]
    assert len(rows) == 3  # "the first 3 per rule and verdict"
    assert "... 7 more (listed in this report with --plan-detail full" in text
    full = fuse(tmp_path / "m.onnx", [tmp_path / "relu_sig.yaml"], plan_detail="full")
    rows = [ln for ln in full.files["report.txt"].decode().splitlines() if "relu_sig " in ln]
    assert len([r for r in rows if "intermediate" in r]) == 10  # "with full every one"


def _options() -> dict[str, set[str]]:
    """Every command's options (its subcommands' as "group sub")."""
    root = typer.main.get_command(app)
    out: dict[str, set[str]] = {}

    def walk(prefix: str, cmd) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            key = f"{prefix} {name}".strip()
            out[key] = {o for p in sub.params for o in (*p.opts, *p.secondary_opts)}
            walk(key, sub)

    walk("", root)
    return out


def _command_lines(text: str) -> list[str]:
    """The `autofusion ...` lines of a doc: in code blocks and in backticks."""
    lines = re.findall(r"^\s*(autofusion [^\n#]*)", text, re.M)
    lines += re.findall(r"`(autofusion [^`]*)`", text)
    return lines


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_flags_named_in_docs_exist(doc: Path):
    options = _options()
    wrong = []
    for line in _command_lines(doc.read_text(encoding="utf-8")):
        words = line.split()
        command = next(
            (c for c in sorted(options, key=len, reverse=True) if words[1:3] == c.split()[:2]
             or words[1:2] == c.split()),
            None,
        )  # fmt: skip
        if command is None:
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
            if flag not in options[command] and flag != "--help":
                wrong.append(f"{command}: {flag} ({line.strip()})")
    assert not wrong, f"{doc.name} names flags the command does not have: {wrong}"


def test_fuse_options_table_names_real_flags():
    table = FUSE_MD.split("| option | meaning |", 1)[1].split("\n\n", 1)[0]
    flags = {
        f
        for row in table.splitlines()
        for f in re.findall(r"`(--[a-z-]+)", row.split("|")[1] if row.count("|") > 2 else "")
    }
    assert "--safe" in flags and "--kernels" in flags
    assert flags <= _options()["fuse"] | {"--copy-weights"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_codes_named_in_docs_are_registered(doc: Path):
    known = set(CODES)
    named = set(re.findall(r"\bAF\d{3}\b", doc.read_text(encoding="utf-8")))
    assert named <= known, f"{doc.name} names unknown codes {sorted(named - known)}"


def test_verdicts_named_for_plan_json_exist():
    said = FUSE_MD.split("- `rejected` lists", 1)[1].split("\n- ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", said)) - {"full", "rejected_by_verdict"}
    # near_miss: a structural match rejected in matching (plan.json's verdict for it)
    assert named <= {v.value for v in Verdict} | {"near_miss"}
    assert {"lost_conflict", "dropped_by_verification", "near_miss"} <= named


@pytest.mark.parametrize("preset", ["generic", "cnn", "transformer"])
def test_rule_library_lists_every_bundled_rule(preset: str):
    """docs/rule-library.md's table of each preset folder: its count in the heading, and a
    row (or a row naming it beside a sibling, `matmul_bias_relu` / `_gelu`) per rule."""
    text = (ROOT / "docs" / "rule-library.md").read_text(encoding="utf-8")
    names = sorted(p.stem for p in (ROOT / "rules" / preset).glob("*.yaml"))
    heading = re.search(rf"^### {preset} \((\d+) rules", text, re.MULTILINE)
    assert heading, f"no '### {preset} (N rules' heading"
    assert int(heading.group(1)) == len(names), f"{preset}: heading says {heading.group(1)}"
    section = text[heading.end() :].split("\n### ", 1)[0]
    listed: set[str] = set()
    for line in section.splitlines():
        first_cell = line.split("|")[1] if line.startswith("|") else ""
        tokens = re.findall(r"`([a-z0-9_]+)`", first_cell)
        for token in tokens:  # `matmul_bias_relu` / `_gelu`: a sibling of the first
            listed.add(tokens[0].rsplit("_", 1)[0] + token if token.startswith("_") else token)
    missing = [n for n in names if n not in listed]
    assert not missing, f"{preset} rules without a row in docs/rule-library.md: {missing}"
