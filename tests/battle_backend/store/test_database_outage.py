"""A PostgreSQL outage seen through the API (issue 24, item 7): reads answer 503 with Retry-After, as writes do,
instead of holding every request for the pool's 30 s and then answering 500; the backend recovers by itself.

The outage: the test's database stops accepting connections (``ALLOW_CONNECTIONS false``) and every open connection
to it is terminated, as a server restart or failover does. Nothing asserts on durations (the bounded waits only turn
a hang into a failure); the old code answered 500.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from psycopg import sql

from battle_backend.store.postgres.store import PostgresStore
from battle_backend.store.protocol import StoreUnavailable
from tests.battle_backend.conftest import arena_on, progress, run_backend, wait_until
from tests.support.postgres import PostgresServer


async def _set_connections(server: PostgresServer, url: str, allowed: bool) -> None:
    name = url.rsplit("/", 1)[1]

    def run() -> None:
        with server.connect() as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                    sql.Identifier(name), sql.SQL("true" if allowed else "false")
                )
            )
            if not allowed:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))

    await asyncio.to_thread(run)


@pytest.mark.timeout(180)
async def test_reads_and_writes_during_an_outage_answer_503_with_retry_after(
    tmp_path: Path, postgres_server: PostgresServer, postgres_url: str
) -> None:
    async with run_backend(tmp_path / "unused.sqlite3", db_url=postgres_url) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        await arena.started(green, battle_id)
        assert (await arena.client.get(f"/battles/{battle_id}")).status_code == 200

        await _set_connections(postgres_server, postgres_url, allowed=False)
        try:
            for attempt in range(3):
                for path in (f"/battles/{battle_id}", "/battles", "/agents", f"/ui/battles/{battle_id}"):
                    async with asyncio.timeout(60):
                        response = await arena.client.get(path)
                    assert response.status_code == 503, (attempt, path, response.status_code, response.text[:300])
                    assert response.headers["retry-after"] == "1"
                    if not path.startswith("/ui/"):
                        assert "unavailable" in response.json()["detail"]
                async with asyncio.timeout(60):
                    posted = await arena.post(battle_id, progress("during the outage"))
                assert posted.status_code == 503 and posted.headers["retry-after"] == "1"
        finally:
            await _set_connections(postgres_server, postgres_url, allowed=True)

        async def back() -> bool:
            return (await arena.client.get(f"/battles/{battle_id}")).status_code == 200

        await wait_until(back, limit=60)
        assert (await arena.post(battle_id, progress("after the outage"))).status_code == 204
        messages = [e.get("message") for e in (await arena.get(battle_id))["interact_history"]]
        assert "after the outage" in messages and "during the outage" not in messages


async def test_a_store_read_during_an_outage_raises_store_unavailable(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    store = PostgresStore(postgres_url, wait_s=2.0)
    await store.open()
    try:
        assert await store.get_battle("none") is None
        await _set_connections(postgres_server, postgres_url, allowed=False)
        try:
            for _ in range(3):
                with pytest.raises(StoreUnavailable):
                    await store.list_battles()
            assert store.unreachable
        finally:
            await _set_connections(postgres_server, postgres_url, allowed=True)
        assert await wait_until(lambda: _readable(store), limit=60)
    finally:
        await store.close()


async def _readable(store: PostgresStore) -> bool:
    try:
        await store.list_battles()
    except StoreUnavailable:
        return False
    return True
