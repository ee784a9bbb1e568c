"""The durable outbox of the green agent's backend reporter, and exactly-once storage on our backend.

What must hold (the issue: a 30 s outage lost events, an outage at the battle's end lost the result, nothing was
replayed): every event reaches the backend once and in order, also across a backend stopped and restarted on the
same port and database, a lost answer (the backend applied the post, the poster never heard), a crash of the
reporter's process (the outbox is replayed by a new reporter, which skips what was delivered) and a torn last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from battle_backend.store.protocol import BattleClosed, DuplicateEvent
from battle_backend.store.records import FinishSpec
from battle_backend.store.sqlite.schema import LATEST_VERSION, SCHEMA_V1
from battle_backend.store.sqlite.store import SQLiteStore
from battle_backend.testing import FakeA2AAgent
from green_agent.service.backend_client import BackendReporter, RetryPolicy
from green_agent.service.outbox import OUTBOX_FILE, load_outbox
from tests.battle_backend.conftest import Arena, progress, result, wait_until
from tests.support.backend_process import RestartableBackend, restartable_backend
from tests.support.servers import serve_app

REPO = Path(__file__).resolve().parents[3]
QUICK = RetryPolicy(initial_delay_s=0.02, multiplier=2, max_delay_s=0.2)
LIMIT_S = 60.0


def records(path: Path) -> list[dict[str, Any]]:
    """Every line of an outbox file, parsed (a bad line fails the test)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def green_events(db: Path, battle_id: str) -> list[dict[str, Any]]:
    """The events a reporter posted, as stored (with their idempotency key ``event_id``, which the API no longer
    shows: read from the database file; system entries have no key)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT payload FROM battle_events WHERE battle_id = ? AND event_id IS NOT NULL ORDER BY seq", (battle_id,)
        ).fetchall()
    return [json.loads(payload) for (payload,) in rows]


def db_of(arena: Arena) -> Path:
    """The SQLite file of the arena's backend."""
    path = arena.backend.settings.db_path
    assert isinstance(path, Path)
    return path


def seq_of(entry: dict[str, Any], battle_id: str) -> int:
    """The sequence number of a reporter's idempotency key ``<battle id>:<reporter nonce>:<seq>``."""
    prefix, nonce, seq = entry["event_id"].rsplit(":", 2)
    assert prefix == battle_id and len(nonce) == 8, entry["event_id"]
    return int(seq)


def assert_once_in_order(battle: dict[str, Any], db: Path, battle_id: str, count: int) -> None:
    """Events 1..count each stored once, in order, the last one the result, and the battle finished by it; no key
    shown by the API."""
    assert not [entry for entry in battle["interact_history"] if "event_id" in entry]
    posted = green_events(db, battle_id)
    assert [seq_of(e, battle_id) for e in posted] == list(range(1, count + 1)), posted
    assert [e["is_result"] for e in posted] == [False] * (count - 1) + [True]
    assert battle["state"] == "finished"


# --- a recording backend whose availability the test switches -------------------------------------------------------


@dataclass
class Switchable:
    """Records every POST; answers 503 while ``down``, else 204 (400 for a second result, as AgentBeats)."""

    down: bool = False
    posts: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def post(request: Request) -> Response:
            body = await request.json()
            self.posts.append(body)
            if self.down:
                return Response("backend restarting", status_code=503)
            if body.get("is_result") and any(e.get("is_result") for e in self.accepted):
                return Response(status_code=400)
            self.accepted.append(body)
            return Response(status_code=204)

        return Starlette(routes=[Route("/battles/{battle_id}", post, methods=["POST"])])


CRASHING_REPORTER = """
import asyncio, os, sys
from pathlib import Path
from green_agent.service.backend_client import BackendReporter, RetryPolicy

async def main() -> None:
    rep = BackendReporter(sys.argv[1], "battle-7", retry=RetryPolicy(initial_delay_s=0.05, max_delay_s=0.1))
    await rep.open_outbox(Path(sys.argv[2]))
    for n in range(3):
        rep.progress(f"early {n}", detail={"n": n})
    assert await rep.flush(timeout=30)
    print("delivered", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the backend is down now
    for n in range(3):
        rep.progress(f"late {n}")
    rep.result("done", winner="white_agent", detail={"k": 1})
    await asyncio.sleep(1.0)  # the writer has fsync'd them; every post is answered 503 meanwhile
    os._exit(9)  # a crash: no close, no cleanup

asyncio.run(main())
"""


