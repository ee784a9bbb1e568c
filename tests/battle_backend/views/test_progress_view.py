"""The live progress of a running battle: the pure fold over its events (counters, pass^1 so far with its Wilson
interval, ETA, per-task strip), and the same box pushed over SSE as the green agent's events arrive."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from battle_backend.battles.tolerant import DASH
from battle_backend.store.records import EventRecord
from battle_backend.views.progress import ProgressTracker, duration_text, live_progress, wilson_interval
from tests.battle_backend.attempt_samples import attempt_finished, battle_started, progress_event
from tests.battle_backend.conftest import Arena
from tests.battle_backend.views.test_live_updates import Sse, read_sse

T0 = datetime(2026, 11, 23, 1, 0, 0, tzinfo=UTC)
TASKS = ["retail/test/0", "retail/test/1"]


def event(seq: int, detail: dict[str, Any] | None, seconds: float) -> EventRecord:
    payload: dict[str, Any] = {"is_result": False, "message": "m", "reported_by": "green_agent"}
    if detail is not None:
        payload["detail"] = detail
    received = (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
    return EventRecord(battle_id="b", seq=seq, payload=payload, received_at=received)


def finished(task: str, attempt: int, outcome: str, seconds: float, total: int = 10) -> EventRecord:
    return event(attempt * 10 + TASKS.index(task), attempt_finished(task, attempt, outcome, total=total), seconds)


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [  # hand-computed: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), z = 1.959964
        (3, 4, 0.300642, 0.954413),
        (0, 5, 0.0, 0.434482),
        (5, 5, 0.565518, 1.0),
        (1, 2, 0.094531, 0.905469),
        (7, 10, 0.396778, 0.892209),
    ],
)
def test_wilson_interval(successes: int, n: int, low: float, high: float) -> None:
    interval = wilson_interval(successes, n)
    assert interval is not None
    assert interval == pytest.approx((low, high), abs=1e-6)


def test_wilson_interval_of_nothing() -> None:
    assert wilson_interval(0, 0) is None


def test_counters_pass1_and_eta() -> None:
    events = [
        event(1, None, 0),  # the backend's own "Battle started" entry
        event(2, battle_started(TASKS, 5), 0),
        event(3, {"type": "attempt_started", "task_key": TASKS[0], "attempt": 1}, 10),
        finished(TASKS[0], 1, "success", 30),
        finished(TASKS[0], 2, "success", 40),
        finished(TASKS[1], 1, "failure", 50),
        finished(TASKS[1], 2, "infra_error", 60),
        finished(TASKS[0], 3, "success", 70),
    ]
    progress = live_progress(events, now=T0 + timedelta(seconds=70), running=True)
    assert (progress.done, progress.total, progress.done_text) == (5, 10, "5 / 10")
    assert (progress.successes, progress.failures, progress.infra_errors, progress.scored) == (3, 1, 1, 4)
    assert progress.pass1 == 0.75
    assert progress.pass1_text == "0.750 [0.301, 0.954]"
    # 60 s since the first attempt event for 5 attempts, 5 left: 60 s more
    assert progress.eta_s == pytest.approx(60.0)
    assert progress.eta_text == "1 min 00 s"
    assert [row.task_key for row in progress.rows] == TASKS
    assert progress.max_attempt == 5
    first = progress.rows[0].cells
    assert [cell.outcome if cell else None for cell in first] == ["success", "success", "success", None, None]
    second = progress.rows[1].cells
    assert second[0] is not None and (second[0].outcome, second[0].category) == ("failure", "task_incomplete")
    assert second[1] is not None and second[1].outcome_words == "infrastructure error"


def test_eta_is_a_dash_until_an_attempt_is_done_and_done_at_the_end() -> None:
    started = [event(1, battle_started(TASKS, 1), 0)]
    progress = live_progress(started, now=T0 + timedelta(seconds=5), running=True)
    assert progress.known and progress.done == 0 and progress.eta_text == DASH and progress.pass1_text == DASH
    done = [*started, finished(TASKS[0], 1, "success", 10, total=2), finished(TASKS[1], 1, "failure", 20, total=2)]
    assert live_progress(done, now=T0 + timedelta(seconds=30), running=True).eta_text == "done"
    half = done[:2]
    assert live_progress(half, now=T0 + timedelta(seconds=30), running=False).eta_text == DASH  # not running


def test_an_attempt_reported_twice_counts_once_and_the_last_report_wins() -> None:
    events = [
        event(1, battle_started(TASKS[:1], 2), 0),
        finished(TASKS[0], 1, "failure", 10, total=2),
        event(9, attempt_finished(TASKS[0], 1, "success", total=2), 20),
    ]
    progress = live_progress(events, now=T0 + timedelta(seconds=20), running=True)
    assert progress.done == 1 and progress.successes == 1 and progress.failures == 0


def test_other_battles_get_no_progress_box() -> None:
    events = [event(1, None, 0), event(2, {"score": 1}, 1), event(3, "text", 2)]  # type: ignore[arg-type]
    progress = live_progress(events, now=T0, running=True)
    assert not progress.known


def test_hostile_details_are_ignored_or_bounded() -> None:
    tracker = ProgressTracker()
    hostile = [
        {"type": "battle_started", "attempts_total": -5, "k": 10**9, "tasks": [1, None, "x" * 10_000, "ok"]},
        {"type": "attempt_finished", "task_key": ["a"], "attempt": 1, "outcome": "success"},
        {"type": "attempt_finished", "task_key": "ok", "attempt": True, "outcome": "success"},
        {"type": "attempt_finished", "task_key": "ok", "attempt": 10**9, "outcome": "success"},
        {"type": "attempt_finished", "task_key": "ok", "attempt": 1, "outcome": "<b>won</b>", "done": "many"},
    ]
    changed = [tracker.add(event(i, detail, i)) for i, detail in enumerate(hostile, start=1)]
    assert changed == [True, False, False, False, True]
    progress = tracker.snapshot(now=T0, running=True)
    assert progress.total is None and progress.done == 1
    assert [row.task_key for row in progress.rows] == ["ok"]
    cell = progress.rows[0].cells[0]
    assert cell is not None and cell.outcome == "unknown" and progress.max_attempt == 1


def test_duration_text() -> None:
    assert [duration_text(s) for s in (0, 44.6, 60, 200, 3600 * 2 + 300)] == [
        "0 s",
        "45 s",
        "1 min 00 s",
        "3 min 20 s",
        "2 h 05 min",
    ]


async def test_progress_box_is_pushed_over_sse(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="battle-progress"></section>' in page  # no Arena events yet: no box
    collected: list[Sse] = []
    seen = asyncio.Event()

    async def listen() -> None:
        async with arena.client.stream("GET", f"/battles/{battle_id}/events", params={"since": 0}) as response:
            async for sse in read_sse(response):
                collected.append(sse)
                if sse.event == "battle_progress" and json.loads(sse.data)["done_text"] == "2 / 4":
                    seen.set()
                    return

    listener = asyncio.create_task(listen())
    details = [
        battle_started(TASKS, 2),
        attempt_finished(TASKS[0], 1, "success", done=1),
        attempt_finished(TASKS[1], 1, "failure", done=2),
    ]
    for detail in details:
        assert (await arena.post(battle_id, progress_event(detail))).status_code == 204
    async with asyncio.timeout(30):
        await listener
    assert seen.is_set()
    pushes = [json.loads(s.data) for s in collected if s.event == "battle_progress"]
    last = pushes[-1]
    assert last["done"] == 2 and last["total"] == 4 and last["pass1_text"].startswith("0.500 [")
    assert 'id="progress-done">2 / 4<' in last["html"] and 'id="live-grid"' in last["html"]
    assert f"/ui/battles/{battle_id}/attempts/{TASKS[1]}/1" in last["html"]
    assert "attempt 2 of retail/test/0: not finished yet" in last["html"]
    # the timeline's copy of the event carries a stub instead of the trajectory
    streamed = [json.loads(s.data)["event"] for s in collected if s.event == "battle_event"]
    finished_events = [e for e in streamed if e.get("detail", {}).get("type") == "attempt_finished"]
    assert finished_events and all(e["detail"]["trajectory"]["messages"] == 5 for e in finished_events)
    # a reload renders the same box server-side
    page = (await arena.client.get(f"/ui/battles/{battle_id}")).text
    assert 'id="progress-done">2 / 4<' in page and "pass^1 so far (scored attempts, Wilson 95%)" in page


def test_the_live_strip_is_bounded() -> None:
    tasks = [f"t/{i}" for i in range(3000)]
    events = [event(1, battle_started(tasks[:1], 200), 0)]
    events += [event(i + 2, attempt_finished(task, 1, "success", total=10**6), 1) for i, task in enumerate(tasks)]
    progress = live_progress(events, now=T0, running=True)
    assert progress.max_attempt == 200 and len(progress.rows) == 5 and progress.tasks_not_shown == 2995
    assert progress.done == 3000


def test_a_resume_into_the_same_battle_restarts_the_eta_clock() -> None:
    """A green agent restarted under the battle posts battle_started again: the downtime and the attempts of the
    earlier run must not enter the rate (here 2 h down; 10 s per attempt after the resume)."""
    events = [
        event(1, battle_started(TASKS, 5), 0),
        finished(TASKS[0], 1, "success", 10),
        finished(TASKS[0], 2, "success", 20),
        event(40, {**battle_started(TASKS, 5), "resumed_attempts": 2}, 7200),
        finished(TASKS[1], 1, "success", 7210),
    ]
    progress = live_progress(events, now=T0 + timedelta(seconds=7210), running=True)
    assert progress.done == 3
    # the clock restarts at the resumed run's first attempt event (7210 s): 0 s for 1 attempt would say "0 s"; the
    # earlier run's clock would have said 7210 s / 3 attempts x 7 left = about 4.7 h
    assert progress.eta_s is not None and progress.eta_s < 60


def test_a_task_key_with_dot_segments_gets_no_link() -> None:
    events = [
        event(1, battle_started(TASKS, 1), 0),
        event(2, attempt_finished("../../../../battles/x", 1, "failure", total=2), 10),
        finished(TASKS[0], 1, "success", 20, total=2),
    ]
    progress = live_progress(events, now=T0 + timedelta(seconds=20), running=True)
    assert "../../../../battles/x" not in [row.task_key for row in progress.rows]


def skipped(seq: int, task: str, attempts: Any, seconds: float) -> EventRecord:
    detail = {"type": "attempts_skipped", "task_key": task, "failed_attempt": 1, "attempts": attempts}
    return event(seq, detail, seconds)


def test_attempts_a_certify_battle_skipped_leave_the_total_and_say_so() -> None:
    """A pass^k certify battle skips a task's remaining attempts at its first failure (``attempts_skipped``): they
    never finish, so the box's total, ETA and "done" leave them out and its counter says how many were skipped."""
    events = [
        event(1, battle_started(TASKS, 4), 0),
        finished(TASKS[0], 1, "failure", 10, total=8),
        skipped(2, TASKS[0], [2, 3, 4], 10),
        skipped(3, TASKS[0], [2, 3, 4], 11),  # told again (a resume after a kill): counted once
        finished(TASKS[1], 1, "success", 20, total=8),
    ]
    progress = live_progress(events, now=T0 + timedelta(seconds=20), running=True)
    assert (progress.done, progress.total, progress.skipped) == (2, 5, 3)
    assert progress.done_text == "2 / 5 (3 skipped by certify: their task's pass^k was already 0)"
    assert progress.eta_s == pytest.approx(15.0)  # 10 s since the first attempt event for 2, 3 left (not 6)
    rest = [finished(TASKS[1], a, "success", 20 + a, total=8) for a in (2, 3, 4)]
    assert live_progress([*events, *rest], now=T0 + timedelta(seconds=30), running=True).eta_text == "done"


def test_a_hostile_or_unverified_skip_changes_nothing() -> None:
    tracker = ProgressTracker()
    tracker.add(event(1, battle_started(TASKS, 4), 0))
    hostile: list[Any] = [[10**9, True, "2", None], "2,3", None, list(range(1, 5000))]
    assert [tracker.add(skipped(i, TASKS[0], a, i)) for i, a in enumerate(hostile, start=2)] == [
        False,
        False,
        False,
        True,
    ]
    assert tracker.snapshot(now=T0, running=True).skipped == 4  # attempts 1..k only (k = 4)
    assert not tracker.add(skipped(9, ["x"], [2], 9))  # type: ignore[arg-type]
    unverified = skipped(10, TASKS[1], [2, 3], 10)
    tracker2 = ProgressTracker()
    tracker2.add(event(1, battle_started(TASKS, 4), 0))
    posted = dataclasses.replace(unverified, verified=False)
    assert not tracker2.add(posted)
    assert tracker2.snapshot(now=T0, running=True).skipped == 0
