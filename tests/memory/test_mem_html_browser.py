"""``memory --html`` pages in a real browser: no errors, no requests, the chart drawn, the holders
table sorts, hostile frame names stay text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.memory.test_mem_html import HOSTILE_FUNC, _hostile
from tests.report import browser
from tests.report.browser import browser_context
from torchdoctor.memory.analysis import analyze_snapshot, memory_series
from torchdoctor.report.html import write_html
from torchdoctor.report.memory_page import page_from_memory

__all__ = ["browser_context"]


def _html(snapshot: Path, out: Path) -> Path:
    return write_html(page_from_memory(analyze_snapshot(snapshot), memory_series(snapshot)), out)


def _drawn_lines(loaded: browser.Loaded) -> int:
    return loaded.page.eval_on_selector_all(
        "svg.memory path.line",
        "els => els.filter(e => (e.getAttribute('d') || '').length > 40).length",
    )


@pytest.mark.slow
def test_real_snapshot_page_draws_and_sorts(
    browser_context: Any, tmp_path: Path, gpt_snapshot: Path
) -> None:
    html = _html(gpt_snapshot, tmp_path / "memory.html")
    loaded = browser.load(browser_context, html)
    browser.assert_clean(loaded, html)
    assert _drawn_lines(loaded) == 2  # allocated and reserved
    page, table = loaded.page, "#table-holders-0"
    before = browser.column_values(page, table, "live MiB")
    browser.click_header(page, table, "live MiB")
    after = browser.column_values(page, table, "live MiB")
    assert after == sorted(before) != before  # the page starts largest first
    browser.screenshot(loaded, "memory-gpt")


@pytest.mark.slow
def test_hostile_snapshot_page_stays_text(browser_context: Any, tmp_path: Path) -> None:
    html = _html(_hostile(tmp_path / "hostile.pickle"), tmp_path / "hostile-memory.html")
    loaded = browser.load(browser_context, html)
    browser.assert_clean(loaded, html)
    page = loaded.page
    assert page.evaluate("() => window.__pwned") is None
    assert page.eval_on_selector_all("img", "els => els.length") == 0
    assert HOSTILE_FUNC in page.text_content("#table-holders-0")
    assert "out of memory #1" in page.text_content("#oom-gpu0-1")
    browser.screenshot(loaded, "memory-hostile")
