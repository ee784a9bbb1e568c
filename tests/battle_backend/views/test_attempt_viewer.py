"""The attempt viewer over HTTP: conversation with tool calls and latency, the failure explanation down to the
database field, agent text escaped, the raw JSONL, 404s, the result-only fallback, grid links and the filter."""

from __future__ import annotations

import html
import json
import re

from tests.battle_backend.attempt_samples import (
    XSS_AGENT_TEXT,
    attempt_finished,
    battle_started,
    progress_event,
    trajectory,
)
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_rendering import unsafe

TASK = "retail/test/0"


def page_text(page: str) -> str:
    """What a reader sees of the page's main part: tags removed, entities decoded, whitespace collapsed."""
    main = page.split("<main", 1)[1] if "<main" in page else page
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", main)))


def viewer(battle_id: str, task_key: str = TASK, attempt: int = 1) -> str:
    return f"/ui/battles/{battle_id}/attempts/{task_key}/{attempt}"


async def running_battle(arena: Arena) -> str:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    return battle_id


async def post_detail(arena: Arena, battle_id: str, detail: dict[str, object]) -> None:
    response = await arena.post(battle_id, progress_event(detail))
    assert response.status_code == 204, response.text


async def test_viewer_shows_the_conversation_and_the_explanation(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, battle_started([TASK, "retail/test/1"], 2))
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "failure", done=1))
    await post_detail(arena, battle_id, attempt_finished(TASK, 2, "success", done=2))

    response = await arena.client.get(viewer(battle_id))
    assert response.status_code == 200
    page = response.text
    text = page_text(page)
    assert f"Attempt 1 of {TASK}" in text
    assert "failure" in text and "task_incomplete" in text and "white_agent" in text and "3.2 s" in text
    # the explanation, above the conversation
    assert page.index('id="explanation"') < page.index('id="messages"')
    diff = page_text(page.split('id="db-diff"', 1)[1].split("</table>", 1)[0])
    assert "orders" in diff and "#W2378156" in diff and "status" in diff
    assert '"cancelled"' in diff and '"pending"' in diff and "value differs" in diff
    assert "your refund of $54.04 is on its way" in text
    assert "cancel_pending_order" in text and '"order_id": "#W2378156-x"' in text and "at turn 7" in text
    assert "assert_mobile_data_status" in text
    # the conversation: every message with step, role, latency; the tool call's arguments and its result
    assert page.count('class="message role-') == 5
    assert "turn 2" in text and "white agent" in text and "+0.412 s" in text and "+1.250 s" in text
    assert "Please cancel order #W2378156." in text
    assert "calls get_order_details" in text and '"order_id": "#W2378156"' in text
    assert "tool result of get_order_details" in text and '{"status": "pending"}' in text
    # navigation
    assert f'href="{viewer(battle_id)}/trajectory.jsonl"' in page
    assert f'href="{viewer(battle_id, TASK, 2)}"' in page  # next attempt
    assert 'id="attempt-prev"' not in page


async def test_agent_text_is_escaped_everywhere(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "failure", hostile=True))
    page = (await arena.client.get(viewer(battle_id))).text
    main = page.split("<main", 1)[1]
    assert unsafe(main) == []  # no script element, no on* attribute, no javascript: URL
    assert "<script>window.__pwned" not in page and "<img" not in main and "<svg" not in main
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page  # the tool result, as text
    assert "&lt;script&gt;window.__pwned = 3&lt;/script&gt;" in page  # the agent's message, as text
    assert "&lt;svg onload=" in page  # a tool argument
    assert "&lt;img src=x onerror=window.__pwned=6&gt;" in page  # an explanation value
    assert XSS_AGENT_TEXT in page_text(page)
    assert 'class="badge badge-error"' in page  # the tool result's error flag


