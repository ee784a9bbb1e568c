"""Group commit in the SQLite store: writes that arrive together share one transaction, each keeps its own fate.

The batches here are made deterministic, not timed: a first write holds the writer thread on a gate (a
threading.Event) while the test queues the writes of interest, so they are all waiting when the gate opens and are
committed as one batch (the writer takes everything queued, up to MAX_BATCH).
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest

from battle_backend.__main__ import build_parser, settings_from_args
from battle_backend.battles.api_models import ApiError, BattleEvent
from battle_backend.battles.service import BattleService
from battle_backend.live.hub import LiveHub
from battle_backend.settings import BackendSettings
from battle_backend.store.protocol import BattleClosed, DuplicateEvent, WriteFailed
from battle_backend.store.records import BattleState, EventRecord, FinishSpec
from battle_backend.store.sqlite.store import SQLiteStore
from battle_backend.store.sqlite.writer import GroupCommitWriter

TOKEN = "secret-token"


class FailingCommits(GroupCommitWriter):
    """A writer whose batch number ``fail_batch`` fails to commit, as with a full disk (the batch is rolled back)."""

    fail_batch = 0

    def commit(self, conn: sqlite3.Connection) -> None:
        if self.batches == self.fail_batch:
            raise sqlite3.OperationalError("database or disk is full")
        super().commit(conn)


class FailingStore(SQLiteStore):
    """The SQLite store with :class:`FailingCommits` as its writer."""

    def _make_writer(self) -> GroupCommitWriter:
        return FailingCommits(self._connection)


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[FailingStore]:
    opened = FailingStore(db_path)
    await opened.open()
    yield opened
    await opened.close()


async def _running_battle(store: SQLiteStore) -> str:
    green = await store.create_agent({"alias": "g", "is_green": True, "participant_requirements": []}, {"name": "G"})
    white = await store.create_agent({"alias": "w", "is_green": False}, {"name": "W"})
    battle = await store.create_battle(
        green.agent_id, [{"name": "white_agent", "agent_id": white.agent_id, "role": "blue_agent"}], {}, None
    )
    await store.start_battle(battle.battle_id, TOKEN)
    return battle.battle_id


async def one_batch(store: SQLiteStore, *writes: Awaitable[Any], fail_commit: bool = False) -> list[Any]:
    """Run ``writes`` as one group transaction (whose commit fails with ``fail_commit``): each result, or the
    exception it raised, in order."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_conn: sqlite3.Connection) -> bool:
        entered.set()
        return gate.wait(30)

    held = asyncio.create_task(store.writer.write(hold))
    assert await asyncio.to_thread(entered.wait, 30)  # the writer is inside the gate's batch
    batches_before = store.writer.batches
    if fail_commit:
        assert isinstance(store.writer, FailingCommits)
        store.writer.fail_batch = batches_before + 1
    tasks = [asyncio.ensure_future(write) for write in writes]
    await asyncio.sleep(0)  # every write runs up to its queue entry: all wait behind the gate
    gate.set()
    assert await held
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert store.writer.batches == batches_before + 1, "the writes were not committed as one batch"
    return results


def progress(text: str, **extra: Any) -> dict[str, Any]:
    return {"is_result": False, "message": text, **extra}


async def test_concurrent_posts_share_transactions_and_keep_contiguous_order(store: FailingStore) -> None:
    battle_id = await _running_battle(store)
    before = (await store.get_battle(battle_id, include_events=False)).last_seq  # type: ignore[union-attr]

    async def poster(number: int) -> list[int]:
        seqs = []
        for index in range(25):
            record = await store.append_event(battle_id, progress(f"{number}-{index}", poster=number, index=index))
            seqs.append(record.seq)
        return seqs

    units_before, batches_before = store.writer.units, store.writer.batches
    answered = await asyncio.gather(*(poster(n) for n in range(20)))
    events = await store.list_events(battle_id)
    assert [e.seq for e in events] == list(range(1, before + 20 * 25 + 1))
    posted = [(e.payload["poster"], e.payload["index"]) for e in events if "poster" in e.payload]
    assert sorted(posted) == [(n, i) for n in range(20) for i in range(25)]
    for number, seqs in enumerate(answered):
        assert seqs == sorted(seqs)  # each poster's events in its own order
        assert [i for p, i in posted if p == number] == list(range(25))
    assert store.writer.units - units_before == 500
    assert store.writer.batches - batches_before <= 500


async def test_a_batch_is_one_transaction_with_one_sequence(store: FailingStore) -> None:
    battle_id = await _running_battle(store)
    results = await one_batch(store, *(store.append_event(battle_id, progress(f"e{i}")) for i in range(30)))
    seqs = [record.seq for record in results]
    assert seqs == list(range(seqs[0], seqs[0] + 30))
    assert [e.payload["message"] for e in await store.list_events(battle_id, after_seq=seqs[0] - 1)] == [
        f"e{i}" for i in range(30)
    ]


async def test_a_failed_commit_fails_every_write_of_its_batch_and_stores_none(store: FailingStore) -> None:
    battle_id = await _running_battle(store)
    before = await store.list_events(battle_id)
    results = await one_batch(
        store,
        store.append_event(battle_id, progress("a"), event_id="k-a"),
        store.append_event(battle_id, progress("dup"), event_id="k-a"),  # would be a duplicate: fails all the same
        store.append_event(
            battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"), presented_token=TOKEN, event_id="r"
        ),
        store.append_event(battle_id, progress("b")),
        fail_commit=True,
    )
    assert all(isinstance(result, WriteFailed) for result in results), results
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.RUNNING and battle.result is None
    assert battle.events == before and battle.last_seq == before[-1].seq
    # nothing of the batch is there: the same keys are taken as new, numbered right after what was stored before
    again = await store.append_event(battle_id, progress("a"), event_id="k-a")
    assert again.seq == before[-1].seq + 1
    finished = await store.append_event(
        battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"), presented_token=TOKEN, event_id="r"
    )
    assert finished.seq == again.seq + 1
    assert (await store.get_battle(battle_id, include_events=False)).state is BattleState.FINISHED  # type: ignore[union-attr]


