"""The storage seam's contract, run against both stores (``store`` fixture: SQLite, then a real PostgreSQL server
started by the test run): exact JSON, gapless per-battle ordering under concurrency, exactly-once events and
results, pools, ownership and takeover; then what only the shared store has (notices between replicas, migrations
under concurrent starts, a lost LISTEN connection).

Waits are bounded only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine

from battle_backend.store.factory import parse_db
from battle_backend.store.postgres.appends import PendingAppend
from battle_backend.store.postgres.schema import alembic_config, head_revision, sqlalchemy_url
from battle_backend.store.postgres.store import PostgresStore, safe_url
from battle_backend.store.protocol import (
    BattleClosed,
    BattleExists,
    BattleStore,
    DuplicateEvent,
    SchemaTooNew,
    StartOutcome,
    StoreNotice,
    TokenRejected,
    WriteFailed,
)
from battle_backend.store.records import BattleState, FinishSpec, system_event
from battle_backend.store.sqlite.schema import LATEST_VERSION, MIGRATIONS
from battle_backend.store.sqlite.store import SQLiteStore

REQUIREMENTS = [{"role": "blue_agent", "name": "white_agent", "required": True}]


async def _green(store: BattleStore, alias: str = "g", pool: str | None = None) -> str:
    info: dict[str, Any] = {"alias": alias, "is_green": True, "participant_requirements": REQUIREMENTS}
    if pool is not None:
        info["pool"] = pool
    return (await store.create_agent(info, {"name": alias.upper()})).agent_id


async def _white(store: BattleStore, alias: str = "w") -> str:
    return (await store.create_agent({"alias": alias, "is_green": False}, {"name": alias.upper()})).agent_id


@contextlib.asynccontextmanager
async def open_replicas(url: str, count: int, **options: Any) -> AsyncIterator[tuple[PostgresStore, ...]]:
    """``count`` opened PostgreSQL stores (replicas) on one database, closed afterwards."""
    stores = tuple(PostgresStore(url, **options) for _ in range(count))
    async with contextlib.AsyncExitStack() as stack:
        for store in stores:
            await store.open()
            stack.push_async_callback(store.close)
        yield stores


def _opponents(white_id: str) -> list[dict[str, Any]]:
    return [{"name": "white_agent", "agent_id": white_id, "role": "blue_agent"}]


async def _running(store: BattleStore, token: str = "tok") -> tuple[str, str, str]:
    green_id, white_id = await _green(store), await _white(store)
    battle = await store.create_battle(green_id, _opponents(white_id), {"k": 1}, None)
    assert await store.start_battle(battle.battle_id, token) is StartOutcome.STARTED
    return battle.battle_id, green_id, white_id


# --- both stores ------------------------------------------------------------------------------------------------


async def test_an_event_comes_back_exactly_as_stored(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    payload = {
        "z": 1,
        "a": "unicode é 漢字 🙂, a NUL \u0000 and quotes \" '",
        "nested": {"list": [1, 2.5, None, True, {"deep": ["x"]}], "big": 10**40, "neg": -(10**30)},
        "empty": {},
        "timestamp": 1764000000.25,
    }
    record = await store.append_event(battle_id, payload)
    stored = (await store.list_events(battle_id, after_seq=record.seq - 1))[0]
    assert json.dumps(stored.payload) == json.dumps(payload)  # same values, same key order
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.config == {"k": 1} and battle.events[-1].payload == payload


async def test_concurrent_appends_get_gapless_sequence_numbers(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    records = await asyncio.gather(*(store.append_event(battle_id, {"n": n}) for n in range(200)))
    assert sorted(r.seq for r in records) == list(range(3, 203))  # 1, 2: "Battle started", "Agents locked"
    events = await store.list_events(battle_id)
    assert [e.seq for e in events] == list(range(1, 203))
    assert sorted(e.payload["n"] for e in events[2:]) == list(range(200))
    by_seq = {r.seq: r.payload["n"] for r in records}
    assert all(by_seq[e.seq] == e.payload["n"] for e in events[2:])  # each caller got its own event's number
    paged = await store.list_events(battle_id, after_seq=100, limit=10)
    assert [e.seq for e in paged] == list(range(101, 111))


async def test_a_key_posted_concurrently_is_stored_once(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    outcomes = await asyncio.gather(
        *(store.append_event(battle_id, {"try": n}, event_id="k-1") for n in range(30)), return_exceptions=True
    )
    stored = [o for o in outcomes if not isinstance(o, BaseException)]
    duplicates = [o for o in outcomes if isinstance(o, DuplicateEvent)]
    assert len(stored) == 1 and len(duplicates) == 29
    assert all(d.record.seq == stored[0].seq for d in duplicates)
    assert len(await store.list_events(battle_id)) == 3


async def test_one_result_of_many_concurrent_ones_is_accepted(store: BattleStore) -> None:
    battle_id, _, white_id = await _running(store)
    results = await asyncio.gather(
        *(
            store.append_event(
                battle_id,
                {"is_result": True, "n": n},
                finish=FinishSpec("white_agent", {"n": n}, "t"),
                presented_token="tok",
                enforce_token=True,
                event_id=f"result-{n}",
            )
            for n in range(12)
        ),
        return_exceptions=True,
    )
    accepted = [r for r in results if not isinstance(r, BaseException)]
    assert len(accepted) == 1
    assert all(isinstance(r, BattleClosed) for r in results if isinstance(r, BaseException))
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.FINISHED
    assert battle.result is not None and battle.result["detail"] == {"n": accepted[0].payload["n"]}
    white = await store.get_agent(white_id)
    assert white is not None and white.elo_rating == 1015 and len(white.history) == 1
    assert white.status == "unlocked"


async def test_a_taken_battle_id_is_refused(store: BattleStore) -> None:
    green_id, white_id = await _green(store), await _white(store)
    await store.create_battle(green_id, _opponents(white_id), {}, None, battle_id="imported-1")
    with pytest.raises(BattleExists):
        await store.create_battle(green_id, _opponents(white_id), {}, None, battle_id="imported-1")
    assert [b.battle_id for b in await store.list_battles()] == ["imported-1"]


async def test_a_failed_battle_records_errors_and_unlocks(store: BattleStore) -> None:
    battle_id, green_id, white_id = await _running(store)
    assert await store.fail_battle(battle_id, "launcher down")
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.ERROR and battle.error == "launcher down"
    assert battle.events[-1].payload["message"] == "Battle error: launcher down"
    for agent_id in (green_id, white_id):
        agent = await store.get_agent(agent_id)
        assert agent is not None and agent.status == "unlocked"
        assert [(h.result, h.elo_change) for h in agent.history] == [("error", 0)]
    assert await store.add_system_event(battle_id, system_event("late")) is None


async def test_lists_keep_insertion_order(store: BattleStore) -> None:
    ids = [await _white(store, f"w{n}") for n in range(5)]
    assert [a.agent_id for a in await store.list_agents()] == ids
    green_id = await _green(store)
    battles = [(await store.create_battle(green_id, [], {}, None)).battle_id for _ in range(5)]
    assert [b.battle_id for b in await store.list_battles()] == battles
    assert await store.battle_ids_in_state(BattleState.QUEUED) == battles


async def test_pool_battles_start_on_whichever_member_is_free(store: BattleStore) -> None:
    first = await _green(store, "g1", pool="tau")
    second = await _green(store, "g2", pool="tau")
    outsider = await _green(store, "g3", pool="other")
    whites = [await _white(store, f"w{n}") for n in range(4)]
    battles = [
        (await store.create_battle(first, _opponents(white), {}, None, green_pool="tau")).battle_id
        for white in whites[:3]
    ]
    assert await store.start_battle(battles[0], "t0") is StartOutcome.STARTED
    assert await store.start_battle(battles[1], "t1") is StartOutcome.STARTED
    assert await store.start_battle(battles[2], "t2") is StartOutcome.AGENTS_BUSY  # both members busy
    running = [await store.get_battle(b, include_events=False) for b in battles]
    assert [b.green_agent_id for b in running if b is not None] == [first, second, first]
    assert running[2] is not None and running[2].state is BattleState.QUEUED
    # a battle created for the second member runs there when it is free: after the first battle ends, the queued
    # one takes the first member (its own), never the outsider of another pool
    await store.append_event(battles[0], {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
    assert await store.start_battle(battles[2], "t2") is StartOutcome.STARTED
    third = await store.get_battle(battles[2], include_events=False)
    assert third is not None and third.green_agent_id == first and third.green_pool == "tau"
    outsider_agent = await store.get_agent(outsider)
    assert outsider_agent is not None and outsider_agent.status == "unlocked"
    own = await store.create_battle(second, _opponents(whites[3]), {}, None, green_pool="tau")
    await store.append_event(battles[1], {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
    assert await store.start_battle(own.battle_id, "t3") is StartOutcome.STARTED
    started = await store.get_battle(own.battle_id, include_events=False)
    assert started is not None and started.green_agent_id == second


async def test_a_battle_without_a_pool_waits_for_its_own_green_agent(store: BattleStore) -> None:
    battle_id, green_id, _ = await _running(store)
    other_white = await _white(store, "w2")
    queued = await store.create_battle(green_id, _opponents(other_white), {}, None)
    assert await store.start_battle(queued.battle_id, "t") is StartOutcome.AGENTS_BUSY
    await store.append_event(battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
    assert await store.start_battle(queued.battle_id, "t") is StartOutcome.STARTED


async def test_the_starting_replica_owns_the_battle(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    battle = await store.get_battle(battle_id, include_events=False)
    assert battle is not None and battle.owner == store.replica_id
    assert await store.claim_orphaned_battles() == []  # its own battles are never orphans
    assert await store.owned_running_battles() == [battle_id]


# --- takeover -----------------------------------------------------------------------------------------------------


async def test_sqlite_the_next_process_takes_over_every_running_battle(tmp_path: Path) -> None:
    path = tmp_path / "takeover.sqlite3"
    first = SQLiteStore(path)
    await first.open()
    try:
        battle_id, _, _ = await _running(first)
    finally:
        await first.close()
    second = SQLiteStore(path)
    await second.open()
    try:
        assert await second.claim_orphaned_battles() == [battle_id]  # whatever the lease: a previous process
        assert await second.claim_orphaned_battles() == []
        battle = await second.get_battle(battle_id, include_events=False)
        assert battle is not None and battle.owner == second.replica_id
    finally:
        await second.close()


async def test_postgres_a_live_replicas_battles_are_not_claimed(postgres_url: str) -> None:
    """Each replica's own lease decides: a short-lease replica that stops renewing loses its battles, even to a
    claimer whose own lease is long; a long-lease replica keeps them against a short-lease claimer."""
    # short's lease is long enough that the first look comes before it runs out even on a loaded machine; the
    # takeover is then awaited (bounded), not timed.
    short, patient = PostgresStore(postgres_url, lease_s=5.0), PostgresStore(postgres_url, lease_s=3600)
    await short.open()
    await patient.open()
    try:
        battle_id, _, _ = await _running(short)
        kept_id, _, _ = await _running(patient, token="other")
        assert await patient.claim_orphaned_battles() == []  # short renewed its lease just now
        assert await short.claim_orphaned_battles() == []  # patient's lease (an hour) has not run out
        claimed: list[str] = []
        for _ in range(300):  # short's lease (5 s) runs out: patient takes its battle over
            claimed = await patient.claim_orphaned_battles()
            if claimed:
                break
            await asyncio.sleep(0.1)
        assert claimed == [battle_id]
        assert await short.claim_orphaned_battles() == []  # patient's lease still holds
        battle = await short.get_battle(battle_id, include_events=False)
        assert battle is not None and battle.owner == patient.replica_id
        assert await short.owned_running_battles() == []
        assert await patient.owned_running_battles() == [battle_id, kept_id]
    finally:
        await short.close()
        await patient.close()


async def test_postgres_a_retired_replicas_battles_are_claimed_once(postgres_url: str) -> None:
    first = PostgresStore(postgres_url)
    await first.open()
    battle_ids = [(await _running(first, token=f"t{n}"))[0] for n in range(6)]
    await first.close()  # a clean stop retires the replica: no lease to wait for
    claimers = [PostgresStore(postgres_url) for _ in range(3)]
    for claimer in claimers:
        await claimer.open()
    try:
        claimed = await asyncio.gather(*(c.claim_orphaned_battles() for c in claimers))
        flat = [battle_id for ids in claimed for battle_id in ids]
        assert sorted(flat) == sorted(battle_ids)  # every battle taken over, none twice
        for claimer, ids in zip(claimers, claimed, strict=True):
            for battle_id in ids:
                battle = await claimer.get_battle(battle_id, include_events=False)
                assert battle is not None and battle.owner == claimer.replica_id
    finally:
        for claimer in claimers:
            await claimer.close()


# --- what only the shared store has ---------------------------------------------------------------------------


async def test_postgres_notices_reach_the_other_replicas_in_commit_order(postgres_url: str) -> None:
    async with open_replicas(postgres_url, 2) as (writer, reader):
        mine: list[StoreNotice] = []
        theirs: list[StoreNotice] = []
        writer.set_notice_handler(mine.append)
        reader.set_notice_handler(theirs.append)
        green_id, white_id = await _green(writer), await _white(writer)
        battle = await writer.create_battle(green_id, _opponents(white_id), {}, None)
        await writer.start_battle(battle.battle_id, "tok")
        await writer.set_agent_ready(white_id, True)
        await writer.append_event(battle.battle_id, {"n": 1})
        await writer.append_event(battle.battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
        with pytest.raises(BattleClosed):  # refused: rolled back, so its notice is never delivered
            await writer.append_event(battle.battle_id, {"n": 2})
        later = await writer.create_battle(green_id, [], {}, None)
        expected = [
            StoreNotice("battle", battle.battle_id, "queued"),
            StoreNotice("battle", battle.battle_id, "running"),
            StoreNotice("agent_ready", white_id, None),
            StoreNotice("battle", battle.battle_id, None),
            StoreNotice("battle", battle.battle_id, "finished"),
            StoreNotice("battle", later.battle_id, "queued"),
        ]
        async with asyncio.timeout(30):
            while len(theirs) < len(expected):
                await asyncio.sleep(0.01)
        assert theirs == expected
        assert mine == []  # a replica hears only the others: its own changes it published itself


async def test_postgres_a_lost_listen_connection_comes_back_with_a_resync(postgres_url: str) -> None:
    async with open_replicas(postgres_url, 2) as (writer, reader):
        heard: list[StoreNotice] = []
        reader.set_notice_handler(heard.append)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            )
        async with asyncio.timeout(30):
            while StoreNotice("resync", "") not in heard:
                await asyncio.sleep(0.02)
            green_id = await _green(writer)
            battle = await writer.create_battle(green_id, [], {}, None)
            while StoreNotice("battle", battle.battle_id, "queued") not in heard:
                await asyncio.sleep(0.02)
        assert reader.listener.reconnects >= 1


async def test_postgres_replicas_migrating_at_once_and_a_newer_schema(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))  # the advisory lock serialises the migration
    for s in stores:
        await s.close()
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("UPDATE alembic_version SET version_num = 'v9999_from_the_future'")
    newer = PostgresStore(postgres_url)
    with pytest.raises(SchemaTooNew, match="v9999_from_the_future"):
        await newer.open()


def test_db_option_names_a_file_or_a_database() -> None:
    assert parse_db("runs/backend.sqlite3") == (Path("runs/backend.sqlite3"), None)
    assert parse_db("sqlite:///runs/b.sqlite3") == (Path("runs/b.sqlite3"), None)
    assert parse_db("sqlite:////abs/b.sqlite3") == (Path("/abs/b.sqlite3"), None)
    assert parse_db("postgresql://arena@db:5432/arena") == (None, "postgresql://arena@db:5432/arena")
    assert parse_db("postgres://arena@db/arena") == (None, "postgres://arena@db/arena")
    for bad in ("", "mysql://x/y", "sqlite:///"):
        with pytest.raises(ValueError):
            parse_db(bad)
    assert safe_url("postgresql://arena:s3cret@db:5432/arena") == "postgresql://arena:***@db:5432/arena"
    assert "s3cret" not in PostgresStore("postgresql://arena:s3cret@db:5432/arena").description


async def test_postgres_connections_cut_by_the_server_are_replaced_not_failed(postgres_url: str) -> None:
    """Every connection of the store killed by the server (what a database restart or failover does to them): the
    next calls get fresh connections instead of failing, and the LISTEN connection comes back with a resync."""
    store = PostgresStore(postgres_url, pool_min=3)
    await store.open()
    heard: list[StoreNotice] = []
    store.set_notice_handler(heard.append)
    try:
        battle_id, _, _ = await _running(store)
        await asyncio.gather(*(store.list_events(battle_id) for _ in range(3)))  # several pooled connections
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            row = await cur.fetchone()
            assert row is not None and row[0] >= 2
        records = await asyncio.gather(*(store.append_event(battle_id, {"n": n}) for n in range(5)))
        assert sorted(r.seq for r in records) == [3, 4, 5, 6, 7]
        async with asyncio.timeout(30):
            while StoreNotice("resync", "") not in heard:
                await asyncio.sleep(0.02)
    finally:
        await store.close()


async def test_postgres_an_older_schema_is_migrated_forward_and_keeps_its_data(postgres_url: str) -> None:
    def at_first_revision() -> None:
        config = alembic_config()
        engine = create_engine(sqlalchemy_url(postgres_url))
        try:
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "v0001")
        finally:
            engine.dispose()

    await asyncio.to_thread(at_first_revision)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO battles (battle_id, green_agent_id, opponents, config, state, created_at, last_seq)"
            " VALUES ('old', 'g', '[]', '{}', 'running', 't', 1)"
        )
        await conn.execute(
            "INSERT INTO battle_events (battle_id, seq, payload, received_at) VALUES ('old', 1, '{\"a\":1}', 't')"
        )
    async with open_replicas(postgres_url, 1) as (store,):
        record = await store.append_event("old", {"b": 2}, event_id="k")
        assert record.seq == 2
        assert [e.payload for e in await store.list_events("old")] == [{"a": 1}, {"b": 2}]
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            cur = await conn.execute("SELECT version_num FROM alembic_version")
            assert await cur.fetchone() == (head_revision(),)


async def test_callers_that_give_up_do_not_disturb_the_others(store: BattleStore) -> None:
    """A poster whose request is cancelled (its client went away) may or may not have its event stored, but every
    other caller is answered, with its own event, in one gapless order."""
    battle_id, _, _ = await _running(store)
    tasks = [asyncio.create_task(store.append_event(battle_id, {"n": n})) for n in range(60)]
    await asyncio.sleep(0)
    for task in tasks[::6]:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes if isinstance(o, BaseException))
    assert len(answered) >= 50
    events = await store.list_events(battle_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    stored = {e.seq: e.payload for e in events}
    assert all(stored[record.seq] == record.payload for record in answered)


async def test_postgres_a_battle_another_replica_writes_itself_is_never_started_here(postgres_url: str) -> None:
    async with open_replicas(postgres_url, 2) as (importer, other):
        green_id, white_id = await _green(importer), await _white(importer)
        battle = await importer.create_battle(green_id, _opponents(white_id), {}, None, owned=True)
        assert await other.start_battle(battle.battle_id, "t") is StartOutcome.NOT_QUEUED
        assert await importer.start_battle(battle.battle_id, "t") is StartOutcome.STARTED


async def test_postgres_stray_notices_never_stop_the_listener(postgres_url: str) -> None:
    """Anyone who can connect may NOTIFY on the channel: malformed, deep or oddly typed payloads are ignored and the
    replica goes on hearing the real ones."""
    async with open_replicas(postgres_url, 2) as (writer, reader):
        heard: list[StoreNotice] = []
        reader.set_notice_handler(heard.append)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as stranger:
            for payload in (
                '{"o":"x","k":[],"id":"y"}',
                '{"o":"x","k":{"a":1},"id":"y"}',
                "[" * 3900 + "]" * 3900,  # deeper than json can parse, under NOTIFY's 8000 bytes
                "not json",
                '{"o":1,"k":"battle","id":"y"}',
                '{"o":"x","k":"battle","id":"y","s":7}',
            ):
                await stranger.execute("SELECT pg_notify('arena_changes', %s)", (payload,))
        green_id = await _green(writer)
        battle = await writer.create_battle(green_id, [], {}, None)
        async with asyncio.timeout(30):
            while StoreNotice("battle", battle.battle_id, "queued") not in heard:
                await asyncio.sleep(0.02)
        assert heard == [StoreNotice("battle", battle.battle_id, "queued")]
        assert reader.listener.listening


async def test_postgres_two_databases_migrated_at_once_in_one_process(postgres_server: Any) -> None:
    urls = [postgres_server.create_database() for _ in range(4)]
    stores = [PostgresStore(url) for url in urls]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        for store in stores:
            battle_id, _, _ = await _running(store)
            assert (await store.append_event(battle_id, {"n": 1})).seq == 3
    finally:
        for store in stores:
            await store.close()
        for url in urls:
            postgres_server.drop_database(url.rsplit("/", 1)[1])


async def test_postgres_a_read_only_database_refuses_every_write_as_write_failed(postgres_url: str) -> None:
    """After a failover to a read-only server, every kind of write is a WriteFailed (a 503 to retry), never a raw
    database error (a 500)."""
    async with open_replicas(postgres_url, 1) as (store,):
        battle_id, _, _ = await _running(store)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            name = (await (await admin.execute("SELECT current_database()")).fetchone() or ("",))[0]
            await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            await admin.execute(  # the store's sessions end; the new ones it opens are read-only
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(WriteFailed):
            await store.append_event(battle_id, {"n": 1})
        with pytest.raises(WriteFailed):
            await store.append_event(battle_id, {"is_result": True}, finish=FinishSpec("draw", {}, "t"))
        with pytest.raises(WriteFailed):
            await store.fail_battle(battle_id, "x")
        with pytest.raises(WriteFailed):
            await store.add_system_event(battle_id, system_event("x"))


async def test_postgres_an_event_the_database_refuses_fails_alone_in_its_batch(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events waiting for their battle's writer are committed together; when the database raises on one of them
    (here: a value it cannot hold, slipped past every check on purpose), the others are written anyway and only that
    caller hears of it."""
    async with open_replicas(postgres_url, 1) as (store,):
        battle_id, _, _ = await _running(store)
        original = PendingAppend.params

        def poisoned(self: PendingAppend, origin: str) -> tuple[Any, ...]:
            values = original(self, origin)
            return (values[0], "\x00", *values[2:]) if self.payload.get("poison") else values

        monkeypatch.setattr(PendingAppend, "params", poisoned)
        outcomes = await asyncio.gather(
            *(store.append_event(battle_id, {"n": n, "poison": n == 13}) for n in range(30)), return_exceptions=True
        )
        failed = [n for n, o in enumerate(outcomes) if isinstance(o, BaseException)]
        assert failed == [13] and isinstance(outcomes[13], WriteFailed)
        assert store.appends.batches < 30  # the events did share transactions
        stored = [e.payload["n"] for e in await store.list_events(battle_id) if "n" in e.payload]
        assert sorted(stored) == [n for n in range(30) if n != 13]