async def test_outbox_survives_a_crash_and_a_new_reporter_delivers_only_the_rest(tmp_path: Path) -> None:
    backend = Switchable()
    outbox = tmp_path / "run" / OUTBOX_FILE
    async with serve_app(backend.app()) as url:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CRASHING_REPORTER,
            url,
            str(outbox),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None
        async with asyncio.timeout(LIMIT_S):
            assert (await child.stdout.readline()).strip() == b"delivered"
            backend.down = True
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            assert await child.wait() == 9
        delivered_before = len(backend.accepted)
        backend.down = False

        replay = await BackendReporter.replay(outbox, retry=QUICK)
        assert replay is not None and replay.pending_count == 4
        replay.start()
        assert await replay.flush(timeout=LIMIT_S)
        await replay.aclose()

    assert delivered_before == 3
    assert [seq_of(body, "battle-7") for body in backend.accepted] == list(range(1, 8))
    assert len({body["event_id"].rsplit(":", 1)[0] for body in backend.accepted}) == 1  # one reporter's keys
    assert [b["message"] for b in backend.accepted] == [
        "early 0",
        "early 1",
        "early 2",
        "late 0",
        "late 1",
        "late 2",
        "done",
    ]
    # The replay never posted what the crashed process had delivered.
    after_crash = backend.posts[backend.posts.index(backend.accepted[3]) :]
    assert not {1, 2, 3} & {seq_of(b, "battle-7") for b in after_crash}
    marks = [r for r in records(outbox) if r["type"] == "mark"]
    assert [(m["seq"], m["status"]) for m in marks] == [(n, "delivered") for n in range(1, 8)]
    assert await BackendReporter.replay(outbox) is None  # nothing left


WRITTEN_NONCE = "feedc0de"
"""The reporter nonce of the outboxes the tests write by hand."""


