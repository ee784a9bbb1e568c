"""Headless Chromium (Debian's package, driven by playwright) on a battle as its attempts arrive: the progress
counters move without a reload, a live grid cell opens the attempt viewer with its conversation and the database
difference naming the field, agent markup in a tool result or a message runs nothing, and the finished page filters
its grid without a reload. Saves test-artifacts/live-battle-page.png and test-artifacts/live-attempt-viewer.png (the
docs' screenshots come from the real demo: tests/launcher/test_browser_demo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from battle_backend.battles.tolerant import DASH
from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result
from tests.support.browser import chromium, watch_errors

pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[3] / "test-artifacts"
TASKS = ["retail/test/0", "retail/test/1"]
RULE = "the white agent wins when macro pass^4 >= 0.5; this battle: 0.333 (green agent wins)"


async def test_live_counters_attempt_viewer_and_no_agent_script(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    battle_url = f"{arena.backend.url}/ui/battles/{battle_id}"

    async def post(detail: dict[str, object]) -> None:
        assert (await arena.post(battle_id, progress_event(detail))).status_code == 204

    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1200, "height": 900})
        page_errors = watch_errors(page)
        await page.goto(battle_url)
        await page.evaluate("window.__sameDocument = 'yes'")
        await page.locator("#live-indicator.live-on").wait_for()

        # the counters move as the green agent reports
        await post(battle_started(TASKS, 3))
        await page.locator("#progress-done", has_text="0 / 6").wait_for()
        assert await page.locator("#progress-eta").inner_text() == DASH
        await post(attempt_finished(TASKS[0], 2, "failure", done=1, total=6))
        await page.locator("#progress-done", has_text="1 / 6").wait_for()
        assert (await page.locator("#progress-pass1").inner_text()).startswith("0.000 [0.000, 0.793]")
        await post(attempt_finished(TASKS[1], 1, "failure", done=2, total=6, hostile=True))
        await page.locator("#progress-done", has_text="2 / 6").wait_for()
        assert await page.locator("#progress-eta").inner_text() != DASH
        assert await page.evaluate("window.__sameDocument") == "yes"  # no reload
        assert "Attempts done: 2 / 6" in await page.locator("#progress-announce").inner_text()
        cell = page.locator(f'#live-grid a[href$="/attempts/{TASKS[0]}/2"]')
        assert "attempt 2 of retail/test/0: failure, task_incomplete" in await cell.inner_text()

        # a cell opens the attempt: the explanation names the field, the conversation follows
        await cell.click()
        await page.locator("#messages").wait_for()
        assert await page.locator("#messages > li").count() == 5
        assert await page.locator("#messages", has_text="Please cancel order #W2378156.").count() == 1
        assert await page.locator("#messages .message-latency", has_text="+0.412 s").count() == 1
        row = page.locator("#db-diff tbody tr").first
        assert await row.locator("td.db-field").inner_text() == "status"
        assert "#W2378156" in await row.inner_text() and '"cancelled"' in await row.inner_text()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "live-attempt-viewer.png"), full_page=True)

        # hostile text in a tool result and in the agent's message is shown, never run
        await page.goto(f"{battle_url}/attempts/{TASKS[1]}/1")
        await page.locator("#messages").wait_for()
        assert await page.locator(".tool-result", has_text="<script>window.__pwned = 1</script>").count() == 1
        assert await page.locator(".message-content", has_text="<script>window.__pwned = 3</script>").count() == 1
        assert await page.locator("#messages script, #messages img, #messages svg, #messages [onerror]").count() == 0
        assert await page.evaluate("window.__pwned") is None

        # the finished battle: winner rule, the result grid linking to the viewer, filtered without a reload
        await page.goto(battle_url)
        await page.locator("#live-indicator.live-on").wait_for()
        await page.evaluate("window.__sameDocument = 'again'")
        detail = battle_result(battle_id)
        detail["winner_rule"] = RULE
        assert (await arena.post(battle_id, result("green_agent", detail))).status_code == 204
        await page.locator("#attempt-grid").wait_for()
        await page.locator("#live-indicator", has_text="battle over").wait_for()
        assert RULE in await page.locator("#winner-rule").inner_text()
        assert await page.locator("#live-grid").count() == 0  # the result's grid replaces the live one
        await page.select_option('#attempt-filter select[name="outcome"]', "failure")
        assert await page.locator("#attempt-grid td.outcome-success.filtered-out").count() == 3
        assert "outcome=failure" in page.url
        assert await page.evaluate("window.__sameDocument") == "again"
        await page.select_option('#attempt-filter select[name="outcome"]', "")
        assert await page.locator("#attempt-grid td.filtered-out").count() == 0
        await page.screenshot(path=str(SCREENSHOTS / "live-battle-page.png"), full_page=True)
        await page.locator(f'#attempt-grid a[href$="/attempts/{TASKS[1]}/1"]').click()
        await page.locator("#attempt-facts").wait_for()
        assert await page.evaluate("window.__pwned") is None
        assert page_errors == []


async def test_a_battle_appearing_in_the_list_shows_aliases(arena: Arena) -> None:
    green, white = await arena.pair()
    async with chromium() as browser:
        page = await browser.new_page()
        page_errors = watch_errors(page)
        await page.goto(f"{arena.backend.url}/")
        await page.wait_for_load_state("networkidle")
        battle_id = await arena.battle(green, ("white_agent", white))
        row = page.locator(f'#battle-list tr[data-battle-id="{battle_id}"]')
        await row.wait_for()
        cells = row.locator("td")
        assert await cells.nth(2).inner_text() == "green"
        assert await cells.nth(3).inner_text() == "white_agent: white"
        assert green.agent_id not in await row.inner_text()
        assert page_errors == []
