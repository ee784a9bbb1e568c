"""Headless Chromium on the runs home of ``arena view runs/`` and its compare view, at desktop (1280 px) and phone
(390 px) width: the filters and the sort change the rows, a run opens its battle page, two ticked runs open the
statistics of ``arena compare`` (or its refusal), the battle list shows every run's score, and no page is wider
than the window. Saves runs-home-1280.png,
runs-home-390.png, compare-1280.png and compare-390.png through screenshot_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.browser import chromium, screenshot_path, watch_errors
from tests.support.run_folders import sample_folder, serve_home

pytestmark = pytest.mark.browser

WIDTHS = (1280, 390)
NO_OVERFLOW = "document.documentElement.scrollWidth <= window.innerWidth"


async def test_runs_home_filter_sort_open_and_compare(tmp_path: Path) -> None:
    sample_folder(tmp_path / "runs")
    async with serve_home(tmp_path / "runs", tmp_path) as (url, _), chromium() as browser:
        for width in WIDTHS:
            page = await browser.new_page(viewport={"width": width, "height": 900})
            errors = watch_errors(page)
            await page.goto(f"{url}/ui/runs")
            rows = page.locator("#runs-table tbody tr[data-battle-id]")
            assert await rows.count() == 4
            assert await rows.first.get_attribute("data-battle-id") == "retail-new-tau2"  # newest first
            assert await page.evaluate(NO_OVERFLOW), f"the runs home overflows at {width} px"
            await page.screenshot(path=str(screenshot_path(f"runs-home-{width}.png", tmp_path)), full_page=True)

            async with page.expect_navigation():
                await page.select_option("select[name=sort]", "score")  # submits on change (app.js)
            assert await rows.first.get_attribute("data-battle-id") == "retail-v2"
            async with page.expect_navigation():
                await page.select_option("select[name=domain]", "airline")
            assert [await row.get_attribute("data-battle-id") for row in await rows.all()] == ["airline-a"]
            await page.goto(f"{url}/ui/runs")
            await page.fill("input[name=q]", "v1")
            async with page.expect_navigation():
                await page.click("#runs-filter button[type=submit]")
            assert [await row.get_attribute("data-battle-id") for row in await rows.all()] == ["retail-v1"]

            await page.goto(f"{url}/ui/runs")
            async with page.expect_navigation():
                await page.click('tr[data-battle-id="retail-v1"] .run-name a')
            assert "/ui/battles/retail-v1" in page.url
            assert "retail-v1" in await page.locator("h1").first.inner_text()

            await page.goto(f"{url}/ui/runs")
            button = page.locator("#compare-button")
            assert await button.is_disabled()
            await page.check('input[name=run][value="retail-v1"]')
            await page.check('input[name=run][value="retail-v2"]')
            assert await button.is_enabled()
            async with page.expect_navigation():
                await button.click()
            verdict = await page.locator("#compare-verdict h2").inner_text()
            assert "A is better" in verdict or "better" in verdict.lower(), verdict
            assert await page.locator("#compare-per-j tbody tr").count() == 4
            assert "retail-v2" in await page.locator("#compare-runs tbody tr").first.inner_text()  # A: the newer
            assert await page.evaluate(NO_OVERFLOW), f"the compare view overflows at {width} px"
            await page.screenshot(path=str(screenshot_path(f"compare-{width}.png", tmp_path)), full_page=True)

            await page.goto(f"{url}/ui/runs/compare?run=retail-v1&run=retail-new-tau2")
            refusal = await page.locator("#compare-refusal").inner_text()
            assert "not comparable" in refusal and "fingerprints differ" in refusal
            assert await page.evaluate(NO_OVERFLOW)

            await page.goto(f"{url}/")  # the battle list: a score column, a link to the runs home, no overflow
            score = await page.locator('tr[data-battle-id="retail-v2"] td.score').inner_text()
            assert "pass^4 0.900" in score and "[0.73, 0.98]" in score
            assert await page.locator("#runs-home-link a").count() == 1
            assert await page.evaluate(NO_OVERFLOW), f"the battle list overflows at {width} px"
            assert errors == []
            await page.close()