def write_outbox(path: Path, battle_id: str, url: str, bodies: list[dict[str, Any]], *, token: bool = False) -> None:
    """An outbox as a reporter writes it: the header, then the events (reported now, none settled)."""
    header = {"type": "header", "format": "arena.outbox/1", "battle_id": battle_id, "backend_url": url, "token": token}
    lines = [json.dumps(header)]
    for seq, body in enumerate(bodies, start=1):
        body = {**body, "event_id": f"{battle_id}:{WRITTEN_NONCE}:{seq}"}
        lines.append(
            json.dumps({"type": "event", "seq": seq, "at": time.time(), "result": body["is_result"], "body": body})
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


async def test_a_torn_last_line_is_ignored_and_cut_off_before_the_next_write(tmp_path: Path) -> None:
    backend = Switchable()
    outbox = tmp_path / OUTBOX_FILE
    async with serve_app(backend.app()) as url:
        write_outbox(outbox, "b-1", url, [progress("m1"), progress("m2"), result("white")])
        mark = json.dumps({"type": "mark", "seq": 1, "status": "delivered", "code": 204})
        with outbox.open("a") as handle:
            handle.write(mark + '\n{"type": "mark", "seq": 2, "sta')  # the crash cut this one short

        state = load_outbox(outbox)
        assert state.torn_tail and [e.seq for e in state.pending] == [2, 3] and state.next_seq == 4
        replay = await BackendReporter.replay(outbox, retry=QUICK)
        assert replay is not None
        replay.start()
        assert await replay.flush(timeout=LIMIT_S)
        await replay.aclose()
    assert [b["event_id"] for b in backend.posts] == [f"b-1:{WRITTEN_NONCE}:2", f"b-1:{WRITTEN_NONCE}:3"]
    written = records(outbox)  # every line parses again: the torn one is gone
    assert [(r["seq"], r["status"]) for r in written if r["type"] == "mark"] == [
        (1, "delivered"),
        (2, "delivered"),
        (3, "delivered"),
    ]


# --- our backend: idempotency keys --------------------------------------------------------------------------------


async def _running_battle(arena: Arena) -> tuple[str, str]:
    """A battle in state running; (its id, its token)."""
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    token = arena.green_token(battle_id)
    assert token
    return battle_id, token


async def test_a_repeated_event_id_is_stored_once_and_a_repeated_result_is_a_204(arena: Arena) -> None:
    battle_id, token = await _running_battle(arena)
    headers = {"X-Battle-Token": token}
    for _ in range(2):
        response = await arena.post(battle_id, progress("p1", event_id=f"{battle_id}:1"))
        assert response.status_code == 204
    for _ in range(2):
        response = await arena.post(battle_id, result("white", event_id=f"{battle_id}:2"), headers)
        assert response.status_code == 204, response.text
    other = await arena.post(battle_id, result("green", event_id=f"{battle_id}:3"), headers)
    assert other.status_code == 400  # a different second result is still refused
    without_token = await arena.post(battle_id, result("white", event_id=f"{battle_id}:2"), {})
    assert without_token.status_code == 401  # the token is checked before the key
    battle = await arena.get(battle_id)
    assert [e["event_id"] for e in green_events(db_of(arena), battle_id)] == [f"{battle_id}:1", f"{battle_id}:2"]
    assert battle["result"]["winner"] == "white"
    bad = await arena.post(battle_id, progress("p", event_id=7))
    assert bad.status_code == 422 and "event_id" in bad.text


async def test_schema_v1_databases_are_migrated_and_keep_their_events(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);" + SCHEMA_V1 + "INSERT INTO schema_version VALUES (1);"
        "INSERT INTO battles (battle_id, green_agent_id, opponents, config, state, created_at, last_seq)"
        " VALUES ('b', 'g', '[]', '{}', 'running', 't', 1);"
        """INSERT INTO battle_events VALUES ('b', 1, '{"is_result":false,"event_id":"b:1"}', 't');"""
    )
    conn.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.append_event("b", {"is_result": False, "event_id": "b:2"}, event_id="b:2")
        with pytest.raises(DuplicateEvent) as duplicate:
            await store.append_event("b", {"is_result": False}, event_id="b:2")
        assert duplicate.value.record.seq == 2
        await store.append_event("b", {"is_result": True}, event_id="b:3", finish=FinishSpec("draw", {}, "t"))
        with pytest.raises(DuplicateEvent):  # a retried result of a finished battle: a duplicate, not closed
            await store.append_event("b", {"is_result": True}, event_id="b:3", finish=FinishSpec("draw", {}, "t"))
        with pytest.raises(BattleClosed):
            await store.append_event("b", {"is_result": True}, event_id="b:4", finish=FinishSpec("draw", {}, "t"))
        events = await store.list_events("b")
        assert [e.payload.get("event_id") for e in events] == ["b:1", "b:2", None]
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(path)) as check:
        assert check.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST_VERSION,)


