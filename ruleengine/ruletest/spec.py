"""A rule test file: ONNX text whose ``#`` comment lines state the expectations.

Directive lines (anywhere in the file, one per line; other comments are free text):
``# match: n1,n2`` (a candidate the rule must produce; the candidates found must be exactly
the ``match`` lines), ``# no-match``, ``# todo-match: n1,n2``, ``# todo-no-match``,
``# near-miss: code,...`` and ``# rule: name``. Graph inputs named ``W_*`` become
initializers filled with seeded random data, so tests stay short while weights are real
constants (a name ending in ``_v``/``_var`` gets positive values: a variance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

from ruleengine.diagnostics import codes
from ruleengine.diagnostics.model import Diagnostic, Location

TEST_SUFFIX = ".onnxtxt"
TESTS_DIR_SUFFIX = ".tests"

_DIRECTIVE = re.compile(
    r"^\s*#\s*(?P<key>rule|match|no-match|todo-match|todo-no-match|near-miss)\s*"
    r"(?::(?P<value>.*))?$"
)
_LOOKS_LIKE = re.compile(r"^\s*#\s*(?P<key>[a-z][a-z_-]*)\s*:")
# Near-spellings of the directives, so a typo is an error rather than a silent comment.
_KNOWN_TYPOS = {
    "expect": "match",
    "matches": "match",
    "nomatch": "no-match",
    "no_match": "no-match",
    "todo": "todo-match",
    "todo_match": "todo-match",
    "todomatch": "todo-match",
    "near_miss": "near-miss",
    "nearmiss": "near-miss",
    "near-misses": "near-miss",
    "rules": "rule",
}
_FLAGS = ("no-match", "todo-no-match")


@dataclass(frozen=True)
class Expectations:
    """What a test file says its rule must (not) find."""

    rules: tuple[str, ...] = ()  # empty: every rule of the rule file
    match: tuple[tuple[str, ...], ...] = ()
    no_match: bool = False
    todo_match: tuple[tuple[str, ...], ...] = ()
    todo_no_match: bool = False
    near_miss: tuple[str, ...] = ()

    @property
    def states_anything(self) -> bool:
        return bool(self.match or self.no_match or self.todo_match or self.todo_no_match)


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def parse_expectations(text: str, where: str) -> tuple[Expectations, list[Diagnostic]]:
    """Read the directive lines of a test file; problems are diagnostics with line:col."""
    rules: list[str] = []
    match: list[tuple[str, ...]] = []
    todo: list[tuple[str, ...]] = []
    near: list[str] = []
    flags: set[str] = set()
    diags: list[Diagnostic] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _DIRECTIVE.match(line)
        if m is None:
            diags.extend(_typo(line, lineno, where))
            continue
        key, value = m["key"], (m["value"] or "").strip()
        col = line.index(key) + 1
        if key in _FLAGS:
            if value:
                diags.append(
                    codes.make(
                        "rule-test-directive",
                        f"'# {key}' takes no value (got {value!r})",
                        Location(where, lineno, col),
                        hint=f"write '# {key}' alone, or '# match: n1,n2' for node names",
                    )
                )
            flags.add(key)
            continue
        names = _names(value)
        if not names:
            diags.append(
                codes.make(
                    "rule-test-directive",
                    f"'# {key}:' names nothing",
                    Location(where, lineno, col),
                    hint="list node names (or codes, rule names) separated by commas",
                )
            )
        elif key == "match":
            match.append(names)
        elif key == "todo-match":
            todo.append(names)
        elif key == "near-miss":
            near.extend(names)
        else:
            rules.extend(names)
    exp = Expectations(
        tuple(rules), tuple(match), "no-match" in flags, tuple(todo), "todo-no-match" in flags,
        tuple(near),
    )  # fmt: skip
    return exp, diags + _contradictions(exp, where, bool(diags))


def _typo(line: str, lineno: int, where: str) -> list[Diagnostic]:
    """A comment line that looks like a misspelt directive (``# matches:``)."""
    typo = _LOOKS_LIKE.match(line)
    if not typo or typo["key"].lower() not in _KNOWN_TYPOS:
        return []
    right = _KNOWN_TYPOS[typo["key"].lower()]
    return [
        codes.make(
            "rule-test-directive",
            f"'# {typo['key']}:' is not a rule-test directive; did you mean '# {right}'?",
            Location(where, lineno, line.index(typo["key"]) + 1),
            hint="directives: match, no-match, todo-match, todo-no-match, near-miss, rule",
        )
    ]


def _contradictions(exp: Expectations, where: str, found: bool) -> list[Diagnostic]:
    """What is wrong with the file's expectations as a whole (``found``: problems were
    found in its lines already)."""
    diags: list[Diagnostic] = []
    if exp.no_match and exp.match:
        diags.append(
            codes.make(
                "rule-test-directive",
                "the file says both '# no-match' and '# match: ...'",
                Location(where, 1, 1),
                hint="keep one: the match lines, or no-match",
            )
        )
    if not found and not diags and not exp.states_anything:
        diags.append(
            codes.make(
                "rule-test-no-expectation",
                "the test states no expectation",
                Location(where, 1, 1),
                hint="add '# match: node1,node2' lines or '# no-match' (autofusion test "
                "--update writes what matches now)",
            )
        )
    return diags


def _parse_position(message: str) -> tuple[int | None, int | None]:
    m = re.search(r"line:\s*(\d+)\s+column:\s*(\d+)", message)
    return (int(m[1]), int(m[2])) if m else (None, None)


def build_model(text: str, where: str = "<test>", seed: int = 0) -> onnx.ModelProto:
    """Parse ONNX text; turn ``W_*`` graph inputs into seeded random initializers.

    Raises ``ValueError`` carrying a diagnostic (``args[1]``) when the text does not parse.
    """
    try:
        model = onnx.parser.parse_model(text)
    except Exception as exc:  # onnx.parser.ParseError and C++ errors alike
        message = str(exc)
        if message.startswith("b'") or message.startswith('b"'):
            message = message[2:-1].encode().decode("unicode_escape")
        line, col = _parse_position(message)
        detail = " ".join(x for x in message.splitlines()[1:] if x.strip()) or message
        raise ValueError(
            detail,
            codes.make(
                "rule-test-syntax",
                f"not a model in the ONNX text format: {detail}",
                Location(where, line, col),
                hint="see https://onnx.ai/onnx/repo-docs/Syntax.html; a test is "
                "'<ir_version: 8, opset_import: [\"\" : 17]>' then 'name (inputs) => "
                "(outputs) { nodes }'",
            ),
        ) from None
    rng = np.random.default_rng(seed)
    graph = model.graph
    keep = []
    for inp in graph.input:
        if not inp.name.startswith("W_"):
            keep.append(inp)
            continue
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        data = rng.standard_normal(dims).astype(dtype)
        if inp.name.endswith(("_v", "_var")):
            data = np.abs(data) + 0.5  # a variance must be positive
        graph.initializer.append(numpy_helper.from_array(data, inp.name))
    del graph.input[:]
    graph.input.extend(keep)
    return model


def rewrite_expectations(
    text: str, found: tuple[tuple[str, ...], ...], near_misses: tuple[str, ...] | None
) -> str:
    """The test text with its match/no-match lines replaced by ``found`` (``--update``).

    ``near_misses`` (when not None) replaces the near-miss lines too. Todo lines, rule
    lines and free comments stay as written; new lines go where the old ones were, or
    after the leading comment block.
    """
    lines = text.splitlines(keepends=True)
    replaced = {"match", "no-match"} | ({"near-miss"} if near_misses is not None else set())
    at: int | None = None
    kept: list[str] = []
    for line in lines:
        m = _DIRECTIVE.match(line.rstrip("\r\n"))
        if m and m["key"] in replaced:
            if at is None:
                at = len(kept)
            continue
        kept.append(line)
    if at is None:
        at = 0
        while at < len(kept) and kept[at].lstrip().startswith("#"):
            at += 1
    new = [f"# match: {','.join(nodes)}\n" for nodes in found] or ["# no-match\n"]
    if near_misses:
        new.append(f"# near-miss: {','.join(near_misses)}\n")
    return "".join(kept[:at] + new + kept[at:])
