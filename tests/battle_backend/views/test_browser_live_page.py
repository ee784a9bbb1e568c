"""Headless Chromium on the live battle page (issue 26), at 1280 px and at 390 px: the page never scrolls itself (the
progress panel stays where the user left it while events pour in; the timeline follows new events in its own box,
a toggle the user's scroll turns off), the timeline's icons are text that needs no emoji font, and nothing is wider
than the window with a long timeline, a k = 8 grid of 20 tasks and long unbroken strings from a hostile agent. Saves
battle-live-1280.png and battle-live-390.png through screenshot_path."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import Arena, progress, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_attempt_viewer import running_battle
from tests.support.browser import chromium, screenshot_path, watch_errors

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.browser

K = 8
UNBROKEN = "W" * 600
"""A hostile agent's word without a break opportunity."""
TASKS = [f"retail/test/{i}" for i in range(19)] + ["retail/test/" + "t" * 120]
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")
ICON_LABELS = {"PASS", "FAIL", "INFRA", "START", "RUN"}


def _line(task: str, attempt: int, outcome: str) -> str:
    """The green agent's own text for an attempt_finished event (green_agent/engine/events.py)."""
    if outcome == "success":
        return f"[{task}] ✅ Attempt {attempt}/{K}: SUCCESS (reward=1.0, steps=5, time=3.2s)"
    if outcome == "failure":
        return f"[{task}] ❌ Attempt {attempt}/{K}: FAILED (reward=0.0, steps=5, time=3.2s) [task_incomplete]"
    return f"[{task}] ⚠️ Attempt {attempt}/{K}: INFRASTRUCTURE ERROR (user_simulator_error, user_simulator)"


async def _post(arena: Arena, battle_id: str, body: dict[str, Any]) -> None:
    response = await arena.post(battle_id, body)
    assert response.status_code == 204, response.text


async def _attempts(arena: Arena, battle_id: str, numbers: range, done: list[int]) -> None:
    """Attempts ``numbers`` of every task, each with its start and finish events (hostile text in some)."""
    for attempt in numbers:
        for index, task in enumerate(TASKS):
            outcome = ("success", "failure", "success", "infra_error")[(index + attempt) % 4]
            start = {"type": "attempt_started", "task_key": task, "attempt": attempt}
            await _post(arena, battle_id, progress_event(start, f"[{task}] 🔄 Starting attempt {attempt}/{K}..."))
            detail = attempt_finished(task, attempt, outcome, done=done[0] + 1, total=len(TASKS) * K)
            detail["trajectory"]["messages"][4]["content"] = UNBROKEN
            if outcome == "failure":
                detail["failure_detail"] = "task_incomplete: " + UNBROKEN
            done[0] += 1
            await _post(arena, battle_id, progress_event(detail, _line(task, attempt, outcome)))


async def _hostile(arena: Arena, battle_id: str) -> None:
    """Long unbroken strings wherever an agent's text lands on the page."""
    await _post(arena, battle_id, progress(UNBROKEN, reported_by="r" * 250))
    markdown = f"**{UNBROKEN}** [{'L' * 300}](https://example.invalid/{'p' * 300}) `{'c' * 300}`"
    await _post(arena, battle_id, progress("markdown", markdown_content=markdown))
    await _post(arena, battle_id, progress("detail", detail={"blob": UNBROKEN}))


async def _until(page: Page, script: str) -> None:
    """Poll ``script`` (a function body's expression) until true: the page's CSP forbids wait_for_function's eval.
    Bounded so that a hang fails the test."""
    async with asyncio.timeout(30):
        while not await page.evaluate(f"() => Boolean({script})"):
            await asyncio.sleep(0.05)


async def _layout(page: Page) -> dict[str, Any]:
    return await page.evaluate(  # type: ignore[no-any-return]
        """() => {
          const panel = document.querySelector('#battle-progress .progress-box').getBoundingClientRect();
          const t = document.getElementById('timeline');
          return {
            pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth, scrollY: window.scrollY,
            panelTop: panel.top, innerHeight: window.innerHeight,
            timelineTop: t.scrollTop, timelineEnd: t.scrollTop + t.clientHeight >= t.scrollHeight - 4,
            timelineScrolls: t.scrollHeight > t.clientHeight,
            follow: document.getElementById('timeline-follow').checked,
            wide: Array.from(document.querySelectorAll('body *'))
              .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
              .filter(e => !e.parentElement.closest('table, pre, .timeline, .table-scroll'))
              .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id),
          };
        }"""
    )


async def _check_icons(page: Page) -> None:
    icons = page.locator("#timeline .event-icon")
    assert await icons.count() > 0
    labels = set(await icons.all_inner_texts())
    assert labels <= ICON_LABELS | {"WARN", "STOP", "DONE", "NOTE"} and {"PASS", "FAIL", "INFRA"} <= labels, labels
    for name in await icons.evaluate_all("els => els.map(e => e.getAttribute('aria-label'))"):
        assert name and not EMOJI.search(name)
    heads = await page.locator("#timeline .event-head").all_inner_texts()
    messages = await page.locator("#timeline .event-message").all_inner_texts()
    assert not [text for text in heads + messages if EMOJI.search(text)], "an emoji is still drawn in the timeline"