class LosingTransport(httpx.AsyncBaseTransport):
    """Sends every request; for the ones ``lose`` picks, the backend applies it and then the answer is lost (the
    connection drops, or a proxy answers 503)."""

    def __init__(self, lose: Callable[[dict[str, Any]], str | None]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lose = lose

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        content = await response.aread()
        await response.aclose()
        what = self.lose(json.loads(request.content))
        if what == "drop":
            raise httpx.ReadError("connection reset after the backend applied the request", request=request)
        if what == "503":
            return httpx.Response(503, content=b"gateway lost the answer", request=request)
        return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_lost_answer_does_not_duplicate_an_event_or_the_result(arena: Arena) -> None:
    battle_id, token = await _running_battle(arena)
    lost: set[str] = set()

    def lose(body: dict[str, Any]) -> str | None:
        key = body["event_id"]
        seq = seq_of(body, battle_id)
        if key in lost or not (seq % 3 == 0 or seq % 4 == 0 or body["is_result"]):
            return None
        lost.add(key)
        return "drop" if seq % 2 else "503"

    http = httpx.AsyncClient(transport=LosingTransport(lose))
    rep = BackendReporter(arena.backend.url, battle_id, token=token, httpx_client=http, retry=QUICK)
    async with http, rep:
        for n in range(12):
            rep.progress(f"step {n}", detail={"n": n})
        rep.result("done", winner="white", detail={"k": 2})
        assert await rep.flush(timeout=LIMIT_S)
    assert rep.delivered_count == 13 and rep.result_status == "delivered" and rep.undelivered() == []
    assert len(lost) >= 5
    assert_once_in_order(await arena.get(battle_id), db_of(arena), battle_id, 13)


async def test_a_replay_without_the_battle_token_says_so_and_keeps_the_events(
    arena: Arena, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    battle_id, token = await _running_battle(arena)
    outbox = tmp_path / battle_id / OUTBOX_FILE
    # What a green agent stopped during an outage leaves: two events, and only the fact that there was a token.
    write_outbox(outbox, battle_id, arena.backend.url, [progress("before the restart"), result("white")], token=True)

    caplog.set_level(logging.WARNING)
    replay = await BackendReporter.replay(outbox, retry=QUICK)  # a restarted green agent: no token
    assert replay is not None
    replay.start()
    assert await replay.flush(timeout=LIMIT_S) is False  # stopped at the result, which needs the token
    await replay.aclose()
    assert "cannot deliver after a restart" in caplog.text and token not in caplog.text
    assert [e["message"] for e in green_events(db_of(arena), battle_id)] == ["before the restart"]
    assert token not in outbox.read_text()
    assert [e.is_result for e in load_outbox(outbox).pending] == [True]  # still there for a reporter with the token

    resumed = BackendReporter(arena.backend.url, battle_id, token=token, retry=QUICK)  # the battle given again
    await resumed.open_outbox(outbox)
    resumed.start()
    assert await resumed.flush(timeout=LIMIT_S)
    await resumed.aclose()
    assert_once_in_order(await arena.get(battle_id), db_of(arena), battle_id, 2)


# --- a real backend process, stopped and restarted on the same port and database -------------------------------------


async def _battle_on(backend: RestartableBackend, stack: contextlib.AsyncExitStack) -> tuple[str, str]:
    """Fake agents (no launchers) registered with the backend process and a battle started; (id, token)."""
    green, white = FakeA2AAgent(name="green"), FakeA2AAgent(name="white")
    stack.push_async_callback(green.aclose)
    stack.push_async_callback(white.aclose)
    green_url = await stack.enter_async_context(serve_app(green.app))
    white_url = await stack.enter_async_context(serve_app(white.app))
    async with httpx.AsyncClient(base_url=backend.url, trust_env=False, timeout=30) as http:
        requirement = [{"role": "blue_agent", "name": "white_agent", "required": True}]
        body = {"alias": "green", "agent_url": green_url, "launcher_url": "", "is_green": True}
        green_id = (await http.post("/agents", json={**body, "participant_requirements": requirement})).json()
        body = {"alias": "white", "agent_url": white_url, "launcher_url": "", "is_green": False}
        white_id = (await http.post("/agents", json=body)).json()
        create = {
            "green_agent_id": green_id["agent_id"],
            "opponents": [{"name": "white_agent", "agent_id": white_id["agent_id"]}],
        }
        battle_id = (await http.post("/battles", json=create)).json()["battle_id"]
    async with asyncio.timeout(LIMIT_S):
        (start,) = await green.wait_for("battle_start")
    return battle_id, str(start["battle_token"])


async def _battle(backend: RestartableBackend, battle_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"{backend.url}/battles/{battle_id}")
        assert response.status_code == 200
        return response.json()


async def test_a_backend_process_stopped_and_restarted_gets_every_event_once_in_order(tmp_path: Path) -> None:
    async with restartable_backend(tmp_path) as backend, contextlib.AsyncExitStack() as stack:
        battle_id, token = await _battle_on(backend, stack)
        rep = BackendReporter(backend.url, battle_id, token=token, retry=QUICK)
        await rep.open_outbox(tmp_path / battle_id / OUTBOX_FILE)
        rep.start()
        for n in range(10):
            rep.progress(f"before {n}", detail={"n": n})
        assert await rep.flush(timeout=LIMIT_S)

        await backend.stop()
        for n in range(10):
            rep.progress(f"during {n}", detail={"n": n})
        rep.result("done", winner="white", detail={"k": 2})  # the battle ends while the backend is down
        await asyncio.sleep(2.0)
        assert rep.pending_count == 11 and rep.result_status == "pending"
        await backend.start()

        assert await rep.flush(timeout=LIMIT_S)
        await rep.aclose()
        assert rep.result_status == "delivered" and rep.undelivered() == []
        battle = await _battle(backend, battle_id)
    assert_once_in_order(battle, tmp_path / "backend.sqlite3", battle_id, 21)
    assert [e["message"] for e in green_events(tmp_path / "backend.sqlite3", battle_id)][9:12] == [
        "before 9",
        "during 0",
        "during 1",
    ]
    assert any("Backend restarted" in str(e.get("message")) for e in battle["interact_history"])


async def test_the_green_agent_replays_outboxes_of_its_runs_directory_on_start(tmp_path: Path) -> None:
    from green_agent.service.a2a_server import create_app
    from tests.support.servers import serve_app_factory

    backend = Switchable(down=True)
    runs = tmp_path / "runs"
    async with serve_app(backend.app()) as url:
        rep = BackendReporter(url, "left-over", retry=QUICK)
        await rep.open_outbox(runs / "left-over" / OUTBOX_FILE)
        rep.progress("p")
        rep.result("r", winner="white", detail={})
        await asyncio.sleep(0.2)
        await rep.aclose(timeout=0)  # the green agent stopped during the outage
        assert backend.accepted == []
        backend.down = False
        async with serve_app_factory(lambda card: create_app(card, runs_dir=runs), startup_timeout_s=60):
            await wait_until(lambda: asyncio.sleep(0, len(backend.accepted) == 2), limit=LIMIT_S)
    assert [seq_of(b, "left-over") for b in backend.accepted] == [1, 2]
    assert load_outbox(runs / "left-over" / OUTBOX_FILE).pending == []


async def test_after_the_battle_the_registry_keeps_delivering_and_a_shutdown_leaves_the_rest_in_the_outbox(
    tmp_path: Path,
) -> None:
    from green_agent.engine.config import BattleConfig
    from green_agent.service.running_battles import BattleRegistry

    backend = Switchable(down=True)
    registry = BattleRegistry(scoring=None, runs_dir=tmp_path, default_config=BattleConfig())  # type: ignore[arg-type]
    async with serve_app(backend.app()) as url:
        finished = BackendReporter(url, "finished", retry=QUICK)
        await registry._open_outbox("finished", finished)
        finished.progress("last progress")
        finished.result("done", winner="white", detail={})
        await registry._hand_over(finished, None)  # the battle ended during the outage
        await asyncio.sleep(0.3)
        assert finished.pending_count == 2 and backend.accepted == []
        backend.down = False
        await wait_until(lambda: asyncio.sleep(0, finished.pending_count == 0), limit=LIMIT_S)
        assert [seq_of(b, "finished") for b in backend.accepted] == [1, 2]

        backend.down = True
        stuck = BackendReporter(url, "stuck", retry=QUICK)
        await registry._open_outbox("stuck", stuck)
        stuck.result("done", winner="white", detail={})
        await registry._hand_over(stuck, None)
        await asyncio.sleep(0.3)
        await registry.aclose()  # the green agent stops: nothing waits for the backend
    assert stuck.result_status == "undelivered"
    assert [e.seq for e in load_outbox(tmp_path / "stuck" / OUTBOX_FILE).pending] == [1]
