"""An attempt's trajectory is posted from memory: the battle lends its messages to the event's sinks (never to the
event's JSON, never kept after the delivery), and the backend post is built from them without reading the file;
``arena view`` and re-emitted events still read the file. Same posted object either way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.events import BattleEvent
from green_agent.wire import backend_posts
from green_agent.wire.backend_posts import progress_post_for, progress_post_from_run

TRAJECTORY = "trajectories/retail-test-0007-attempt01.jsonl"


def messages(count: int = 6) -> list[dict[str, Any]]:
    return [
        {"role": "assistant" if i % 2 == 0 else "user", "content": f"{i} " + "c" * 50, "turn_idx": i, "timestamp": None}
        for i in range(count)
    ]


def finished() -> BattleEvent:
    data = {"battle_id": "b", "task_key": "retail/test/7", "attempt": 1, "outcome": "failure", "reward": 0.0}
    return BattleEvent(
        type="attempt_finished", text="[retail/test/7] ❌ Attempt 1/4", data=data | {"trajectory_file": TRAJECTORY}
    )


def write_file(run_dir: Path, records: list[dict[str, Any]]) -> None:
    path = run_dir / TRAJECTORY
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"attempt": {"battle_id": "b", "outcome": "failure"}}
    path.write_text("\n".join(json.dumps(r) for r in [header, *records]) + "\n", encoding="utf-8")


@pytest.mark.asyncio
async def test_the_trajectory_an_event_carries_is_posted_without_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_file(tmp_path, messages())
    from_file = progress_post_from_run(finished(), tmp_path)

    def no_disk(*_: Any, **__: Any) -> None:
        raise AssertionError("the trajectory file was read although the event carried the trajectory")

    monkeypatch.setattr(backend_posts, "trajectory_for_event", no_disk)
    event = finished()
    event.carry_trajectory(tuple(messages()))
    from_memory = await progress_post_for(event, tmp_path)
    assert from_memory.detail["trajectory"] == from_file.detail["trajectory"]
    assert from_memory.detail["trajectory"]["message_count"] == 6
    assert "trajectory" not in event.wire() and "_trajectory" not in event.model_dump(mode="json")
    # Without a run directory (a battle that writes none) the carried trajectory is still posted.
    assert "trajectory" in (await progress_post_for(event, None)).detail


@pytest.mark.asyncio
async def test_without_a_carried_trajectory_the_file_is_read(tmp_path: Path) -> None:
    write_file(tmp_path, messages(3))
    post = await progress_post_for(finished(), tmp_path)
    assert post.detail["trajectory"]["message_count"] == 3
