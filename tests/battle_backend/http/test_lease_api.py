"""The attempt-lease API (issue 29) over HTTP on a served backend: authorisation (battle token for the owner, pool
key for members), bodies bounded and errors naming the field, the lease protocol's refusals as status codes, the
long-polled lease woken by a publish, the owner's takeover, and the published schema.

The backend's SQLite queue gets a hand-moved clock, so expiry needs no waiting; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from battle_backend.http.lease_models import schema_text
from battle_backend.store.sqlite.attempt_queue import SQLiteAttemptQueue
from tests.battle_backend.conftest import Arena
from tests.battle_backend.store.attempt_queue_support import Clock

ROOT = Path(__file__).resolve().parents[3]
POOL, KEY = "pool-a", "the pool key"


async def _battle(arena: Arena) -> tuple[str, str]:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    token = arena.green_token(battle_id)
    assert token
    return battle_id, token


def _sqlite_queue(arena: Arena) -> SQLiteAttemptQueue:
    queue = arena.backend.ctx.store.attempts
    assert isinstance(queue, SQLiteAttemptQueue)
    return queue


def _attempts(tasks: int, k: int) -> list[dict[str, Any]]:
    return [{"task_key": f"airline/{t}", "attempt": a, "payload": {"t": t}} for t in range(tasks) for a in range(k)]


async def _publish(
    client: httpx.AsyncClient, battle_id: str, token: str, *, key: str = KEY, **body: Any
) -> httpx.Response:
    data = {"pool": POOL, "owner_worker": "owner", "attempts": _attempts(2, 2), **body}
    return await client.post(
        f"/battles/{battle_id}/attempts", json=data, headers={"X-Battle-Token": token, "X-Pool-Key": key}
    )


async def _lease(client: httpx.AsyncClient, worker: str, *, key: str = KEY, **body: Any) -> httpx.Response:
    return await client.post(
        f"/pools/{POOL}/leases", json={"worker_id": worker, "ttl_s": 30, **body}, headers={"X-Pool-Key": key}
    )


def _ref(lease: dict[str, Any]) -> dict[str, Any]:
    return {name: lease[name] for name in ("battle_id", "task_key", "attempt", "generation", "worker_id")}


async def test_publish_lease_heartbeat_record_and_read(arena: Arena) -> None:
    client = arena.client
    battle_id, token = await _battle(arena)
    published = await _publish(client, battle_id, token)
    assert published.status_code == 200, published.text
    assert published.json() == {"added": 4, "already": 0}
    assert (await _publish(client, battle_id, token)).json() == {"added": 0, "already": 4}

    leased = await _lease(client, "w1", limit=4)
    assert leased.status_code == 200, leased.text
    leases = leased.json()["leases"]
    assert [(lease["task_key"], lease["attempt"], lease["generation"]) for lease in leases] == [
        ("airline/0", 0, 1),
        ("airline/0", 1, 1),
        ("airline/1", 0, 1),
        ("airline/1", 1, 1),
    ]
    headers = {"X-Pool-Key": KEY}
    beat = await client.post(
        f"/pools/{POOL}/leases/heartbeat", json={"lease": _ref(leases[0]), "ttl_s": 60}, headers=headers
    )
    assert beat.status_code == 200 and beat.json() == {"ttl_s": 60.0}
    for lease in leases:
        body = {"lease": _ref(lease), "result": {"reward": 1.0}}
        answer = await client.post(f"/pools/{POOL}/leases/record", json=body, headers=headers)
        assert answer.status_code == 200 and answer.json()["status"] == "recorded", answer.text
    again = await client.post(
        f"/pools/{POOL}/leases/record", json={"lease": _ref(leases[0]), "result": {"reward": 0.0}}, headers=headers
    )
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.json()["attempt"]["result"] == {"reward": 1.0}

    read = await client.get(f"/battles/{battle_id}/attempts", headers={"X-Battle-Token": token})
    assert read.status_code == 200, read.text
    data = read.json()
    assert data["counts"]["done"] == 4 and data["pool"] == POOL and data["owner_worker"] == "owner"
    assert [a["history"][0]["outcome"] for a in data["attempts"]] == ["recorded"] * 4
    assert (await client.get(f"/battles/{battle_id}/attempts", headers={"X-Pool-Key": KEY})).json() == data
    assert (await client.get(f"/battles/{battle_id}/attempts")).status_code == 401
    assert (await client.get(f"/battles/{battle_id}/attempts", headers={"X-Pool-Key": "no"})).status_code == 401


async def test_refusals_are_status_codes_naming_what_is_wrong(arena: Arena) -> None:
    client = arena.client
    battle_id, token = await _battle(arena)
    assert (await _publish(client, battle_id, "not the token")).status_code == 401
    no_key = await client.post(
        f"/battles/{battle_id}/attempts",
        json={"pool": POOL, "owner_worker": "o", "attempts": []},
        headers={"X-Battle-Token": token},
    )
    assert no_key.status_code == 401 and "X-Pool-Key" in no_key.text
    bad = await _publish(client, battle_id, token, attempts=[{"task_key": "t" * 600, "attempt": 0}])
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "attempts", 0, "task_key"]
    extra = await _publish(client, battle_id, token, surprise=1)
    assert extra.status_code == 422 and extra.json()["detail"][0]["loc"] == ["body", "surprise"]
    huge = await _publish(
        client, battle_id, token, attempts=[{"task_key": "t", "attempt": 0, "payload": {"x": "y" * 70_000}}]
    )
    assert huge.status_code == 422 and huge.json()["detail"][0]["loc"] == ["body", "attempts", 0, "payload"]
    assert (await _publish(client, battle_id, token)).status_code == 200
    other_key = await _publish(client, battle_id, token, key="another key")
    assert other_key.status_code == 422 and other_key.json()["detail"][0]["loc"] == ["body", "pool_key"]
    assert (await client.post("/battles/nope/attempts", json={"pool": POOL, "owner_worker": "o", "attempts": []},
                              headers={"X-Battle-Token": token, "X-Pool-Key": KEY})).status_code == 404  # fmt: skip

    assert (await _lease(client, "w", key="wrong")).json() == {"leases": []}  # a wrong key sees no attempts
    assert (await _lease(client, "w", limit=65)).status_code == 422
    [lease] = (await _lease(client, "w")).json()["leases"]
    wrong_pool = await client.post(
        "/pools/pool-b/leases/record",
        json={"lease": _ref(lease), "result": {}},
        headers={"X-Pool-Key": KEY},
    )
    assert wrong_pool.status_code == 403
    stolen = {**_ref(lease), "worker_id": "thief"}
    refused = await client.post(
        f"/pools/{POOL}/leases/record", json={"lease": stolen, "result": {}}, headers={"X-Pool-Key": KEY}
    )
    assert refused.status_code == 409 and refused.json()["detail"]["reason"] == "wrong_worker"
    too_big = await client.post(
        f"/pools/{POOL}/leases/record",
        content=b'{"lease": {}, "result": {"x": "' + b"y" * (2 * 1024 * 1024) + b'"}}',
        headers={"X-Pool-Key": KEY, "Content-Type": "application/json"},
    )
    assert too_big.status_code == 413


async def test_an_expired_lease_recorded_late_is_answered_409_fenced(arena: Arena) -> None:
    clock = Clock()
    _sqlite_queue(arena).clock = clock
    client = arena.client
    battle_id, token = await _battle(arena)
    await _publish(client, battle_id, token, attempts=_attempts(1, 1))
    [late] = (await _lease(client, "slow")).json()["leases"]
    clock.now += 31.0
    [fresh] = (await _lease(client, "fast")).json()["leases"]
    assert fresh["generation"] == 2
    refused = await client.post(
        f"/pools/{POOL}/leases/record", json={"lease": _ref(late), "result": {"r": 0}}, headers={"X-Pool-Key": KEY}
    )
    assert refused.status_code == 409 and refused.json()["detail"]["reason"] == "fenced"
    error = await client.post(
        f"/pools/{POOL}/leases/error", json={"lease": _ref(fresh), "error": "sandbox died"}, headers={"X-Pool-Key": KEY}
    )
    assert error.status_code == 200 and error.json()["status"] == "requeued"
    history = error.json()["attempt"]["history"]
    assert [(h["worker_id"], h["outcome"]) for h in history] == [("slow", "expired"), ("fast", "infra_error")]


async def test_a_waiting_lease_is_woken_by_a_publish(arena: Arena) -> None:
    client = arena.client
    _sqlite_queue(arena).poll_s = 3600.0  # only the publish can end the wait before its bound
    battle_id, token = await _battle(arena)
    waiting = asyncio.create_task(_lease(client, "idle", wait_s=30))
    await asyncio.sleep(0.2)  # not a timing assertion: the wait may or may not have begun, either way one lease comes
    await _publish(client, battle_id, token, attempts=_attempts(1, 1))
    async with asyncio.timeout(60):
        answer = await waiting
    assert answer.status_code == 200 and len(answer.json()["leases"]) == 1


async def test_a_member_takes_over_a_silent_owner(arena: Arena) -> None:
    clock = Clock()
    _sqlite_queue(arena).clock = clock
    client = arena.client
    battle_id, token = await _battle(arena)
    await _publish(client, battle_id, token, owner_ttl_s=10)
    claim = {"worker_id": "member", "pool": POOL}
    alive = await client.post(f"/battles/{battle_id}/owner", json=claim, headers={"X-Pool-Key": KEY})
    assert alive.status_code == 409 and alive.json()["detail"]["reason"] == "owner_alive"
    beat = await client.post(
        f"/battles/{battle_id}/owner", json={"worker_id": "owner"}, headers={"X-Battle-Token": token}
    )
    assert beat.status_code == 200 and beat.json() == {"owner_worker": "owner", "battle_token": None}
    clock.now += 11.0
    assert (
        await client.post(f"/battles/{battle_id}/owner", json=claim, headers={"X-Pool-Key": "x"})
    ).status_code == 403
    taken = await client.post(f"/battles/{battle_id}/owner", json=claim, headers={"X-Pool-Key": KEY})
    assert taken.status_code == 200 and taken.json() == {"owner_worker": "member", "battle_token": token}


def test_the_published_schema_is_the_models() -> None:
    path = ROOT / "battle_backend" / "schemas" / "attempt-leases.schema.json"
    assert path.read_text(encoding="utf-8") == schema_text(), (
        "regenerate: .venv/bin/python -m battle_backend.http.lease_models "
        "battle_backend/schemas/attempt-leases.schema.json"
    )


async def test_hostile_names_and_pages(arena: Arena) -> None:
    client = arena.client
    battle_id, token = await _battle(arena)
    assert (await _publish(client, battle_id, token, attempts=_attempts(3, 1))).status_code == 200
    nul = await _lease(client, "worker\x00one")
    assert nul.status_code == 422 and nul.json()["detail"][0]["loc"] == ["body", "worker_id"]
    owner_nul = await _publish(client, battle_id, token, owner_worker="o\x07")
    assert owner_nul.status_code == 422 and owner_nul.json()["detail"][0]["loc"] == ["body", "owner_worker"]
    headers = {"X-Battle-Token": token}
    first = (await client.get(f"/battles/{battle_id}/attempts?limit=2", headers=headers)).json()
    assert [a["task_key"] for a in first["attempts"]] == ["airline/0", "airline/1"] and first["next_offset"] == 2
    rest = (await client.get(f"/battles/{battle_id}/attempts?offset=2&limit=2", headers=headers)).json()
    assert [a["task_key"] for a in rest["attempts"]] == ["airline/2"] and rest["next_offset"] is None
    for query in ("limit=201", "limit=0", "offset=-1", "offset=99999999999999999999", "limit=x"):
        bad = await client.get(f"/battles/{battle_id}/attempts?{query}", headers=headers)
        assert bad.status_code == 422, query
