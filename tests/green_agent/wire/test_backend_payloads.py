"""The bodies a green agent posts to a backend: the sink adds each attempt's trajectory (read off the event loop),
keeps the event within the backend's cap, survives bad files; the result body is the one the registry posted."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from battle_backend.battles.json_limits import JsonLimits, check_json_value
from battle_backend.settings import BackendSettings
from green_agent.engine.events import BattleEvent
from green_agent.engine.report import render_markdown, winner_for
from green_agent.service.backend_client import BackendReporter
from green_agent.service.outbox import OUTBOX_FILE, load_outbox
from green_agent.service.running_battles import backend_sink
from green_agent.wire import backend_posts as backend_payloads
from green_agent.wire.backend_posts import (
    MAX_PROGRESS_EVENT_BYTES,
    ProgressPost,
    progress_post_from_run,
    result_post,
    trajectory_budget,
)
from green_agent.wire.trajectory import read_trajectory
from tests.green_agent.engine.results.builders import battle_result
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.support.servers import serve_app

TRAJECTORY = "trajectories/retail-test-0007-attempt01.jsonl"


@dataclass
class FakeReporter:
    """Records what the sink hands the reporter, in order."""

    posts: list[ProgressPost] = field(default_factory=list)

    def progress(self, message: str, *, detail: dict[str, Any], markdown_content: str | None = None) -> None:
        self.posts.append(ProgressPost(message, detail, markdown_content))


def write_trajectory(run_dir: Path, relative: str = TRAJECTORY, messages: int = 6, chars: int = 50) -> Path:
    path = run_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"attempt": {"battle_id": "b", "outcome": "failure"}})]
    for i in range(messages):
        role = "assistant" if i % 2 == 0 else "user"
        lines.append(json.dumps({"role": role, "content": f"{i} " + "c" * chars, "turn_idx": i, "timestamp": None}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def finished(**data: Any) -> BattleEvent:
    base = {"battle_id": "b", "task_key": "retail/test/7", "attempt": 1, "outcome": "failure", "reward": 0.0}
    return BattleEvent(type="attempt_finished", text="[retail/test/7] ❌ Attempt 1/4\n   ↳ Error: x", data=base | data)


def events(trajectory_file: Any = TRAJECTORY) -> list[BattleEvent]:
    return [
        BattleEvent(type="battle_started", text="# started\n\nmarkdown", data={"battle_id": "b"}),
        BattleEvent(type="attempt_started", text="[retail/test/7] 🔄 Starting attempt 1/4...", data={"attempt": 1}),
        finished(trajectory_file=trajectory_file),
        BattleEvent(type="log", text="a note", data={}),
        BattleEvent(type="battle_finished", text="# summary", data={}),
    ]


def backend_measure(body: dict[str, Any]) -> int:
    """The body's size as our backend measures it (raises where the backend would answer 400)."""
    return check_json_value(json.loads(json.dumps(body)), JsonLimits())


def test_the_event_cap_is_the_backend_default() -> None:
    assert BackendSettings().max_event_bytes == MAX_PROGRESS_EVENT_BYTES


async def test_the_sink_adds_the_trajectory_to_attempt_finished_only(tmp_path: Path) -> None:
    path = write_trajectory(tmp_path)
    reporter = FakeReporter()
    sink = backend_sink(reporter, tmp_path)  # type: ignore[arg-type]
    for event in events():
        await sink(event)
    types = [post.detail["type"] for post in reporter.posts]
    assert types == ["battle_started", "attempt_started", "attempt_finished", "log", "battle_finished"]
    with_trajectory = [post.detail["type"] for post in reporter.posts if "trajectory" in post.detail]
    assert with_trajectory == ["attempt_finished"]
    posted = reporter.posts[2]
    assert posted.detail["trajectory"] == read_trajectory(path)
    assert posted.detail["trajectory"]["message_count"] == 6
    assert posted.message == "[retail/test/7] ❌ Attempt 1/4" and posted.markdown_content is None
    assert [post.markdown_content for post in reporter.posts] == [
        "# started\n\nmarkdown",
        None,
        None,
        None,
        "# summary",
    ]


async def test_events_without_the_path_use_the_engine_naming_rule(tmp_path: Path) -> None:
    write_trajectory(tmp_path)
    event = finished()  # no trajectory_file key: an engine from before the key
    assert "trajectory" in progress_post_from_run(event, tmp_path).detail


@pytest.mark.parametrize(
    "trajectory_file", [None, "trajectories/absent.jsonl", "../outside.jsonl", "trajectories/corrupt.jsonl"]
)
async def test_a_missing_or_bad_file_leaves_the_event_without_a_trajectory(
    tmp_path: Path, trajectory_file: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "corrupt.jsonl").write_text('{"attempt": {}}\n{"role": "us', encoding="utf-8")
    (tmp_path / "outside.jsonl").write_text('{"role": "user", "content": "secret"}\n', encoding="utf-8")
    reporter = FakeReporter()
    caplog.set_level(logging.DEBUG, logger="green_agent.wire.trajectory")
    await backend_sink(reporter, tmp_path)(finished(trajectory_file=trajectory_file))  # type: ignore[arg-type]
    (post,) = reporter.posts
    assert "trajectory" not in post.detail
    assert post.detail["task_key"] == "retail/test/7"


