"""Property: mutating valid rule files at random never gives a traceback, and the CLI
only ever exits 0, 1 or 2 (hypothesis; ~100 examples per property)."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.rules.helpers import SEED, run_cli

SOURCES = [
    (SEED / name).read_text(encoding="utf-8")
    for name in (
        "conv_add_silu_fusion.yaml",
        "conv_add_swish_branches.yaml",
        "conv_bn_relu_fusion.yaml",
        "layernorm_dropout_fusion.yaml",
        "priority_conflict.yaml",
    )
]
GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
JUNK = ["&a ", "*a", "<<: *a\n", ": ", "- ", "[", "}", "\t", "---\n", "!!python/object "]
JUNK += ["'", "#", "\\", "%YAML 1.1\n", "\x00", "\x1f", "? ", "|\n"]
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


def _assert_no_crash(text: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "rule.yaml"
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8", errors="surrogatepass")
        for command in (["verify"], ["check", "--strict", "--format", "sarif"]):
            res = run_cli(*command, p)
            assert res.exit_code in (0, 1, 2), (res.exit_code, res.stdout, res.stderr)
            assert res.exception is None or isinstance(res.exception, SystemExit)
            assert "internal error" not in res.stderr, res.stderr
            assert "Traceback" not in res.stdout + res.stderr


@st.composite
def data_mutations(draw) -> str:
    source = draw(st.sampled_from(SOURCES))
    docs = [copy.deepcopy(d) for d in yaml.safe_load_all(source)]
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        doc = draw(st.sampled_from(docs))
        path = draw(st.sampled_from(_paths(doc)))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["delete", "retype", "insert"]))
        if not path:
            continue
        if action == "delete":
            del parent[path[-1]]
        elif action == "retype":
            parent[path[-1]] = draw(GARBAGE)
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(GARBAGE)
        else:
            parent.insert(0, draw(GARBAGE))
    return yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)


@st.composite
def text_mutations(draw) -> str:
    text = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        pos = draw(st.integers(min_value=0, max_value=len(text)))
        action = draw(st.sampled_from(["truncate", "insert", "delete_line", "dup_line"]))
        lines = text.split("\n")
        if action == "truncate":
            text = text[:pos]
        elif action == "insert":
            junk = draw(st.sampled_from(JUNK) | st.text(max_size=6))
            text = text[:pos] + junk + text[pos:]
        elif action == "delete_line" and lines:
            del lines[pos % len(lines)]
            text = "\n".join(lines)
        elif lines:
            i = pos % len(lines)
            lines.insert(i, lines[i])
            text = "\n".join(lines)
    return text


@SETTINGS
@given(data_mutations())
def test_data_mutations_never_crash(text: str):
    _assert_no_crash(text)


@SETTINGS
@given(text_mutations())
def test_text_mutations_never_crash(text: str):
    _assert_no_crash(text)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash(blob: bytes):
    _assert_no_crash(blob)
