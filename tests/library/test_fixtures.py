"""The bundled library's rule tests, run the way a user runs them: ``autofusion test rules/``.

The tests live beside the rules (``rules/<preset>/<rule>.tests/*.onnxtxt``); every bundled
rule needs at least one graph it must match and one it must not.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from tests.rules.helpers import run_cli

from .fixturelib import RULES, matcher_supports_multiple_roots


@cache  # one run of the whole library (~8 s) read by both tests
def _run_bundled() -> dict:
    res = run_cli("test", RULES, "--format", "json")
    doc = json.loads(res.stdout)
    failures = [
        m
        for f in doc["rule_files"]
        for m in [d["message"] for d in f["diagnostics"]]
        + [m for t in f["tests"] if t["status"] != "pass" for m in t["messages"]]
    ]
    assert res.exit_code == 0, "\n".join(failures) or res.stderr
    return doc


def test_autofusion_test_passes_on_the_bundled_rules():
    doc = _run_bundled()
    assert doc["summary"]["tests"] >= 2 * doc["summary"]["rule_files"]
    assert doc["summary"]["failed"] == doc["summary"]["errors"] == 0


def test_every_bundled_rule_has_a_match_and_a_no_match_test():
    doc = _run_bundled()
    files = {p.relative_to(RULES).as_posix() for p in RULES.glob("*/*.yaml")}
    kinds: dict[str, set[bool]] = {}
    for f in doc["rule_files"]:
        name = Path(f["rule_file"]).resolve().relative_to(RULES.resolve()).as_posix()
        kinds[name] = {bool(t["expected"]) for t in f["tests"] if t["status"] == "pass"}
    missing = sorted(f for f in files if kinds.get(f) != {True, False})
    assert not missing, f"rules without both a match and a no-match test: {missing}"
    assert not doc["untested"]


def test_matcher_starts_a_root_at_kind_only_input_sources():
    """The contract the multi-root rules rely on (attention paths, SwiGLU's up projection)."""
    assert matcher_supports_multiple_roots()