async def test_raw_jsonl(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    detail = attempt_finished(TASK, 1, "failure")
    await post_detail(arena, battle_id, detail)
    response = await arena.client.get(viewer(battle_id) + "/trajectory.jsonl")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    disposition = response.headers["content-disposition"]
    assert disposition.startswith("attachment;") and re.search(r'filename="[A-Za-z0-9._-]+\.jsonl"', disposition)
    lines = [json.loads(line) for line in response.text.splitlines()]
    head = {key: value for key, value in detail.items() if key != "trajectory"}
    assert lines[0] == head
    assert lines[1:] == trajectory()["messages"]


async def test_unknown_attempts_and_battles_are_404(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "success"))
    for path in (viewer(battle_id, TASK, 2), viewer(battle_id, "retail/test/9"), viewer(battle_id) + "x"):
        response = await arena.client.get(path)
        assert response.status_code == 404, path
    missing = await arena.client.get(viewer(battle_id, TASK, 3))
    assert "No such attempt" in missing.text and f"/ui/battles/{battle_id}" in missing.text
    assert (await arena.client.get(viewer(battle_id, TASK, 3) + "/trajectory.jsonl")).status_code == 404
    assert (await arena.client.get(viewer("nope"))).status_code == 404


async def test_result_only_attempts_fall_back_to_the_battle_result(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
    response = await arena.client.get(viewer(battle_id, "retail/test/1", 1))
    assert response.status_code == 200
    text = page_text(response.text)
    assert "format_error" in text and "no <json> block <b>x</b>" in text
    assert 'id="no-trajectory"' in response.text
    lines = (await arena.client.get(viewer(battle_id, "retail/test/1", 1) + "/trajectory.jsonl")).text.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["failure"]["category"] == "format_error"


async def test_grid_cells_link_to_the_viewer_and_speak(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "failure"))
    assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    grid = page.split('id="attempt-grid"', 1)[1].split("</table>", 1)[0]
    assert grid.count('class="cell-link"') == 6
    assert f'href="{viewer(battle_id, "retail/test/1", 2)}"' in grid
    assert "attempt 2 of retail/test/1: infrastructure error, user_simulator_error" in page_text(grid)
    assert "attempt 1 of retail/test/0: success" in page_text(grid)
    # the timeline entry of the attempt links to it, without its 5-message trajectory inline
    assert f'class="event-attempt" href="{viewer(battle_id)}"' in page
    assert "Please cancel order" not in page


async def test_filter_by_outcome_category_and_task_without_script(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    assert (await arena.post(battle_id, result("white_agent", battle_result(battle_id)))).status_code == 204
    url = f"/ui/battles/{battle_id}"

    def grid_of(page: str) -> str:
        return page.split('id="attempt-grid"', 1)[1].split("</table>", 1)[0]

    unfiltered = grid_of((await arena.client.get(url)).text)
    assert "filtered-out" not in unfiltered and " hidden" not in unfiltered
    failures = grid_of((await arena.client.get(url, params={"outcome": "failure"})).text)
    assert failures.count("cell outcome-success filtered-out") == 3
    assert 'class="cell outcome-failure"' in failures
    category = grid_of((await arena.client.get(url, params={"category": "user_simulator_error"})).text)
    assert category.count('class="cell outcome-infra_error"') == 1
    assert '<tr data-task="retail/test/0" hidden>' in category
    page = (await arena.client.get(url, params={"task": "retail/test/1"})).text
    assert '<tr data-task="retail/test/0" hidden>' in grid_of(page)
    assert '<option value="retail/test/1" selected>' in page
    assert '<option value="format_error">' in page


async def test_viewer_bounds_what_it_renders(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    detail = attempt_finished(TASK, 1, "failure")
    many = [{"step": i, "role": "user", "content": f"m{i}"} for i in range(2500)]
    many[0]["content"] = "x" * 30_000
    detail["trajectory"] = {**trajectory(), "messages": many, "message_count": 2600, "omitted_messages": 100}
    await post_detail(arena, battle_id, detail)
    page = (await arena.client.get(viewer(battle_id))).text
    assert page.count('class="message role-') == 2000
    assert "500 more message(s) are not shown" in page and 'id="omitted-note"' in page
    assert "x" * 20_000 not in page and "x" * 19_999 + "…" in page
    lines = (await arena.client.get(viewer(battle_id) + "/trajectory.jsonl")).text.splitlines()
    assert len(lines) == 2501  # the raw JSONL has every posted message
