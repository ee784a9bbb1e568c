"""A resumed battle re-posts to its backend the ``attempt_finished`` event of every attempt the earlier run journaled
but never put in its outbox (a stop between the two), exactly once; those the outbox holds are not posted again."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from green_agent.engine.results import AttemptResult
from green_agent.engine.run_store import ATTEMPTS_FILE
from green_agent.service.outbox import OUTBOX_FILE, OutboxEntry, header_line, mark_line
from green_agent.wire.backend_posts import attempts_in_outbox
from tests.green_agent.service.conftest import assess, white_agent
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.green_agent.service.test_agentbeats_flow import battle_start, send_v03
from tests.green_agent.service.test_restart_resume import CONFIG, crash_copy, restarted_green
from tests.support.servers import serve_app


def write_outbox(run_dir: Path, battle_id: str, delivered: list[tuple[str, int]]) -> None:
    """The outbox of an earlier run that delivered the events of ``delivered`` (and was stopped before the rest)."""
    lines = [header_line(battle_id, "http://127.0.0.1:9/", token_used=False)]
    for seq, (key, attempt) in enumerate(delivered, start=1):
        detail = {"type": "attempt_finished", "battle_id": battle_id, "task_key": key, "attempt": attempt}
        body = {"is_result": False, "message": "earlier", "detail": detail, "event_id": f"{battle_id}:old:{seq}"}
        lines += [OutboxEntry(seq, 1.0, False, json.dumps(body)).line(), mark_line(seq, "delivered", 204)]
    (run_dir / OUTBOX_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_attempts_in_outbox_reads_every_event_and_skips_what_is_not_one(tmp_path: Path) -> None:
    write_outbox(tmp_path, "b1", [("retail/test/0", 1), ("retail/test/1", 2)])
    with (tmp_path / OUTBOX_FILE).open("a", encoding="utf-8") as handle:
        handle.write('not json\n{"type": "event", "body": 3}\n{"type": "event", "seq": 9, "body": {"detail"')
    assert attempts_in_outbox(tmp_path / OUTBOX_FILE) == {("retail/test/0", 1), ("retail/test/1", 2)}
    assert attempts_in_outbox(tmp_path / "absent.jsonl") == set()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_resume_posts_the_events_its_earlier_run_journaled_but_never_sent(
    green_url: str, runs_dir: Path, tmp_path: Path
) -> None:
    battle_id = "backfill-" + uuid.uuid4().hex[:8]
    async with white_agent("replay") as white:
        first = await assess(green_url, white, CONFIG, battle_id=battle_id)
        assert first.completed and first.result is not None
        restarted_runs = tmp_path / "runs"
        run_dir = crash_copy(runs_dir / battle_id, restarted_runs, keep=2)
        journaled = [
            AttemptResult.model_validate_json(line) for line in (run_dir / ATTEMPTS_FILE).read_bytes().splitlines()[:2]
        ]
        sent = (journaled[0].task_key, journaled[0].attempt)
        write_outbox(run_dir, battle_id, [sent])  # the second journaled attempt's event was lost
        record = Recorded()
        async with (
            restarted_green(restarted_runs) as green,
            serve_app(make_recording_backend(record)) as backend,
        ):
            ack = await send_v03(green, battle_start(battle_id, backend, white, json.dumps(CONFIG)))
            assert "accepted" in ack
            await asyncio.wait_for(record.result_seen.wait(), timeout=120)
    finished = [
        (e["detail"]["task_key"], e["detail"]["attempt"])
        for e in record.events
        if not e.get("is_result") and e["detail"].get("type") == "attempt_finished"
    ]
    every = {(a.task_key, a.attempt) for a in map(AttemptResult.model_validate, first.result["attempts"])}
    assert len(finished) == len(set(finished)) == 3, finished  # 2 run now + the lost one; the sent one not again
    assert sent not in finished
    assert {*finished, sent} == every and len(every) == 4
