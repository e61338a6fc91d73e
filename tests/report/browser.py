"""Drive Debian's chromium through Playwright (``playwright install`` cannot download a browser
here, so the system browser is used). Outside CI a missing browser skips; under CI=true it fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "html"
"""Screenshots of every report the browser tests load (gitignored; CI keeps them)."""
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return os.environ.get("TORCHDOCTOR_CHROMIUM") or shutil.which("chromium")


def _missing(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}: CI must run the browser tests (scripts/setup.sh installs them)")
    pytest.skip(f"{why} (scripts/setup.sh installs it; CI=true makes this a failure)")


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh headless chromium profile for this module's tests."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    exe = chromium_path()
    if exe is None:
        _missing("the chromium browser is not installed")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        # headless=False: "--headless=new" in the arguments makes it headless (Playwright's own
        # flag would pick the old headless shell).
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=exe,
            headless=False,
            args=CHROMIUM_ARGS,
            viewport={"width": 1366, "height": 900},
        )
        try:
            yield ctx
        finally:
            ctx.close()


@dataclass
class Loaded:
    """A page after load, with what it asked the network for and what it logged."""

    page: Any
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


def load(ctx: Any, html: Path) -> Loaded:
    page = ctx.new_page()
    out = Loaded(page)
    page.on("request", lambda r: out.requests.append(r.url))
    page.on(
        "console",
        lambda m: out.console_errors.append(m.text) if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: out.console_errors.append(str(e)))
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    return out


def screenshot(loaded: Loaded, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    loaded.page.screenshot(path=str(path), full_page=True)
    return path


def assert_clean(loaded: Loaded, html: Path) -> None:
    """No console errors or warnings, and no request besides the page itself."""
    assert loaded.console_errors == []
    assert loaded.requests == [html.as_uri()], "the page requested something besides itself"


def column_values(page: Any, table: str, header: str) -> list[float]:
    """The numeric values (``data-v``) of one column of a sortable table, in row order."""
    headers = page.eval_on_selector_all(f"{table} th", "els => els.map(e => e.textContent)")
    k = headers.index(header)
    return page.eval_on_selector_all(  # type: ignore[no-any-return]
        f"{table} tbody tr", f"rows => rows.map(r => parseFloat(r.cells[{k}].dataset.v))"
    )


def click_header(page: Any, table: str, header: str) -> None:
    headers = page.eval_on_selector_all(f"{table} th", "els => els.map(e => e.textContent)")
    page.click(f"{table} th:nth-child({headers.index(header) + 1})")
