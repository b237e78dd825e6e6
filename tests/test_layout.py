"""The code's shape, checked (issue 37): short functions, no private name used across
packages, ``__init__`` files that only re-export, and every test that reads ../shared
marked as such. The package layering itself is import-linter's (pyproject.toml,
``lint-imports`` in ``make test``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import E2E, SLOW, kind_of

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ruleengine"
MAX_LINES = 80

# Functions over MAX_LINES that are data, not logic: (path under ruleengine/, qualified
# name) -> why. Keep it short; a table belongs in a module-level constant where it can.
DATA_TABLES: dict[tuple[str, str], str] = {}


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function and method, nested ones too, by qualified name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def test_no_function_over_80_lines() -> None:
    """From the ``def`` line to the last line, decorators aside: a function that does not
    fit a screen holds more than one step; split it (issue 37)."""
    long = []
    for path in _sources():
        for name, node in _functions(ast.parse(path.read_text(), str(path))):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES and (_rel(path), name) not in DATA_TABLES:
                long.append(f"{_rel(path)}:{node.lineno} {name}: {lines} lines")
    assert not long, f"{len(long)} function(s) over {MAX_LINES} lines:\n" + "\n".join(long)


def test_data_table_exemptions_still_exist() -> None:
    """An exemption outlives its function only as a stale hole in the rule."""
    names = {(_rel(p), n) for p in _sources() for n, _ in _functions(ast.parse(p.read_text()))}
    assert set(DATA_TABLES) <= names, sorted(set(DATA_TABLES) - names)


def _package(module: str) -> str:
    """``ruleengine.match.memo`` -> ``match``; ``ruleengine.pipeline`` -> ``pipeline``;
    the facade (``ruleengine``, ``ruleengine.__main__``) -> ``""``."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] == "__main__":
        return ""
    return parts[1]


def _module_of(path: Path) -> str:
    parts = ["ruleengine", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _source_of(node: ast.ImportFrom, me: str, path: Path) -> str:
    """The module a ``from`` import reads, relative ones resolved against ``me``."""
    if not node.level:
        return node.module or ""
    base = me.split(".")
    base = base[: len(base) - node.level + (path.name == "__init__.py")]
    return ".".join([*base, *([node.module] if node.module else [])])


def _foreign(module: str, mine: str) -> bool:
    return module.startswith("ruleengine") and _package(module) not in (mine, "")


def _cross_private(path: Path) -> Iterator[str]:
    """Private names (and private modules) of another package this module reaches: by
    ``from ... import _x``, by ``import ruleengine.x._y``, or as ``module._x``."""
    me = _module_of(path)
    mine = _package(me)
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # local name -> the other package's module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _foreign(src := _source_of(node, me, path), mine):
            if any(_private(p) for p in src.split(".")):
                yield f"{node.lineno}: from {src} import ..."
            for a in node.names:
                if _private(a.name):
                    yield f"{node.lineno}: from {src} import {a.name}"
                elif _is_module(f"{src}.{a.name}"):
                    aliases[a.asname or a.name] = f"{src}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in (a for a in node.names if _foreign(a.name, mine)):
                if any(_private(p) for p in a.name.split(".")):
                    yield f"{node.lineno}: import {a.name}"
                aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            yield f"{node.lineno}: {aliases[node.value.id]}.{node.attr}"


def test_no_private_name_crosses_packages() -> None:
    """What another package needs is public in its owner (a name without ``_``): a private
    name may change without notice, so no other package may lean on it (issue 37)."""
    found = [f"{_rel(p)}:{hit}" for p in _sources() for hit in _cross_private(p)]
    assert not found, f"{len(found)} private name(s) used across packages:\n" + "\n".join(found)


def _reexport_only(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)  # the docstring
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
    if isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    ):
        return all(_reexport_only(n) for n in node.body + node.orelse)
    return False


def test_init_files_only_reexport() -> None:
    """A package's ``__init__.py`` holds its docstring, imports and ``__all__`` only: code
    lives in a module named for what it does, where a reader looks for it (issue 37)."""
    bad = [
        f"{_rel(p)}:{n.lineno} {type(n).__name__}"
        for p in _sources()
        if p.name == "__init__.py"
        for n in ast.parse(p.read_text()).body
        if not _reexport_only(n)
    ]
    assert not bad, "__init__.py statements other than imports and __all__:\n" + "\n".join(bad)


NAMES_SHARED = re.compile(r"\b(SHARED|SEED|MODELS)\b|[\"']shared[\"']|shared/(models|seed-rules)")


@pytest.mark.parametrize("kind", ["e2e", "slow"])
def test_marker_lists_name_existing_tests(kind: str) -> None:
    """Every E2E / SLOW entry of tests/conftest.py is a test file there is."""
    tests = ROOT / "tests"
    entries = E2E if kind == "e2e" else SLOW
    missing = [e for e in entries if not (tests / e.split("::")[0]).is_file()]
    assert not missing, missing


def test_tests_that_read_shared_are_not_unit() -> None:
    """A test file that names ../shared (its models or seed rules) is e2e or slow, so that
    ``pytest -m unit`` runs without ../shared (tests/conftest.py)."""
    tests = ROOT / "tests"
    unmarked = [
        p.relative_to(tests).as_posix()
        for p in sorted(tests.rglob("test_*.py"))
        if p.name != "test_layout.py"
        and NAMES_SHARED.search(p.read_text())
        and kind_of(p.relative_to(tests).as_posix()) == "unit"
    ]
    assert not unmarked, "add to E2E in tests/conftest.py:\n" + "\n".join(unmarked)