async def _check_follow(page: Page, arena: Arena, battle_id: str, done: list[int], attempts: range) -> None:
    """Follow is on: new events scroll the timeline box to its end and never the page. Scrolling the box up turns
    it off (new events leave it where the user put it); ticking it follows again."""
    layout = await _layout(page)
    assert layout["follow"] and layout["timelineScrolls"] and layout["timelineEnd"], layout
    assert layout["scrollY"] == 0, f"the page scrolled itself: {layout}"
    assert 0 <= layout["panelTop"] < layout["innerHeight"], f"the progress panel left the window: {layout}"
    await page.locator("#timeline").evaluate("t => { t.scrollTop = t.scrollTop - 300; }")
    await _until(page, "!document.getElementById('timeline-follow').checked")
    kept = (await _layout(page))["timelineTop"]
    count = await page.locator("#timeline > li").count()
    await _attempts(arena, battle_id, attempts, done)
    await _until(page, f"document.querySelectorAll('#timeline > li').length >= {count + 2 * len(TASKS)}")
    layout = await _layout(page)
    assert layout["timelineTop"] == kept and not layout["follow"] and layout["scrollY"] == 0, layout
    await page.locator("#timeline-follow").check()
    await _until(page, "(t => t.scrollTop + t.clientHeight >= t.scrollHeight - 4)(document.getElementById('timeline'))")


async def test_live_battle_page_at_desktop_and_phone_width(arena: Arena, tmp_path: Path) -> None:
    battle_id = await running_battle(arena)
    done = [0]
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page_errors = watch_errors(page)
        await page.goto(f"{arena.backend.url}/ui/battles/{battle_id}")  # a short page: the battle just started
        await page.locator("#live-indicator.live-on").wait_for()
        started = battle_started(TASKS, K)
        await _post(arena, battle_id, progress_event(started, f"🎯 Starting pass@{K} evaluation: 20 task(s) x {K}"))
        await _hostile(arena, battle_id)
        await _attempts(arena, battle_id, range(1, 3), done)
        await page.locator("#progress-done", has_text=f"{done[0]} / {len(TASKS) * K}").wait_for()
        await _until(page, f"document.querySelectorAll('#timeline > li').length >= {4 + 4 * len(TASKS)}")

        assert await page.locator("#live-grid thead th").count() == K + 1
        await _check_follow(page, arena, battle_id, done, range(3, 4))
        await _check_icons(page)
        layout = await _layout(page)
        assert layout["pageWidth"] <= 1280, f"the page overflows at 1280 px: {layout}"
        assert await page.locator("#progress-strip").is_hidden()
        await page.screenshot(path=str(screenshot_path("battle-live-1280.png", tmp_path)), full_page=True)

        await page.set_viewport_size({"width": 390, "height": 844})
        await page.evaluate("window.scrollTo(0, 0)")  # ticking the toggle scrolled it into view; a reload keeps that
        await page.reload()
        await page.locator("#live-indicator.live-on").wait_for()
        layout = await _layout(page)
        assert layout["pageWidth"] <= 390, f"the page overflows at 390 px: {layout}"
        await _check_follow(page, arena, battle_id, done, range(4, 5))
        await _check_icons(page)
        layout = await _layout(page)
        assert layout["pageWidth"] <= 390, f"the page overflows at 390 px after more events: {layout}"
        await page.screenshot(path=str(screenshot_path("battle-live-390.png", tmp_path)), full_page=True)

        # Scrolled down to the end of the page to read the newest events: more events leave the page where it is
        # (they go into the timeline's box), and the counters stay in view as a one-line strip at the top.
        await page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        strip = page.locator("#progress-strip")
        await strip.wait_for()
        assert f"{done[0]} / {len(TASKS) * K}" in await strip.inner_text()
        at_end = (await _layout(page))["scrollY"]
        assert at_end > 0
        count = await page.locator("#timeline > li").count()
        await _attempts(arena, battle_id, range(5, 6), done)
        await _until(page, f"document.querySelectorAll('#timeline > li').length >= {count + 2 * len(TASKS)}")
        await strip.locator(".strip-done", has_text=f"{done[0]} / {len(TASKS) * K}").wait_for()
        assert (await _layout(page))["scrollY"] == at_end, "new events scrolled the page"
        box = await strip.bounding_box()
        assert box is not None and box["y"] == 0 and box["width"] <= 390

        # finished: the result (pass^k table, chart, grid, usage) replaces the live box, still within 390 px
        assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
        await page.locator("#pass-table").wait_for()
        await page.locator("#live-indicator", has_text="battle over").wait_for()
        layout = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert layout[0] <= 390, f"the finished page overflows at 390 px: {layout}"
        assert page_errors == []
