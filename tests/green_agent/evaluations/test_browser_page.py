"""Headless Chromium (Debian's package, driven by playwright, no browser download) on the evaluations page's
controls: the connector box only with the LLM judge, the pass rate's Wilson interval as ``arena eval-csv`` prints it,
filtering the cases (outcome, text) and sorting them (score, test id).
Saves evaluations-page.png (docs/screenshots when scripts/update_screenshots.sh runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from green_agent.evaluations import EvaluationsSettings
from green_agent.statistics.intervals import wilson_interval
from tests.green_agent.evaluations.conftest import SAMPLE_CSV, finance_agent, green_server, judge_settings
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.browser import chromium, screenshot_path

pytestmark = pytest.mark.browser

FAILING = "fin-002"
"""The case whose expected answer the test changes to a number the agent never says (so one case fails)."""


def suite_with_one_failure() -> tuple[str, list[str]]:
    """The sample suite with fin-002 expecting a price the agent never gives; also its test ids in CSV order."""
    lines = SAMPLE_CSV.read_text(encoding="utf-8").strip().splitlines()
    out = []
    for line in lines:
        if line.startswith(FAILING + ","):
            head, _, _ = line.rpartition(",")
            line = head + ",999.99"
        out.append(line)
    return "\n".join(out) + "\n", [line.split(",", 1)[0] for line in out[1:]]


async def test_connector_interval_filter_and_sort(tmp_path: Path) -> None:
    csv_text, ids = suite_with_one_failure()
    total = len(ids)
    settings = EvaluationsSettings(judge=judge_settings(tmp_path))
    async with finance_agent() as white, green_server(tmp_path, settings) as url, chromium() as browser:
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        page = await context.new_page()
        errors: list[str] = []
        csp: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda msg: csp.append(msg.text) if "Content Security Policy" in msg.text else None)
        await page.goto(f"{url}/evaluations/?token={TEST_OPERATOR_TOKEN}")
        await page.wait_for_function("!window.location.search")
        await page.locator("#sample-hint").wait_for(state="visible")  # /evaluations/config answered

        # the connector box: only while the LLM judge is chosen
        connector = page.locator("#connector-field")
        assert await page.locator("#judge").input_value() == "lexical"
        assert await connector.is_hidden()
        await page.select_option("#judge", "llm")
        assert await connector.is_visible()
        assert await page.locator("#connector").is_editable()
        await page.select_option("#judge", "lexical")
        assert await connector.is_hidden()

        # run the suite
        await page.fill("#agent-url", white)
        transfer = await page.evaluate_handle(
            """(text) => { const dt = new DataTransfer();
                           dt.items.add(new File([text], 'finance_suite.csv', {type: 'text/csv'}));
                           return dt; }""",
            csv_text,
        )
        await page.dispatch_event("#drop-zone", "drop", {"dataTransfer": transfer})
        await page.locator("#file-name", has_text="finance_suite.csv").wait_for()
        await page.click("#run-button")
        await page.locator("#summary[data-done]").wait_for()
        rows = page.locator("#results tr.case-row")
        visible_rows = page.locator("#results tr.case-row:visible")
        assert await rows.count() == total
        assert await page.locator("#shown-count").inner_text() == f"{total} cases"
        statuses = {
            await r.get_attribute("data-test-id"): await r.get_attribute("data-status") for r in await rows.all()
        }
        assert statuses[FAILING] == "failed"
        not_passed = [i for i in ids if statuses[i] != "passed"]
        passed = total - len(not_passed)
        assert 0 < passed < total

        # the pass rate with its interval, in the CLI's words and digits
        interval = wilson_interval(passed, total)
        assert interval is not None
        card = page.locator("#pass-rate-card")
        assert await card.locator(".v").inner_text() == f"{passed / total:.3f}"
        assert await card.locator(".ci").inner_text() == f"95% CI [{interval.low:.3f}, {interval.high:.3f}]"

        # filter by outcome
        async def shown() -> list[str | None]:
            return [await r.get_attribute("data-test-id") for r in await visible_rows.all()]

        await page.select_option("#filter-outcome", "not-passed")
        assert await shown() == not_passed
        assert await page.locator("#shown-count").inner_text() == f"{len(not_passed)} of {total} cases match"
        await page.select_option("#filter-outcome", "failed")
        assert await shown() == [i for i in ids if statuses[i] == "failed"]
        await page.select_option("#filter-outcome", "passed")
        assert await shown() == [i for i in ids if statuses[i] == "passed"]
        await page.select_option("#filter-outcome", "errored")
        assert await visible_rows.count() == 0
        assert "change the filter" in await page.locator("#shown-count").inner_text()
        await page.select_option("#filter-outcome", "all")

        # filter by text: the test id, and the query (case-insensitive)
        await page.fill("#filter-text", "FIN-007")
        assert await shown() == ["fin-007"]
        await page.fill("#filter-text", "dividend")
        with_dividend = [i for i, line in zip(ids, csv_text.splitlines()[1:], strict=True) if "dividend" in line]
        assert with_dividend
        assert await shown() == with_dividend
        # an open details row follows its case out of view and back
        await page.fill("#filter-text", "")
        await page.click('tr.case-row[data-test-id="fin-007"]')
        assert await page.locator("tr.details-row").is_visible()
        await page.fill("#filter-text", "fin-001")
        assert await page.locator("tr.details-row").is_hidden()
        await page.fill("#filter-text", "")
        assert await page.locator("tr.details-row").is_visible()
        await page.click('tr.case-row[data-test-id="fin-007"]')  # closes it
        assert await page.locator("tr.details-row").count() == 0

        # sort: by overall score, by test id, back to the CSV's order
        async def order() -> list[str | None]:
            return [await r.get_attribute("data-test-id") for r in await rows.all()]

        overall = page.locator("#results tr.case-row .overall")
        await page.select_option("#sort-by", "score-asc")
        assert set((await order())[: len(not_passed)]) == set(not_passed)  # below the pass mark: first
        assert await page.locator("#th-overall").get_attribute("aria-sort") == "ascending"
        scores = [float(t) for t in await overall.all_inner_texts()]
        assert scores == sorted(scores)
        await page.select_option("#sort-by", "score-desc")
        assert set((await order())[-len(not_passed) :]) == set(not_passed)
        scores = [float(t) for t in await overall.all_inner_texts()]
        assert scores == sorted(scores, reverse=True)
        await page.select_option("#sort-by", "id-desc")
        assert await order() == sorted(ids, reverse=True)
        assert await page.locator("#th-test").get_attribute("aria-sort") == "descending"
        await page.select_option("#sort-by", "id-asc")
        assert await order() == sorted(ids)
        await page.select_option("#sort-by", "case")
        assert await order() == ids
        assert await page.locator("#th-overall").get_attribute("aria-sort") == "none"

        assert errors == []
        assert csp == []  # nothing the page does is refused by its Content-Security-Policy

        # the page as a user sees it after a run: failing case first, its details open
        await page.select_option("#sort-by", "score-asc")
        await page.click(f'tr.case-row[data-test-id="{FAILING}"]')
        screenshot = screenshot_path("evaluations-page.png", tmp_path)
        await page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 0
