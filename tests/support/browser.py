"""Headless Chromium for the browser tests: Debian's package at /usr/bin/chromium, driven by playwright without any
browser download (CI installs chromium with apt-get; .ci/run)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A launched headless browser, closed on exit. Skips the test when Debian's chromium or playwright is missing."""
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed at /usr/bin/chromium (apt-get install -y chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install playwright; no browser download)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


def watch_errors(page: Page) -> list[str]:
    """The page's uncaught script errors, collected as they happen (a test ends by asserting there were none)."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


SCREENSHOT_DIR_ENV = "ARENA_SCREENSHOT_DIR"
"""Where the browser tests save their screenshots: unset, a test's own temporary folder (``pytest`` leaves the
checkout untouched); ``scripts/update_screenshots.sh`` sets it to docs/screenshots to regenerate the docs' pictures
on purpose."""


def screenshot_path(name: str, tmp_path: Path) -> Path:
    """The file a browser test saves screenshot ``name`` to (see :data:`SCREENSHOT_DIR_ENV`); its folder exists."""
    folder = Path(os.environ[SCREENSHOT_DIR_ENV]) if os.environ.get(SCREENSHOT_DIR_ENV) else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
