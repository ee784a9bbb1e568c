"""BackendReporter against a small AgentBeats-like backend on loopback: order, retries, exactly-once, the outbox.

(The outage, restart and idempotency tests against our real backend are in tests/battle_backend/http/test_outbox.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from green_agent.service.backend_client import BackendReporter
from green_agent.service.outbox import RetryPolicy, utc_timestamp
from tests.support.servers import serve_app

FAST = RetryPolicy(initial_delay_s=0.01, multiplier=2, max_delay_s=0.05)
TOKEN = "battle-token-s3cr3t"


@dataclass
class Backend:
    """Records every POST; ``answer(n, body)`` picks the status of the n-th request (0-based)."""

    answer: Callable[[int, dict[str, Any]], int | Response] = lambda n, body: 204
    posts: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hang: asyncio.Event | None = None

    @property
    def accepted(self) -> list[dict[str, Any]]:
        """Bodies the backend answered 2xx, in arrival order."""
        return [body for body, status in zip(self.posts, self._statuses, strict=True) if 200 <= status < 300]

    _statuses: list[int] = field(default_factory=list)

    def app(self) -> Starlette:
        async def post(request: Request) -> Response:
            body = await request.json()
            n = len(self.posts)
            self.posts.append(body)
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            self.paths.append(request.url.path)
            if self.hang is not None:
                self._statuses.append(0)
                await self.hang.wait()
                return Response(status_code=204)
            answer = self.answer(n, body)
            response = answer if isinstance(answer, Response) else Response(status_code=answer)
            self._statuses.append(response.status_code)
            return response

        return Starlette(routes=[Route("/battles/{battle_id}", post, methods=["POST"])])


@contextlib.asynccontextmanager
async def backend_server(backend: Backend) -> AsyncIterator[str]:
    """Serve the test backend; release a hanging handler before the server stops."""
    async with serve_app(backend.app(), graceful_shutdown_s=1) as url:
        try:
            yield url
        finally:
            if backend.hang is not None:
                backend.hang.set()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def reporter(url: str, **options: Any) -> BackendReporter:
    options.setdefault("retry", FAST)
    return BackendReporter(url, "battle-42", reported_by="arena green agent", **options)


async def test_events_arrive_in_order_with_agentbeats_shapes() -> None:
    backend = Backend()
    async with backend_server(backend) as url:
        async with reporter(url) as rep:
            for n in range(20):
                rep.progress(f"step {n}", detail={"n": n}, markdown_content=f"**{n}**" if n % 2 else None)
            assert rep.result("done", winner="green_agent", detail={"pass_k": 0.5}, markdown_content="# Summary")
        assert rep.undelivered() == []
        assert rep.result_status == "delivered" and rep.delivered_count == 21
    assert backend.paths == ["/battles/battle-42"] * 21
    assert [p["message"] for p in backend.posts] == [f"step {n}" for n in range(20)] + ["done"]
    first, second, result = backend.posts[0], backend.posts[1], backend.posts[-1]
    assert first == {
        "is_result": False,
        "message": "step 0",
        "reported_by": "arena green agent",
        "timestamp": first["timestamp"],
        "detail": {"n": 0},
        "event_id": first["event_id"],
    }
    prefix, nonce, seq = first["event_id"].split(":")  # <battle id>:<reporter nonce>:<seq>
    assert (prefix, len(nonce), seq) == ("battle-42", 8, "1")
    assert second["event_id"] == f"battle-42:{nonce}:2"
    assert second["markdown_content"] == "**1**"
    assert result == {
        "is_result": True,
        "message": "done",
        "winner": "green_agent",
        "detail": {"pass_k": 0.5},
        "timestamp": result["timestamp"],
        "reported_by": "arena green agent",
        "markdown_content": "# Summary",
        "event_id": f"battle-42:{nonce}:21",
    }
    assert first["timestamp"].endswith("Z") and "T" in first["timestamp"]
    assert sorted(p["timestamp"] for p in backend.posts) == [p["timestamp"] for p in backend.posts]


async def test_server_errors_are_retried_without_reordering() -> None:
    # The first two posts fail with 500/503, then everything is accepted.
    backend = Backend(answer=lambda n, body: 500 if n == 0 else 503 if n == 1 else 204)
    async with backend_server(backend) as url, reporter(url) as rep:
        rep.progress("a")
        rep.progress("b")
        rep.result("r", winner="green_agent", detail={})
        assert await rep.flush(timeout=30)
    assert [p["message"] for p in backend.posts] == ["a", "a", "a", "b", "r"]
    assert [p["message"] for p in backend.accepted] == ["a", "b", "r"]
    assert rep.undelivered() == [] and rep.result_status == "delivered"


async def test_429_is_retried_and_other_4xx_are_not() -> None:
    def answer(n: int, body: dict[str, Any]) -> int | Response:
        if body["message"] == "throttled" and n == 0:
            return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "0"})
        if body["message"] == "forbidden":
            return PlainTextResponse("no", status_code=403)
        return 204

    backend = Backend(answer=answer)
    async with backend_server(backend) as url, reporter(url) as rep:
        rep.progress("throttled")
        rep.progress("forbidden")
        rep.progress("after")
        assert await rep.flush(timeout=30)
    assert [p["message"] for p in backend.posts] == ["throttled", "throttled", "forbidden", "after"]
    (failure,) = rep.failures()
    assert failure.event["message"] == "forbidden" and failure.status_code == 403 and failure.attempts == 1
    assert "HTTP 403" in failure.reason


async def test_result_is_posted_exactly_once() -> None:
    backend = Backend()
    async with backend_server(backend) as url, reporter(url) as rep:
        assert rep.result("first", winner="green_agent", detail={"k": 4}) is True
        assert rep.result("second", winner="white_agent", detail={}) is False
        await rep.flush(timeout=30)
        assert rep.result("third", winner="white_agent", detail={}) is False
    results = [p for p in backend.posts if p["is_result"]]
    assert [r["message"] for r in results] == ["first"]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_400_on_the_result_means_battle_finished_and_is_not_retried(tmp_path: Path) -> None:
    backend = Backend(answer=lambda n, body: 400 if body["is_result"] else 204)
    outbox = tmp_path / "run" / "outbox.jsonl"
    async with backend_server(backend) as url, reporter(url) as rep:
        await rep.open_outbox(outbox)
        rep.progress("p")
        rep.result("r", winner="green_agent", detail={})
    assert [p["message"] for p in backend.posts] == ["p", "r"]
    assert rep.result_status == "rejected"
    (failure,) = rep.failures()
    assert "battle already finished" in failure.reason and failure.status_code == 400
    marks = [r for r in _records(outbox) if r["type"] == "mark"]
    assert [(m["seq"], m["status"], m.get("code")) for m in marks] == [(1, "delivered", 204), (2, "rejected", 400)]
    assert "battle already finished" in marks[1]["reason"]


async def test_unreachable_backend_never_raises_and_expires_after_the_retention(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.jsonl"
    rep = reporter(_closed_port_url(), token=TOKEN, retention_s=0.3)
    async with rep:
        await rep.open_outbox(outbox)
        rep.progress("one", detail={"x": 1})
        rep.progress("two")
        rep.result("over", winner="green_agent", detail={"ok": True})
        assert await rep.flush(timeout=30)
    assert [e["message"] for e in rep.undelivered()] == ["one", "two", "over"]
    assert rep.result_status == "undelivered"
    assert all("retention of 0.3 s" in f.reason for f in rep.failures())
    # The head was retried; the two behind it were never sent ahead of it and passed their deadline meanwhile.
    assert [f.attempts > 0 for f in rep.failures()] == [True, False, False]
    records = _records(outbox)
    assert [r["body"] for r in records if r["type"] == "event"] == rep.undelivered()
    assert [r["status"] for r in records if r["type"] == "mark"] == ["expired"] * 3
    header = records[0]
    assert header["type"] == "header" and header["token"] is True and header["battle_id"] == "battle-42"
    assert TOKEN not in outbox.read_text()


async def test_close_deadline_cuts_off_a_hanging_backend_and_the_outbox_keeps_the_rest(tmp_path: Path) -> None:
    backend = Backend(hang=asyncio.Event())
    outbox = tmp_path / "outbox.jsonl"
    async with backend_server(backend) as url:
        rep = reporter(url, request_timeout_s=60)
        await rep.open_outbox(outbox)
        rep.progress("stuck")
        rep.progress("queued")
        rep.result("final", winner="green_agent", detail={})
        while not backend.posts:  # the first post is now hanging in the backend
            await asyncio.sleep(0.01)
        await rep.aclose(timeout=0.2)
        await rep.aclose(timeout=0.2)  # closing twice is harmless
    assert [e["message"] for e in rep.undelivered()] == ["stuck", "queued", "final"]
    assert all("kept in" in f.reason for f in rep.failures())
    assert rep.result_status == "undelivered"
    records = _records(outbox)
    assert [r["seq"] for r in records if r["type"] == "event"] == [1, 2, 3]
    assert not [r for r in records if r["type"] == "mark"]  # all three are still to deliver: a replay takes them


async def test_token_goes_in_headers_only_and_never_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    backend = Backend(answer=lambda n, body: 500 if n == 0 else 204)
    async with backend_server(backend) as url:
        async with reporter(url, token=TOKEN) as rep:
            rep.progress("p", detail={"note": "hello"})
            rep.result("r", winner="green_agent", detail={})
        assert TOKEN not in repr(rep)
    assert all(h["authorization"] == f"Bearer {TOKEN}" and h["x-battle-token"] == TOKEN for h in backend.headers)
    assert all(TOKEN not in json.dumps(body) for body in backend.posts)
    assert TOKEN not in caplog.text
    assert "retrying" in caplog.text  # the debug log did run (and still holds no token)


async def test_no_token_no_auth_headers() -> None:
    backend = Backend()
    async with backend_server(backend) as url, reporter(url) as rep:
        rep.progress("p")
        await rep.flush(timeout=30)
    assert "authorization" not in backend.headers[0] and "x-battle-token" not in backend.headers[0]


async def test_details_are_snapshotted_and_made_json_safe() -> None:
    backend = Backend()
    detail: dict[str, Any] = {"path": Path("/tmp/x"), "items": [1]}
    async with backend_server(backend) as url, reporter(url) as rep:
        rep.progress("p", detail=detail)
        detail["items"].append(2)  # a later change by the caller must not leak into the queued event
        await rep.flush(timeout=30)
    assert backend.posts[0]["detail"] == {"path": "/tmp/x", "items": [1]}


async def test_events_after_close_are_recorded_not_raised() -> None:
    backend = Backend()
    async with backend_server(backend) as url:
        async with reporter(url) as rep:
            rep.progress("in time")
        rep.progress("too late")
    assert [p["message"] for p in backend.posts] == ["in time"]
    assert [e["message"] for e in rep.undelivered()] == ["too late"]


def test_retry_policy_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy()
    assert [policy.delay_after(n) for n in range(1, 7)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert policy.delay_after(10_000) == 5.0  # retried until the retention: the delay never overflows


def test_timestamp_is_iso_utc() -> None:
    from datetime import datetime

    stamp = utc_timestamp()
    assert stamp.endswith("Z")
    assert datetime.fromisoformat(stamp).utcoffset() is not None


async def test_reported_by_defaults_to_green_agent() -> None:
    backend = Backend()
    async with backend_server(backend) as url, BackendReporter(url, "b-1", retry=FAST) as rep:
        rep.progress("p")
        await rep.flush(timeout=30)
    assert backend.posts[0]["reported_by"] == "green_agent"
    assert backend.paths == ["/battles/b-1"]
