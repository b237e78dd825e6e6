"""report.html in a real browser: headless Chromium (Debian package) through playwright.

For a CNN, a transformer and an 88k-node decoder stack (a real fuse, made once per
session): no console error, one card per plan.json group (over every page), the totals
shown equal report.json's, a screenshot each, and the 88k-node page ready in < 2 s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ruleengine.rewrite.report import fmt_bytes

# one worker under `pytest -n auto --dist loadgroup`: the 88k-node fuse is made once
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("report-browser")]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOAD_LIMIT_S = 2.0  # the 88k-node page, from navigation to its first page of cards


@pytest.fixture(scope="module")
def browser(chromium_binary: str) -> Iterator[Any]:
    binary = chromium_binary
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=binary, args=FLAGS)
        yield b
        b.close()


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str], float]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    start = time.perf_counter()
    page.goto(page_file.as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=30_000)
    return page, errors, time.perf_counter() - start


def _screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("AUTOFUSION_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.getbasetemp() / "screenshots"


def _cards_over_pages(page: Any) -> int:
    return page.evaluate(
        "() => { let n = 0; for (let p = 0; p < AF.pages(); p++) n += AF.showPage(p);"
        " AF.showPage(0); return n; }"
    )


@pytest.mark.parametrize("name", ["cnn", "transformer", "stack"])
def test_report_in_chromium(browser, fused_outputs, tmp_path_factory, name: str) -> None:
    folder = fused_outputs(name)
    plan = json.loads((folder / "plan.json").read_text())
    report = json.loads((folder / "report.json").read_text())
    page, errors, seconds = _open(browser, folder / "report.html")
    try:
        shots = _screenshot_dir(tmp_path_factory)
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / f"report-{name}.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        assert errors == []
        assert page.evaluate("AF.groups") == len(plan["groups"])
        assert _cards_over_pages(page) == len(plan["groups"])
        shown = page.eval_on_selector_all(
            "[data-total]",
            "els => els.map(e => [e.dataset.total, Number(e.dataset.value), e.textContent])",
        )
        assert {k for k, _, _ in shown} >= {
            "hbm_bytes_before",
            "hbm_bytes_after",
            "gross_bytes_saved",
            "net_bytes_saved",
            "launches_saved",
            "groups",
        }
        for key, value, text in shown:
            assert value == report["totals"][key], key
            if "bytes" in key:
                assert text == fmt_bytes(value), key
            elif key == "nodes_after":
                assert text.endswith(f" {value}"), key
            else:
                assert text == str(value), key
        # the page's own time, navigation start to its first page of cards drawn (file
        # read, HTML parse, JSON parse, plot, cards); ``seconds`` adds playwright's
        # round trips and a new renderer's start on a busy machine
        ready = page.evaluate("performance.getEntriesByName('af-ready')[0].startTime") / 1000
        print(f"{name}: report.html ready in {ready:.3f} s ({seconds:.3f} s wall), {shot}")
        if name == "stack":
            assert ready < LOAD_LIMIT_S
    finally:
        page.close()


def test_search_finds_a_grouped_node(browser, fused_outputs) -> None:
    folder = fused_outputs("cnn")
    plan = json.loads((folder / "plan.json").read_text())
    group = plan["groups"][-1]
    page, errors, _ = _open(browser, folder / "report.html")
    try:
        page.fill("#search", group["nodes"][0])
        page.press("#search", "Enter")
        link = page.locator("#found a", has_text=f"group {group['id']} ")
        assert link.count() >= 1
        link.first.click()
        assert page.locator(f"#group-{group['id']}.hl").count() == 1
        assert errors == []
    finally:
        page.close()
