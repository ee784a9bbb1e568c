"""The offline demo, end to end through our backend, in headless Chromium (Debian's package, driven by playwright).

What a new user does: ``arena run scenarios/offline_demo.toml --backend URL``, open the battle page, click a failed
attempt and read why it failed. Everything on the page came from the green agent's own posts (AgentBeats-style), so
this checks the whole path: the scoring worker's database diff, the event that carries it with the bounded
trajectory, the backend's viewer. The demo is a calibration battle: the banner is shown and the white agent's ELO
does not move. Saves battle-page.png and attempt-viewer.png (the README's pictures, when
scripts/update_screenshots.sh runs it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.launcher.test_backend_outage import PAGE_RE, _env
from tests.support.backend_process import restartable_backend
from tests.support.browser import chromium, screenshot_path, watch_errors

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUN_LIMIT_S = 600.0


async def _run_demo(backend_url: str, runs: Path) -> tuple[str, str]:
    """``arena run`` of the offline demo through the backend; (battle id, terminal output)."""
    argv = [sys.executable, "-m", "launcher", "run", str(REPO / "scenarios" / "offline_demo.toml")]
    argv += ["--backend", backend_url, "--runs-dir", str(runs)]
    arena = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        async with asyncio.timeout(RUN_LIMIT_S):
            output, _ = await arena.communicate()
    finally:
        if arena.returncode is None:
            arena.kill()
            await arena.wait()
    text = output.decode("utf-8", "replace")
    assert arena.returncode == 0, text
    match = PAGE_RE.search(text)
    assert match is not None, text
    return match["battle_id"], text


def _failed_with_db_diff(run_dir: Path) -> dict[str, Any]:
    """The first task_incomplete attempt of the run, as the green agent recorded it (attempts.jsonl)."""
    for line in (run_dir / "attempts.jsonl").read_text().splitlines():
        attempt: dict[str, Any] = json.loads(line)
        explanation = attempt.get("explanation") or {}
        if (attempt.get("failure") or {}).get("category") == "task_incomplete" and (explanation.get("db") or {}).get(
            "differences"
        ):
            return attempt
    raise AssertionError("the demo produced no task_incomplete attempt with a database difference")


@pytest.mark.timeout(900)
async def test_demo_battle_page_opens_a_failed_attempt_with_its_database_diff(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    async with restartable_backend(tmp_path) as backend:
        battle_id, output = await _run_demo(backend.url, runs)
        assert output.count("Arena pass^k evaluation") == 1, output  # the summary is printed once
        attempt = _failed_with_db_diff(runs / battle_id)
        first_difference = attempt["explanation"]["db"]["differences"][0]
        task_key = f"{attempt['domain']}/{attempt['split']}/{attempt['task_index']}"

        battle = await backend.battle(battle_id)
        white_id = next(op["agent_id"] for op in battle["opponents"] if op["name"] == "white_agent")
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            white = (await http.get(f"{backend.url}/agents/{white_id}")).json()
        assert white["elo"]["rating"] == 1000  # a calibration battle moves no rating
        assert [entry["elo_change"] for entry in white["elo"]["battle_history"]] == [0]

        async with chromium() as browser:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            page_errors = watch_errors(page)
            await page.goto(f"{backend.url}/ui/battles/{battle_id}")
            await page.locator("#attempt-grid").wait_for()
            assert "CALIBRATION" in await page.locator("#result-calibration").inner_text()
            assert "macro pass^4" in await page.locator("#winner-rule").inner_text()
            assert await page.locator("#attempt-grid a.cell-link").count() == 20
            # the top of the page (status, banner, pass^k, chart, attempt grid), not the long timeline below
            await page.set_viewport_size({"width": 1200, "height": 1900})
            await page.screenshot(path=str(screenshot_path("battle-page.png", tmp_path)), full_page=False)

            await page.locator(f'#attempt-grid a[href$="/attempts/{task_key}/{attempt["attempt"]}"]').click()
            await page.locator("#attempt-page").wait_for()
            assert await page.locator("#messages > li").count() >= 2  # the conversation is there
            assert await page.locator("#messages .tool-call, #messages .role-tool").count() >= 1
            diff_row = page.locator("#db-diff tbody tr").first
            row_text = await diff_row.inner_text()
            assert first_difference["table"] in row_text
            assert first_difference["field"] and first_difference["field"] in row_text  # names the field
            assert "task_incomplete" in await page.locator("#attempt-category").inner_text()
            raw = await page.locator("#raw-jsonl").get_attribute("href")
            assert raw is not None and raw.endswith("/trajectory.jsonl")
            await page.screenshot(path=str(screenshot_path("attempt-viewer.png", tmp_path)), full_page=True)
            assert page_errors == []