# --- verified and unverified events: two key spaces (issue 24, item 1) ----------------------------------------


async def test_a_tokenless_key_never_makes_the_token_holders_event_a_duplicate(store: BattleStore) -> None:
    """A tokenless poster who squats the keys the green agent will use claims nothing: the token holder's events and
    its result are stored under the same keys, and each space answers its own repeats."""
    battle_id, _, _ = await _running(store)
    squatted = [await store.append_event(battle_id, {"forged": n}, event_id=f"k-{n}") for n in (1, 2, 3)]
    assert [record.verified for record in squatted] == [False] * 3
    await store.append_event(battle_id, {"is_result": False, "forged": "r"}, event_id="r")
    real = [await store.append_event(battle_id, {"real": n}, presented_token="tok", event_id=f"k-{n}") for n in (1, 2)]
    assert [record.verified for record in real] == [True, True]
    assert [record.seq for record in real] == [7, 8]  # new events, not the squatters' records
    result = await store.append_event(
        battle_id,
        {"is_result": True, "real": "result"},
        finish=FinishSpec("draw", {"real": True}, "t"),
        presented_token="tok",
        enforce_token=True,
        event_id="r",
    )
    assert result.verified and result.seq == 9
    # each space answers its own repeats, also after the finish
    with pytest.raises(DuplicateEvent) as verified_repeat:
        await store.append_event(battle_id, {"real": "again"}, presented_token="tok", event_id="k-1")
    assert verified_repeat.value.record.seq == 7 and verified_repeat.value.record.payload == {"real": 1}
    assert verified_repeat.value.record.verified
    with pytest.raises(DuplicateEvent) as tokenless_repeat:
        await store.append_event(battle_id, {"forged": "again"}, event_id="k-1")
    assert tokenless_repeat.value.record.seq == 3 and not tokenless_repeat.value.record.verified
    with pytest.raises(BattleClosed):  # a tokenless key the token holder never used: the battle is over
        await store.append_event(battle_id, {"forged": 3}, presented_token="tok", event_id="k-3")
    battle = await store.get_battle(battle_id)
    assert battle is not None and battle.state is BattleState.FINISHED
    assert battle.result is not None and battle.result["detail"] == {"real": True}
    flags = [(event.seq, event.verified) for event in battle.events]
    assert flags == [
        (1, True),
        (2, True),
        (3, False),
        (4, False),
        (5, False),
        (6, False),
        *[(n, True) for n in (7, 8, 9)],
    ]
    assert [(e.seq, e.verified) for e in await store.list_events(battle_id, after_seq=5, limit=3)] == [
        (6, False),
        (7, True),
        (8, True),
    ]
    listed = next(b for b in await store.list_battles(include_events=True) if b.battle_id == battle_id)
    assert [e.verified for e in listed.events] == [e.verified for e in battle.events]


