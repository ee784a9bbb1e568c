"""Headless Chromium on the attempt viewer at desktop (1280 px) and phone (390 px) width: the task's instructions,
tau2's checks with met/unmet and the reward split, the malformed reply, tool calls open as fields and tool results
collapsed until clicked; agent markup runs nothing and the page never scrolls sideways. Saves
attempt-checks-1280.png and attempt-checks-390.png (tests/support/browser.py: screenshot_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.battle_backend.conftest import Arena
from tests.battle_backend.views.test_attempt_checks import XSS_REPLY, full_detail
from tests.battle_backend.views.test_attempt_viewer import post_detail, running_battle, viewer
from tests.support.browser import chromium, screenshot_path, watch_errors

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1280, 390])
async def test_checks_and_collapsible_tool_fields(arena: Arena, tmp_path: Path, width: int) -> None:
    battle_id = await running_battle(arena)
    detail = full_detail(hostile=True)
    detail["trajectory"]["messages"][3]["error"] = False  # a tool result flagged as an error opens by itself
    await post_detail(arena, battle_id, detail)
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": width, "height": 900})
        page_errors = watch_errors(page)
        await page.goto(f"{arena.backend.url}{viewer(battle_id)}")
        await page.locator("#messages").wait_for()

        # the malformed reply, shown as text
        assert XSS_REPLY in await page.locator("#malformed-text").inner_text()
        # the task's instructions, the reward split, every check with its verdict
        assert "Reason for call" in await page.locator("#scenario").inner_text()
        assert await page.locator("#reward-split tbody tr").count() == 3
        actions = page.locator("#checks-ACTION tbody tr")
        assert await actions.count() == 2
        assert "✓ met" in await actions.nth(0).locator(".check-verdict").inner_text()
        assert "✗ unmet" in await actions.nth(1).locator(".check-verdict").inner_text()
        assert await page.locator("#checks-ENV_ASSERTION .check-unmet").is_visible()

        # a tool call opens on its fields; a tool result is collapsed until its summary is clicked
        call = page.locator("#messages details.tool-call").first
        assert await call.get_attribute("open") is not None
        assert await call.locator("dl.fields dt", has_text="order_id").is_visible()
        result = page.locator("#messages details.tool-result").first
        field = result.locator("dl.fields dt").first
        assert not await field.is_visible()
        await result.locator("summary").first.click()
        await field.wait_for(state="visible")
        assert await field.inner_text() == "note"

        # agent markup anywhere on the page runs nothing (the CSP and the escaping)
        assert await page.evaluate("window.__pwned") is None
        assert await page.locator("main script, main img, main svg, main [onerror], main [onload]").count() == 0
        # nothing wider than the window
        widths = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"the page scrolls sideways at {width} px: {widths}"
        await page.screenshot(path=str(screenshot_path(f"attempt-checks-{width}.png", tmp_path)), full_page=True)
        assert page_errors == []