async def test_a_bug_in_the_compaction_costs_the_trajectory_not_the_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_trajectory(tmp_path)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(backend_payloads, "trajectory_for_event", broken)
    reporter = FakeReporter()
    await backend_sink(reporter, tmp_path)(finished(trajectory_file=TRAJECTORY))  # type: ignore[arg-type]
    assert "trajectory" not in reporter.posts[0].detail
    assert "is not posted" in caplog.text


async def test_the_file_is_read_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_trajectory(tmp_path)
    threads: list[threading.Thread] = []
    original = backend_payloads.trajectory_for_event

    def spy(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
        threads.append(threading.current_thread())
        return original(*args, **kwargs)

    monkeypatch.setattr(backend_payloads, "trajectory_for_event", spy)
    reporter = FakeReporter()
    sink = backend_sink(reporter, tmp_path)  # type: ignore[arg-type]
    for event in events():
        await sink(event)
    assert len(threads) == 1 and threads[0] is not threading.main_thread()
    assert "trajectory" in reporter.posts[2].detail


def test_the_trajectory_gets_what_the_rest_of_the_event_leaves(tmp_path: Path) -> None:
    write_trajectory(tmp_path, messages=2000, chars=400)  # about 1 MB of conversation
    plain = progress_post_from_run(finished(trajectory_file=TRAJECTORY), tmp_path)
    size = backend_measure(plain.body("2026-11-23T00:00:00Z") | {"event_id": "b:12345678:999999"})
    assert 0.9 * MAX_PROGRESS_EVENT_BYTES < size <= MAX_PROGRESS_EVENT_BYTES
    # A large failure explanation leaves less room: the trajectory shrinks, the event still fits.
    explanation = {"summary": "s", "db": {"differences": [{"expected": "e" * 500, "actual": "a" * 500}] * 150}}
    event = finished(trajectory_file=TRAJECTORY, explanation=explanation)
    post = progress_post_from_run(event, tmp_path)
    assert 0 < len(post.detail["trajectory"]["messages"]) < len(plain.detail["trajectory"]["messages"])
    assert (
        backend_measure(post.body("2026-11-23T00:00:00Z") | {"event_id": "b:12345678:999999"})
        <= MAX_PROGRESS_EVENT_BYTES
    )
    # Nothing useful left: no trajectory at all.
    event = finished(trajectory_file=TRAJECTORY, explanation={"summary": "s" * (MAX_PROGRESS_EVENT_BYTES - 2000)})
    assert trajectory_budget(progress_post_from_run(event, None)) < 4096
    assert "trajectory" not in progress_post_from_run(event, tmp_path).detail


async def test_posted_through_the_reporter_in_order_and_kept_in_the_outbox(tmp_path: Path) -> None:
    write_trajectory(tmp_path, messages=3000, chars=300)
    record = Recorded()
    async with serve_app(make_recording_backend(record)) as url, BackendReporter(url, "b") as reporter:
        await reporter.open_outbox(tmp_path / OUTBOX_FILE)
        sink = backend_sink(reporter, tmp_path)
        for event in events():
            await sink(event)
        assert await reporter.flush(timeout=30)
    posted = [body["detail"]["type"] for body in record.events]
    assert posted == ["battle_started", "attempt_started", "attempt_finished", "log", "battle_finished"]
    trajectory = record.events[2]["detail"]["trajectory"]
    assert trajectory["omitted_messages"] > 0
    assert backend_measure({k: v for k, v in record.events[2].items() if k != "battle_id"}) <= MAX_PROGRESS_EVENT_BYTES
    # The outbox holds the body as posted (its lines are not capped) and reads back.
    state = load_outbox(tmp_path / OUTBOX_FILE)
    assert state.settled == 5 and not state.pending and state.bad_lines == 0
    assert (tmp_path / OUTBOX_FILE).stat().st_size > 200_000


def test_the_result_body_is_the_one_the_registry_posted() -> None:
    result = battle_result()
    post = result_post(result, None, "white_agent")
    assert post.message == f"pass^k evaluation finished: {len(result.attempts)} attempts"
    assert post.winner == winner_for(result, "white_agent")
    assert post.detail == result.model_dump(mode="json")
    assert post.markdown_content == render_markdown(result)
    assert result_post(result, "# given", "w").markdown_content == "# given"
    body = post.body("2026-11-23T00:00:00Z")
    assert body["is_result"] is True and body["reported_by"] == "green_agent" and "event_id" not in body
