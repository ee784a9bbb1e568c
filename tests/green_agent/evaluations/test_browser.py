"""Headless Chromium (Debian's package, driven by playwright, no browser download) on the evaluations page: a CSV
dropped on the page runs live (results appear while a case is still held back), agent text is shown as text only,
and the results download as JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from green_agent.evaluations import EvaluationsSettings
from tests.green_agent.evaluations.conftest import SAMPLE_CSV, green_server, judge_settings, white_agent
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.browser import chromium
from white_agent.finance.agent import FinanceAgent
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply

pytestmark = pytest.mark.browser

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


class GatedFinanceAgent:
    """The scripted finance agent, except that the dividend question waits for the test's go-ahead and one answer
    carries markup that must never run."""

    card_name = card_description = "gated finance"

    def __init__(self, gate: asyncio.Event) -> None:
        self._inner = FinanceAgent()
        self._gate = gate

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        if "dividend" in turn.content:
            await self._gate.wait()
        reply = await self._inner.reply(context_id, turn)
        if "weather" in turn.content:
            return AgentReply(reply.text + " " + HOSTILE, data=reply.data)
        return reply

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_page_uploads_streams_live_and_downloads_json(tmp_path: Path) -> None:
    csv_text = SAMPLE_CSV.read_text(encoding="utf-8")
    total = len(csv_text.strip().splitlines()) - 1
    gate = asyncio.Event()
    settings = EvaluationsSettings(judge=judge_settings(tmp_path))
    async with (
        white_agent(GatedFinanceAgent(gate)) as white,
        green_server(tmp_path, settings) as url,
        chromium() as browser,
    ):
        context = await browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        # the operator opens the page once with the token; the cookie it sets authenticates the page's requests
        await page.goto(f"{url}/evaluations/?token={TEST_OPERATOR_TOKEN}")
        await page.wait_for_function("!window.location.search")
        assert page.url == f"{url}/evaluations/"  # the token left the address bar
        cookies = await context.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in cookies] == [("arena_operator", True, "Strict")]
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
        await page.locator("#sample-hint").wait_for(state="visible")  # /evaluations/config answered
        await page.fill("#agent-url", white)

        # drag and drop the CSV onto the drop zone
        transfer = await page.evaluate_handle(
            """(text) => { const dt = new DataTransfer();
                           dt.items.add(new File([text], 'finance_suite.csv', {type: 'text/csv'}));
                           return dt; }""",
            csv_text,
        )
        await page.dispatch_event("#drop-zone", "drop", {"dataTransfer": transfer})
        await page.locator("#file-name", has_text="finance_suite.csv").wait_for()
        await page.click("#run-button")

        # live: every other case shows its result while the held-back case is still running
        await page.locator("#results tr.case-row[data-status]").nth(total - 2).wait_for()
        assert await page.locator("#summary").is_hidden()
        held = page.locator('#results tr.case-row[data-test-id="fin-011"] .badge')
        assert await held.inner_text() == "running"
        assert await page.locator("#progress-text").inner_text() == f"{total - 1} / {total} cases"
        gate.set()
        await page.locator("#summary[data-done]").wait_for()
        assert await page.locator("#results tr.case-row").count() == total
        assert await page.locator("#results .status-passed").count() == total - 1
        assert await page.locator("#results .status-failed").count() == 1
        assert await page.locator(".overall.score-good").count() == total - 1
        assert await page.locator(".overall.score-bad").count() == 1

        # details: arguments side by side, full response (hostile markup shown as text), judge explanation
        await page.click('tr.case-row[data-test-id="fin-010"]')
        response = page.locator("tr.details-row pre.response")
        assert HOSTILE in await response.inner_text()
        assert await page.locator("tr.details-row img, tr.details-row script").count() == 0
        assert await page.evaluate("window.__pwned") is None
        await page.click('tr.case-row[data-test-id="fin-010"]')
        await page.click('tr.case-row[data-test-id="fin-007"]')
        assert "MSFT" in await page.locator("tr.details-row pre.expected-args").inner_text()
        assert '"price": 425.5' in await page.locator("tr.details-row pre.actual-args").inner_text()
        assert "lexical" in await page.locator("tr.details-row pre.judge-explanation").inner_text()

        async with page.expect_download() as download_info:
            await page.click("#download-button")
        download = await download_info.value
        saved = tmp_path / "results.json"
        await download.save_as(saved)
        results = json.loads(saved.read_text())
        assert results["summary"]["total"] == total and results["summary"]["passed"] == total - 1
        assert [c["test_id"] for c in results["cases"]] == [f"fin-{i:03d}" for i in range(1, total + 1)]
        assert results["agent_url"] == white
        assert errors == []

        # a browser without the cookie gets the 401, not the page
        stranger = await browser.new_context()
        refused = await (await stranger.new_page()).goto(f"{url}/evaluations/")
        assert refused is not None and refused.status == 401
