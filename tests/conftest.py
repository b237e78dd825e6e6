"""Suite-wide setup: each test's marker (unit, e2e or slow) by its file, and ../shared
required by the tests that use it: a usage error when they are selected without it, never
a silent skip."""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

TESTS = Path(__file__).resolve().parent
SHARED = TESTS.parent / ".." / "shared"

# Tests that run the shared models or seed rules of ../shared, by file (or file::test).
# Every other test is `unit`: it needs only the checkout. tests/test_layout.py checks
# that every test file naming the shared folder is listed here or in SLOW.
E2E = (
    "cli/test_analysis_cli.py",
    "cli/test_bytes_agree.py",
    "cli/test_explain_view.py",
    "cli/test_lint_cli.py",
    "cost/test_cost_shared_models.py",
    "cost/test_fast_paths.py",
    "graph/test_loader.py",
    "graph/test_onnxlite.py",
    "graph/test_segments.py",
    "graph/test_scopes_real.py",  # ../shared/models/real (silero If branches)
    "graph/test_shapes.py",
    "kernels/test_contract_real.py",
    "kernels/test_mutants.py",
    "library/test_coverage_metric.py",
    "library/test_independent_count.py",  # the two counts on shared models
    "match/test_cli.py",
    "match/test_composites.py",
    "match/test_fast_paths.py",
    "match/test_memo.py",
    "report/test_browser.py",  # report/conftest.py: fused_result("cnn"), ("transformer")
    "report/test_html.py",
    "report/test_model_explorer.py",
    "report/test_view.py",
    "resolve/test_determinism.py",
    "rewrite/test_plan_detail.py",
    "rewrite/test_port_map.py",
    "rules/test_property.py",
    "rules/test_records.py",
    "rules/test_seed_rules.py",
    "suggest/test_prune_pairs.py",
    "suggest/test_suggest.py",
    "verification/test_per_group.py",
    "verification/test_safe_resolve.py",  # ../shared/models/real/ppocrv4-det.onnx
    "e2e/test_real_models.py",  # ../shared/models/real, bench/real_models.json
    "rules/test_seed_readme.py",  # ../shared/seed-rules/README.md is the test
    "whynot/test_whynot.py",  # broken rules against ../shared/models
    "e2e/test_newcomer_rules.py",  # examples/newcomer rules on ../shared/models/real
)
# Whole-corpus sweeps: every model of ../shared/models (and families/), one test each.
SLOW = (
    "e2e/test_shared_models.py",
    "library/test_bars.py",
    "graph/test_shapes.py::test_fresh_exports_have_every_size_known_from_another_cwd",
    # (not the shared folder: a run per stage, ~5-10 s each; the main stages stay unit)
    "test_signals.py::test_a_stop_in_any_other_stage_ends_the_run_within_a_second",
)

# The files that take longest (measured: 20-110 s each on 2 cores), longest first. `make
# test` hands files out in this order and the rest after (--dist loadfile
# --no-loadscope-reorder), so that no worker starts a long one while the other has
# nothing left: the run's tail is shorter.
LONGEST_FIRST = (
    "library/test_bars.py",
    "e2e/test_shared_models.py",
    "suggest/test_suggest.py",
    "suggest/test_prune_pairs.py",
    "report/test_browser.py",
    "kernels/test_kernels.py",
    "cli/test_explain_view.py",
)


def _file(entry: str) -> str:
    return entry.split("::", 1)[0]


def kind_of(nodeid: str) -> str:
    """``slow``, ``e2e`` or ``unit`` for a test id relative to tests/ (``dir/file.py::name``)."""
    for kind, entries in (("slow", SLOW), ("e2e", E2E)):
        for entry in entries:
            if nodeid == entry or nodeid.startswith((entry + "::", entry + "[")):
                return kind
    return "unit"


def shared_missing() -> list[str]:
    """The folders of ../shared the e2e and slow tests read that are not there."""
    return [d for d in ("models", "seed-rules") if not (SHARED / d).is_dir()]