async def test_concurrent_posts_of_one_key_with_and_without_the_token_store_one_of_each(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    outcomes = await asyncio.gather(
        *(
            store.append_event(battle_id, {"n": n}, event_id="k", presented_token="tok" if n % 2 else None)
            for n in range(20)
        ),
        return_exceptions=True,
    )
    stored = [o for o in outcomes if not isinstance(o, BaseException)]
    assert sorted(record.verified for record in stored) == [False, True]
    assert all(isinstance(o, DuplicateEvent) for o in outcomes if isinstance(o, BaseException))
    for outcome in outcomes:
        if isinstance(outcome, DuplicateEvent):
            assert outcome.record.verified == (outcome.record.payload["n"] % 2 == 1)


async def test_backend_and_imported_events_are_verified_a_wrong_token_stores_nothing(store: BattleStore) -> None:
    battle_id, _, _ = await _running(store)
    trusted = await store.append_event(battle_id, {"imported": True}, trusted=True, event_id="i")
    system = await store.add_system_event(battle_id, system_event("note"))
    assert trusted.verified and system is not None and system.verified
    with pytest.raises(TokenRejected):
        await store.append_event(battle_id, {"n": 1}, presented_token="wrong", event_id="w")
    events = await store.list_events(battle_id)
    assert [e.verified for e in events] == [True, True, True, True]


async def test_postgres_a_squat_on_one_replica_does_not_block_the_token_holder_on_another(postgres_url: str) -> None:
    async with open_replicas(postgres_url, 2) as (first, second):
        battle_id, _, _ = await _running(first)
        for n in range(1, 6):
            await first.append_event(battle_id, {"forged": n}, event_id=f"k-{n}")
        real = await asyncio.gather(
            *(second.append_event(battle_id, {"real": n}, presented_token="tok", event_id=f"k-{n}") for n in (1, 2))
        )
        assert all(record.verified for record in real)
        await second.append_event(
            battle_id,
            {"is_result": True},
            finish=FinishSpec("draw", {}, "t"),
            presented_token="tok",
            enforce_token=True,
            event_id="k-3",
        )
        battle = await first.get_battle(battle_id)
        assert battle is not None and battle.state is BattleState.FINISHED
        assert [e.verified for e in battle.events].count(False) == 5
        assert [e.verified for e in battle.events].count(True) == 2 + 3


async def test_sqlite_a_version_3_database_is_migrated_to_two_key_spaces(tmp_path: Path) -> None:
    """Events stored before the migration keep counting as the battle's (verified); their keys stay in the verified
    space, so a token holder's retry is still a duplicate and a tokenless post of the same key is not."""
    path = tmp_path / "v3.sqlite3"
    conn = sqlite3.connect(path)
    for _number, script in MIGRATIONS[:3]:
        conn.executescript(script)
    conn.executescript(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (3);"
        "INSERT INTO battles (battle_id, green_agent_id, opponents, config, state, created_at, last_seq, battle_token)"
        " VALUES ('old', 'g', '[]', '{}', 'running', 't', 1, 'tok');"
        """INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id)"""
        """ VALUES ('old', 1, '{"a":1}', 't', 'k');"""
    )
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        with pytest.raises(DuplicateEvent):
            await store.append_event("old", {"again": 1}, presented_token="tok", event_id="k")
        forged = await store.append_event("old", {"forged": 1}, event_id="k")
        assert forged.seq == 2 and not forged.verified
        assert [(e.payload, e.verified) for e in await store.list_events("old")] == [
            ({"a": 1}, True),
            ({"forged": 1}, False),
        ]
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(path)) as check:
        assert check.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST_VERSION,)


async def test_postgres_a_revision_3_database_is_migrated_to_two_key_spaces(postgres_url: str) -> None:
    def at_revision_3() -> None:
        config = alembic_config()
        engine = create_engine(sqlalchemy_url(postgres_url))
        try:
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "v0003")
        finally:
            engine.dispose()

    await asyncio.to_thread(at_revision_3)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO battles (battle_id, green_agent_id, opponents, config, state, created_at, last_seq,"
            " battle_token) VALUES ('old', 'g', '[]', '{}', 'running', 't', 1, 'tok')"
        )
        await conn.execute(
            "INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id)"
            " VALUES ('old', 1, '{\"a\":1}', 't', 'k')"
        )
    async with open_replicas(postgres_url, 1) as (store,):
        with pytest.raises(DuplicateEvent):
            await store.append_event("old", {"again": 1}, presented_token="tok", event_id="k")
        forged = await store.append_event("old", {"forged": 1}, event_id="k")
        assert forged.seq == 2 and not forged.verified
        assert [(e.payload, e.verified) for e in await store.list_events("old")] == [
            ({"a": 1}, True),
            ({"forged": 1}, False),
        ]
