"""Headless Chromium on the divergence view of a task: reached from the battle page's grid, four attempts side by
side with the first divergence marked, at 1280 px and at 390 px (the columns scroll sideways inside their box; the
page itself never overflows), agent markup runs nothing. Saves divergence-1280.png and divergence-390.png through
screenshot_path (docs/screenshots only when scripts/update_screenshots.sh asks)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from battle_backend.views.divergence import task_path
from tests.battle_backend.attempt_samples import attempt_finished, battle_started
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_attempt_viewer import post_detail, running_battle
from tests.support.browser import chromium, screenshot_path, watch_errors

pytestmark = pytest.mark.browser

TASK = "retail/test/0"


def _attempt(number: int, outcome: str, order_id: str, reply: str, *, hostile: bool = False) -> dict[str, Any]:
    detail = copy.deepcopy(attempt_finished(TASK, number, outcome, done=number, total=4, hostile=hostile))
    messages = detail["trajectory"]["messages"]
    if not hostile:
        messages[2]["tool_calls"][0]["arguments"] = {"order_id": order_id}
    messages[4]["content"] = reply
    if outcome == "success":
        messages.insert(
            5,
            {
                "step": 5,
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_002",
                        "name": "cancel_pending_order",
                        "arguments": {"order_id": order_id, "reason": "no longer needed"},
                    }
                ],
            },
        )
    return detail


async def test_divergence_view_at_desktop_and_phone_width(arena: Arena, tmp_path: Path) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, battle_started([TASK, "retail/test/1"], 4))
    await post_detail(arena, battle_id, _attempt(1, "success", "#W2378156", "Your order #W2378156 is cancelled."))
    await post_detail(arena, battle_id, _attempt(2, "failure", "#W2378165", "I cancelled order #W2378165 for you."))
    await post_detail(arena, battle_id, _attempt(3, "success", "#W2378156", "Done: #W2378156 is cancelled."))
    await post_detail(arena, battle_id, _attempt(4, "failure", "#W2378156", "Sorry, that failed.", hostile=True))
    body = battle_result(battle_id)
    body["consistency"] = {
        "tasks": 2,
        "mixed_tasks": 2,
        "mean_flip_rate": 0.667,
        "least_consistent": [
            {
                "task_key": TASK,
                "task_id": "0",
                "attempts": 4,
                "successes": 2,
                "flip_rate": 0.667,
                "first_divergence": {"turn": 2, "passing_attempt": 1, "failing_attempt": 2},
                "attempts_compared": 4,
            }
        ],
        "not_listed": 0,
    }
    assert (await arena.post(battle_id, result("white_agent", body))).status_code == 204
    await arena.wait_state(battle_id, "finished")

    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page_errors = watch_errors(page)
        await page.goto(f"{arena.backend.url}/ui/battles/{battle_id}")
        await page.locator(f'#attempt-grid a.task-link[href="{task_path(battle_id, TASK)}"]').click()
        await page.locator("#divergence-grid").wait_for()
        assert await page.locator("#divergence-grid thead th.attempt-col").count() == 4
        marked = page.locator("#divergence-grid tr.divergence-row")
        assert await marked.count() == 1
        assert await marked.get_attribute("id") == "turn-2"
        assert "first divergence" in await marked.inner_text()
        assert "#W2378165" in await marked.inner_text()
        assert "turn 2" in await page.locator("#task-divergence").inner_text()
        assert await page.locator("#divergence-grid script, #divergence-grid svg, #divergence-grid img").count() == 0
        assert await page.evaluate("window.__pwned") is None
        await page.screenshot(path=str(screenshot_path("divergence-1280.png", tmp_path)), full_page=True)

        await page.set_viewport_size({"width": 390, "height": 844})
        await page.reload()
        await page.locator("#divergence-grid").wait_for()
        widths = await page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth,"
            " document.getElementById('divergence-scroll').scrollWidth,"
            " document.getElementById('divergence-scroll').clientWidth]"
        )
        page_width, viewport, grid_width, box_width = widths
        assert page_width <= viewport, f"the page overflows at 390 px: {page_width} > {viewport}"
        assert grid_width > box_width, "the columns should scroll sideways inside their box"
        await page.screenshot(path=str(screenshot_path("divergence-390.png", tmp_path)), full_page=True)
        assert page_errors == []