def _selects_shared(config: pytest.Config) -> bool:
    """Whether the run's ``-m`` expression keeps e2e or slow tests (no ``-m``: it does)."""
    expr = config.getoption("markexpr", "")
    if not expr:
        return True
    compiled = Expression.compile(expr)
    return any(compiled.evaluate(functools.partial(_is, kind)) for kind in ("e2e", "slow"))


def _is(kind: str, name: str, /, **_: object) -> bool:
    """A marker matcher for a test whose only marker is ``kind``."""
    return name == kind


# The cyclic GC's first generation collected after this many allocations (Python: 700).
# A worker holds graphs, analyses and compiled programs of many models at once (module
# fixtures, the matcher's kept programs), and outside ``paused_gc`` each young collection
# walked what the last stage left: measured 69 s of the suite's 610 s of CPU in 15,000
# collections; 3% less CPU over tests/suggest/test_suggest.py and match/test_fast_paths.py
# with this. Only how often the collector runs: a test that needs a collection makes it.
GC_YOUNG_THRESHOLD = 50_000


def pytest_configure(config: pytest.Config) -> None:
    """Without ../shared only ``-m unit`` can run: the e2e and slow tests stop the run with
    this message instead of being skipped. The GC's first generation is collected less
    often (``GC_YOUNG_THRESHOLD``)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    missing = shared_missing()
    if missing and _selects_shared(config):
        raise pytest.UsageError(
            f"{SHARED.resolve()} lacks {', '.join(missing)}/: the e2e and slow tests need the "
            "project's shared folder beside the checkout (../shared); "
            "`pytest -m unit` runs the tests that do not"
        )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without ../shared (``-m unit`` only) the e2e and slow files are not imported: some
    list the shared models when they load."""
    if collection_path.suffix != ".py" or not shared_missing():
        return None
    try:
        rel = collection_path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None
    return True if rel in {_file(e) for e in E2E + SLOW} else None


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its marker by its file (E2E, SLOW; unit otherwise); the files of the
    longest tests first (LONGEST_FIRST)."""
    for item in items:
        rel = _rel_path(item)
        if rel is None:
            continue
        nodeid = rel + item.nodeid[item.nodeid.index(".py") + 3 :]
        item.add_marker(kind_of(nodeid))
    first = {rel: i for i, rel in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(_rel_path(item), len(first)))  # stable


def _rel_path(item: pytest.Item) -> str | None:
    try:
        return item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None


@pytest.fixture(scope="session", autouse=True)
def bundled_rules_read_once() -> Iterator[None]:
    """Each in-process fuse, analyze or CLI run loads the bundled rules again (~270 YAML
    files, each schema-checked: ~0.45 s of CPU), hundreds of times in a run. A bundled
    file that has not changed (same size, mtime, ctime, inode) is read once per worker; any
    other file, text given or changed cwd (the displayed path) is read as ever."""
    import ruleengine.rules.lint as lint
    from ruleengine.resources import data_dir

    real = lint.lint_file
    bundled = data_dir("rules").resolve()
    cache: dict[tuple, object] = {}

    def lint_file(path: Path, display: str | None = None, text: str | None = None, **kw: bool):
        try:
            full = Path(path).resolve()
            st = full.stat()
            stamp = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            key = (str(path), full, stamp, display, os.getcwd(), tuple(sorted(kw.items())))
        except OSError:
            return real(path, display, text, **kw)
        if text is not None or not full.is_relative_to(bundled):
            return real(path, display, text, **kw)
        if key not in cache:
            cache[key] = real(path, display, text, **kw)
        return cache[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lint, "lint_file", lint_file)
        yield


@pytest.fixture
def corrupt_rules(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make in-process CLI runs corrupt the named rules' groups (the test-only hook of
    ``pipeline.fuse``; the installed CLI cannot reach it). Call it with rule names."""
    import ruleengine.pipeline as pipeline

    real = pipeline.fuse

    def bind(*names: str) -> None:
        monkeypatch.setattr(pipeline, "fuse", functools.partial(real, corrupt_rules=list(names)))

    return bind
