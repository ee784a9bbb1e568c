"""Headless Chromium (Debian's package, driven by playwright without any browser download) on the battle page:
new timeline entries arrive without a reload, agent markup runs nothing, the finished page is screenshotted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.battle_backend.conftest import Arena, progress, result
from tests.battle_backend.sample_result import battle_result
from tests.support.browser import chromium, watch_errors

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"
PWN = "window.__pwned = {n}; document.title = 'pwned'"
ATTACK_ON_LOAD = f'**bold on load** <script>{PWN.format(n=1)}</script> <img src=x onerror="{PWN.format(n=2)}">'
ATTACK_LIVE = (
    f'**bold live** <script>{PWN.format(n=3)}</script> <img src=nothing onerror="{PWN.format(n=4)}"> '
    f'<svg onload="{PWN.format(n=5)}"></svg> <a href="javascript:{PWN.format(n=6)}">link</a>'
)


async def test_battle_page_updates_live_and_runs_no_agent_script(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    await arena.post(battle_id, progress("present on load", markdown_content=ATTACK_ON_LOAD))

    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1200, "height": 900})
        page_errors = watch_errors(page)
        await page.goto(f"{arena.backend.url}/ui/battles/{battle_id}")
        title = await page.title()
        await page.evaluate("window.__sameDocument = 'yes'")
        await page.locator("#live-indicator.live-on").wait_for()
        before = await page.locator("#timeline > li").count()

        for i in range(5):
            assert (await arena.post(battle_id, progress(f"live event {i}"))).status_code == 204
        await page.locator(".event-message", has_text="live event 4").wait_for()
        assert (
            await arena.post(battle_id, progress("hostile markdown", markdown_content=ATTACK_LIVE))
        ).status_code == 204
        await page.locator(".event-markdown strong", has_text="bold live").wait_for()
        assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
        await page.locator("#pass-table").wait_for()
        await page.locator("#live-indicator", has_text="battle over").wait_for()

        assert await page.evaluate("window.__sameDocument") == "yes"  # updated without a reload
        assert await page.locator("#timeline > li").count() >= before + 7
        assert await page.locator("#battle-state").inner_text() == "finished"
        assert await page.locator(".event-markdown strong", has_text="bold on load").count() == 1
        assert await page.evaluate("window.__pwned") is None
        assert await page.title() == title != "pwned"
        assert await page.locator(".event-markdown script, .event-markdown [onerror], .event-markdown svg").count() == 0
        assert await page.locator("#attempt-grid td.outcome-success").count() == 3
        assert await page.locator(".pass-chart circle").count() >= 4
        assert page_errors == []

        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "backend_battle_page.png"
        await page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 0
