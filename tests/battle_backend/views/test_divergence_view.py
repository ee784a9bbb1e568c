"""The divergence view of a task (``/ui/battles/{id}/tasks/{task_key}``): the attempts side by side from the posted
trajectories, the first divergence marked (the page's own alignment while live, "not final"; the result's once it
has one), the flip rate, hostile text escaped, bounds, 404s; the links from the grid, the attempt viewer and the
battle page's "least consistent tasks" box; old results without ``consistency`` still render."""

from __future__ import annotations

import copy
from typing import Any

from battle_backend.store.records import BattleRecord, BattleState, EventRecord
from battle_backend.views.divergence import MAX_COLUMNS, MAX_ROWS, divergence_view, task_path
from tests.battle_backend.attempt_samples import XSS_AGENT_TEXT, attempt_finished, battle_started, trajectory
from tests.battle_backend.conftest import Arena, result
from tests.battle_backend.sample_result import battle_result
from tests.battle_backend.views.test_attempt_viewer import page_text, post_detail, running_battle

TASK = "retail/test/0"


def _diverging(detail: dict[str, Any], order_id: str = "#W0000001", *, reply: str | None = None) -> dict[str, Any]:
    """The sample attempt with another order id in its tool call (turn 2), and another reply (turn 3) if given."""
    changed = copy.deepcopy(detail)
    messages = changed["trajectory"]["messages"]
    messages[2]["tool_calls"][0]["arguments"] = {"order_id": order_id}
    if reply is not None:
        messages[4]["content"] = reply
    return changed


def _row(page: str, turn: int) -> str:
    return page.split(f'id="turn-{turn}"', 1)[1].split("</tr>", 1)[0]


async def test_live_battle_aligns_the_attempts_and_marks_the_first_divergence(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, battle_started([TASK], 3))
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "success", done=1))
    await post_detail(arena, battle_id, _diverging(attempt_finished(TASK, 2, "failure", done=2), reply="Done!"))
    await post_detail(arena, battle_id, attempt_finished(TASK, 3, "success", done=3))

    response = await arena.client.get(task_path(battle_id, TASK))
    assert response.status_code == 200
    page = response.text
    text = page_text(page)
    assert "2 of 3 counted attempts succeeded" in text
    assert "0.667" in text  # 2 of the 3 pairs differ
    assert "not final" in text and 'id="not-final"' in page
    assert "turn 2 : attempt #1 (passed) and #2 (failed) take different actions" in text
    assert page.count('class="divergence-row"') == 1 and 'id="turn-2" class="divergence-row"' in page
    # the greeting agrees; the final replies differ in wording only: the same action
    assert 'id="turn-1" class=""' in page and 'id="turn-3" class=""' in page
    assert "#W0000001" in _row(page, 2) and "#W2378156" in _row(page, 2)
    assert "Done!" in _row(page, 3) and "Your order is cancelled." in _row(page, 3)
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert head.count("attempt #") == 3 and "task_incomplete" in head
    assert f'href="/ui/battles/{battle_id}/attempts/{TASK}/2"' in head


async def test_agent_text_is_escaped_and_runs_nothing(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "success"))
    await post_detail(arena, battle_id, attempt_finished(TASK, 2, "failure", hostile=True))
    page = (await arena.client.get(task_path(battle_id, TASK))).text
    grid = page.split('id="divergence-grid"', 1)[1]
    assert "<script>" not in grid and "<svg" not in grid and "<img" not in grid
    assert XSS_AGENT_TEXT.replace("<", "&lt;").split(">")[0] in grid
    assert "&lt;svg onload=" in grid  # the hostile argument, as text


async def test_unknown_battle_task_and_odd_keys_are_404(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "success"))
    assert (await arena.client.get(task_path("nope", TASK))).status_code == 404
    missing = await arena.client.get(task_path(battle_id, "retail/test/9"))
    assert missing.status_code == 404 and "No such task" in missing.text
    assert (await arena.client.get(task_path(battle_id, "retail/%2E%2E/0"))).status_code == 404
    assert (await arena.client.get(task_path(battle_id, "x" * 600))).status_code == 404


def _finished_result(battle_id: str, consistency: dict[str, Any] | None) -> dict[str, Any]:
    body = battle_result(battle_id)
    if consistency is not None:
        body["consistency"] = consistency
    return body


CONSISTENCY = {
    "tasks": 2,
    "mixed_tasks": 2,
    "mean_flip_rate": 0.667,
    "least_consistent": [
        {
            "task_key": "retail/test/0",
            "task_id": "0",
            "attempts": 3,
            "successes": 2,
            "flip_rate": 0.667,
            "first_divergence": {"turn": 3, "passing_attempt": 1, "failing_attempt": 2},
            "attempts_compared": 3,
        },
        {
            "task_key": "retail/test/1",
            "task_id": "1",
            "attempts": 2,
            "successes": 1,
            "flip_rate": 1.0,
            "first_divergence": None,
            "attempts_compared": 0,
        },
        {"task_key": "../../evil", "flip_rate": 1.0},
        {"task_key": "<b>x</b>", "flip_rate": "high"},
    ],
    "not_listed": 0,
}