async def test_a_failed_commit_is_a_503_for_every_poster_of_the_batch(store: FailingStore, db_path: Path) -> None:
    battle_id = await _running_battle(store)
    async with httpx.AsyncClient() as http:
        service = BattleService(store, LiveHub(), BackendSettings(db_path=db_path), http)
        bodies = [progress(f"p{i}", event_id=f"p{i}") for i in range(5)]
        results = await one_batch(
            store,
            *(
                service.post_event(battle_id, BattleEvent.model_validate(body), body, None, size_hint=100)
                for body in bodies
            ),
            fail_commit=True,
        )
    assert all(isinstance(result, ApiError) and result.status_code == 503 for result in results), results
    assert not [e for e in await store.list_events(battle_id) if e.payload.get("event_id")]


async def test_a_duplicate_key_within_one_batch_is_stored_once(store: FailingStore) -> None:
    battle_id = await _running_battle(store)
    first, duplicate, neighbour = await one_batch(
        store,
        store.append_event(battle_id, progress("first", event_id="same"), event_id="same"),
        store.append_event(battle_id, progress("retry with another body"), event_id="same"),
        store.append_event(battle_id, progress("neighbour")),
    )
    assert isinstance(first, EventRecord)
    assert isinstance(duplicate, DuplicateEvent) and duplicate.record.seq == first.seq
    assert duplicate.record.payload["message"] == "first"
    assert isinstance(neighbour, EventRecord) and neighbour.seq == first.seq + 1
    messages = [e.payload["message"] for e in await store.list_events(battle_id, after_seq=first.seq - 1)]
    assert messages == ["first", "neighbour"]


async def test_a_result_closes_the_battle_for_the_rest_of_its_batch(store: FailingStore) -> None:
    battle_id = await _running_battle(store)
    result = {"is_result": True, "winner": "draw"}
    before, finishing, late, second_result, retried = await one_batch(
        store,
        store.append_event(battle_id, progress("before")),
        store.append_event(battle_id, result, finish=FinishSpec("draw", {}, "t"), presented_token=TOKEN, event_id="r1"),
        store.append_event(battle_id, progress("late")),
        store.append_event(battle_id, result, finish=FinishSpec("draw", {}, "t"), presented_token=TOKEN, event_id="r2"),
        store.append_event(battle_id, result, finish=FinishSpec("draw", {}, "t"), presented_token=TOKEN, event_id="r1"),
    )
    assert isinstance(before, EventRecord) and isinstance(finishing, EventRecord)
    assert finishing.seq == before.seq + 1
    assert isinstance(late, BattleClosed) and isinstance(second_result, BattleClosed)
    assert isinstance(retried, DuplicateEvent) and retried.record.seq == finishing.seq
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.FINISHED and battle.last_seq == finishing.seq
    assert sum(1 for e in battle.events if e.payload.get("is_result")) == 1


async def test_a_write_that_fails_halfway_is_undone_alone(store: FailingStore) -> None:
    """The result's event row is written before its finish fails (a NaN in the result cannot be stored): the
    savepoint takes the row back; the neighbours in the same batch are stored and numbered without a gap."""
    battle_id = await _running_battle(store)
    bad_finish = FinishSpec("draw", {"score": math.nan}, "t")
    before, broken, after, nan_payload = await one_batch(
        store,
        store.append_event(battle_id, progress("before")),
        store.append_event(battle_id, {"is_result": True}, finish=bad_finish, presented_token=TOKEN),
        store.append_event(battle_id, progress("after")),
        store.append_event(battle_id, progress("nan", value=math.nan)),
    )
    assert isinstance(before, EventRecord) and isinstance(after, EventRecord)
    assert isinstance(broken, ValueError) and isinstance(nan_payload, ValueError)
    assert after.seq == before.seq + 1
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.RUNNING and battle.result is None
    assert [e.payload["message"] for e in battle.events[-2:]] == ["before", "after"]
    assert battle.last_seq == after.seq


async def test_closing_the_store_commits_what_is_queued_and_refuses_more(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    battle_id = await _running_battle(store)
    pending = [asyncio.ensure_future(store.append_event(battle_id, progress(f"q{i}"))) for i in range(10)]
    await asyncio.sleep(0)
    await store.close()
    assert all(isinstance(task.result(), EventRecord) for task in pending)
    with pytest.raises(RuntimeError):
        await store.append_event(battle_id, progress("too late"))
    reopened = SQLiteStore(db_path)
    await reopened.open()
    try:
        stored = [e.payload["message"] for e in await reopened.list_events(battle_id) if "q" in e.payload["message"]]
        assert stored == [f"q{i}" for i in range(10)]
    finally:
        await reopened.close()


@pytest.mark.parametrize(("option", "pragma"), [([], 1), (["--sqlite-synchronous", "full"], 2)])
async def test_the_fsync_policy_is_an_option(db_path: Path, option: list[str], pragma: int) -> None:
    """NORMAL (1) by default: an accepted event survives a killed process; FULL (2) on request: a power cut too."""
    settings = settings_from_args(build_parser().parse_args(["--db", str(db_path), *option]))
    store = SQLiteStore(settings.db_path, synchronous=settings.sqlite_synchronous)
    await store.open()
    try:
        assert await store.writer.write(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == pragma
    finally:
        await store.close()
