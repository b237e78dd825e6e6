"""The matcher's fast paths (chain predicates, tabled and staged composite forms,
inequalities between same-typed slots) give exactly the answers of the plain program
that ``explain-rule --datalog`` prints."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import ruleengine.match.datalog as datalog
import ruleengine.match.matcher as matcher
import ruleengine.match.plain as plain_mod
from ruleengine.graph import graph_from_model, load_graph
from ruleengine.match import backend, find_candidates
from ruleengine.match.compile import compile_rule_set, program_text
from ruleengine.rules import load_rule_set

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared" / "models"


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make find_candidates run the plain program: no chains, no tabled forms, no
    inequalities, one stage."""

    def plain_compile(rules, aliases, **_):
        return compile_rule_set(rules, aliases)

    def plain_text(prog, counts=None, **kw):
        kw.pop("chains", None)
        kw.pop("distinct", None)
        return program_text(prog, counts, **kw)

    monkeypatch.setattr(plain_mod, "compile_rule_set", plain_compile)
    monkeypatch.setattr(datalog, "program_text", plain_text)
    monkeypatch.setattr(datalog, "_ask", backend.run)


def _decoder(layers: int):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from synthetic import decoder_stack
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return graph_from_model(decoder_stack(layers))


def _same(graph, monkeypatch: pytest.MonkeyPatch) -> None:
    rule_set = load_rule_set([], preset="all")
    fast = find_candidates(graph, rule_set)
    with monkeypatch.context() as m:
        _plain(m)
        plain = find_candidates(graph, rule_set)
    assert fast.candidates == plain.candidates
    assert fast.near_misses == plain.near_misses
    assert fast.candidates  # the comparison is not vacuous


def test_fast_paths_on_a_decoder_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    # elementwise_chain (repeat 2..8: chain predicates), six RMSNorm rules (staged forms)
    _same(_decoder(2), monkeypatch)


@pytest.mark.parametrize("name", ["bert-tiny.ts14.onnx", "llama-tiny.ts.onnx"])
def test_fast_paths_on_shared_models(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # decomposed LayerNorm / GELU (TorchScript opset 14) and RMSNorm forms
    _same(load_graph(SHARED / name), monkeypatch)


def test_chain_and_form_predicates_are_in_the_fast_program() -> None:
    graph = _decoder(1)
    rule_set = load_rule_set([], preset="all")
    prog = compile_rule_set(rule_set.rules, matcher.default_aliases(), tabled_forms=True)
    facts = datalog.build_facts(graph, prog)
    counts: dict[str, int] = {}
    for pred, _ in facts:
        counts[pred] = counts.get(pred, 0) + 1
    text = program_text(prog, counts, alive=set(counts), chains=True)
    calls = re.compile(r"\b(r8_|f_)\w*\(")
    assert {m.group(1) for m in calls.finditer(text)} == {"r8_", "f_"}
    plain = program_text(compile_rule_set(rule_set.rules, matcher.default_aliases()))
    assert not calls.search(plain)
