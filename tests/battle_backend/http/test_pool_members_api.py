"""``GET /pools/{pool}/members`` (issues 27 and 29) over HTTP on a served backend: the members seen by lease and
heartbeat calls within ``window_s`` (default 3x the lease wait cap), a wrong or missing pool key refused, the window
bounded and named when wrong. The backend's SQLite queue gets a hand-moved clock: nothing waits, nothing asserts on
durations."""

from __future__ import annotations

import httpx

from battle_backend.http.lease_models import DEFAULT_MEMBERS_WINDOW_S
from tests.battle_backend.conftest import Arena
from tests.battle_backend.http.test_lease_api import KEY, POOL, _battle, _lease, _publish, _sqlite_queue
from tests.battle_backend.store.attempt_queue_support import Clock


async def _members(client: httpx.AsyncClient, *, key: str | None = KEY, query: str = "") -> httpx.Response:
    headers = {"X-Pool-Key": key} if key is not None else {}
    return await client.get(f"/pools/{POOL}/members{query}", headers=headers)


async def test_members_seen_within_the_window_are_listed_and_dropped_after_it(arena: Arena) -> None:
    client = arena.client
    clock = Clock()
    _sqlite_queue(arena).clock = clock
    battle_id, token = await _battle(arena)
    assert (await _publish(client, battle_id, token)).status_code == 200
    assert (await _lease(client, "w1", limit=1)).status_code == 200
    assert (await _lease(client, "w2", limit=1)).status_code == 200
    answer = await _members(client)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"pool": POOL, "window_s": DEFAULT_MEMBERS_WINDOW_S, "count": 2, "worker_ids": ["w1", "w2"]}
    clock.now += 60
    assert (await _lease(client, "w2", limit=1)).status_code == 200
    clock.now += 60  # w1 was last seen 120 s ago: outside the default 90 s
    assert (await _members(client)).json()["worker_ids"] == ["w2"]
    wide = (await _members(client, query="?window_s=3600")).json()
    assert (wide["window_s"], wide["count"]) == (3600.0, 2)


async def test_a_wrong_or_missing_pool_key_and_a_bad_window_are_refused(arena: Arena) -> None:
    client = arena.client
    battle_id, token = await _battle(arena)
    assert (await _publish(client, battle_id, token)).status_code == 200
    assert (await _lease(client, "w1")).status_code == 200
    wrong = await _members(client, key="a guessed key")
    assert wrong.status_code == 403 and "not the one its attempts were published with" in wrong.text
    assert (await _members(client, key=None)).status_code == 401
    for query in ("?window_s=0", "?window_s=3601", "?window_s=abc", "?window_s=-1"):
        bad = await _members(client, query=query)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "window_s"], query
    assert (await _members(client)).json()["count"] == 1