async def test_finished_battle_takes_the_results_figures_and_links_everywhere(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    await post_detail(arena, battle_id, attempt_finished(TASK, 1, "success"))
    await post_detail(arena, battle_id, _diverging(attempt_finished(TASK, 2, "failure")))
    await post_detail(arena, battle_id, attempt_finished(TASK, 3, "success"))
    posted = await arena.post(battle_id, result("white_agent", _finished_result(battle_id, CONSISTENCY)))
    assert posted.status_code == 204
    await arena.wait_state(battle_id, "finished")

    page = (await arena.client.get(task_path(battle_id, TASK))).text
    text = page_text(page)
    assert 'id="not-final"' not in page and "the battle's result" in text
    assert "turn 3 : attempt #1 (passed) and #2 (failed)" in text  # the result's turn, not the page's (2)
    assert 'id="turn-3" class="divergence-row"' in page and 'id="turn-2" class="differs-row"' in page

    battle_page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    box = battle_page.split('id="consistency-box"', 1)[1].split("</section>", 1)[0]
    assert f'href="{task_path(battle_id, TASK)}"' in box and "turn 3" in box
    assert f'href="{task_path(battle_id, "retail/test/1")}"' in box and "none found" in box
    assert "evil" not in box and "&lt;b&gt;" not in box  # unlinkable key and non-numeric rate left out
    grid = battle_page.split('id="attempt-grid"', 1)[1].split("</table>", 1)[0]
    assert f'class="task-link" href="{task_path(battle_id, "retail/test/1")}"' in grid

    viewer = (await arena.client.get(f"/ui/battles/{battle_id}/attempts/{TASK}/2")).text
    assert f'href="{task_path(battle_id, TASK)}"' in viewer


async def test_old_results_without_consistency_still_render(arena: Arena) -> None:
    battle_id = await running_battle(arena)
    assert (await arena.post(battle_id, result("white_agent", _finished_result(battle_id, None)))).status_code == 204
    await arena.wait_state(battle_id, "finished")
    battle_page = await arena.client.get(f"/ui/battles/{battle_id}")
    assert battle_page.status_code == 200 and 'id="consistency-box"' not in battle_page.text
    page = await arena.client.get(task_path(battle_id, "retail/test/1"))
    assert page.status_code == 200
    text = page_text(page.text)
    assert "carries no consistency figures" in text and "not final" not in text
    assert "1 of 2 counted attempts succeeded" in text and "1.000" in text  # the infrastructure error not counted
    assert "No conversation was posted" in text


def _record(events: list[dict[str, Any]]) -> BattleRecord:
    return BattleRecord(
        battle_id="b-1",
        green_agent_id="g",
        opponents=[],
        config={},
        state=BattleState.RUNNING,
        created_at="2026-11-27T00:00:00Z",
        last_seq=len(events),
        events=[
            EventRecord(battle_id="b-1", seq=i, payload={"is_result": False, "detail": d}, received_at="")
            for i, d in enumerate(events, start=1)
        ],
    )


def test_columns_and_turns_are_bounded() -> None:
    long = trajectory()
    long["messages"] = [{"role": "assistant", "content": f"m{i}"} for i in range(MAX_ROWS + 20)]
    details = [
        dict(attempt_finished(TASK, n, "success" if n % 2 else "failure"), trajectory=long) for n in range(1, 71)
    ]
    view = divergence_view(_record(details), TASK)
    assert view is not None
    assert len(view.columns) == MAX_COLUMNS and view.attempts_not_shown == 70 - MAX_COLUMNS
    assert len(view.rows) == MAX_ROWS and view.turns_not_shown == 20
    assert view.divergence_turn is None  # every turn a reply: the same action everywhere
    assert any("more attempt(s) are not shown" in note for note in view.notes)


def test_hostile_trajectories_never_break_the_view() -> None:
    odd: list[Any] = [
        None,
        "text",
        {"messages": "no"},
        {"messages": [None, 1, {"role": "assistant", "tool_calls": "x"}, {"role": "assistant", "tool_calls": [7]}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"name": {"a": 1}, "arguments": [float("inf")]}]}]},
    ]
    details = [dict(attempt_finished(TASK, n, "failure"), trajectory=t) for n, t in enumerate(odd, start=1)]
    view = divergence_view(_record(details), TASK)
    assert view is not None and len(view.columns) == len(odd)
    assert divergence_view(_record(details), "retail/test/1") is None
