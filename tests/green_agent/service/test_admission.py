"""The green agent's bounds on battles and attempts at once (green_agent/service/admission.py): the queue's rules,
and what an AgentBeats backend is told when a battle waits (a progress event with its position) or is refused (a
result whose ``detail.reason`` is ``busy``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from green_agent.engine.config import ConfigError
from green_agent.service.a2a_server import create_app
from green_agent.service.admission import Admission, CapacityError
from green_agent.service.running_battles import ServiceLimits
from tests.green_agent.service.recording_backend import Recorded, make_recording_backend
from tests.green_agent.service.test_agentbeats_flow import battle_start, send_v03
from tests.support.servers import serve_app, serve_app_factory

MOCK = {"mode": "manual", "domain": "mock", "split": "base", "task_id": 0, "k": 2, "concurrency": 2}


def test_battles_beyond_the_bounds_wait_in_order_and_a_full_queue_refuses() -> None:
    admission = Admission(max_running_battles=2, max_attempts_in_flight=4, max_queued_battles=2)
    a, b = admission.enter("a", 3), admission.enter("b", 1)
    assert a.granted.is_set() and b.granted.is_set() and admission.attempts_reserved == 4
    c = admission.enter("c", 2)  # 4 attempts reserved already
    d = admission.enter("d", 1)  # would fit after b leaves, but c is first: no overtaking
    assert not c.granted.is_set() and (admission.position(c), admission.position(d)) == (1, 2)
    with pytest.raises(CapacityError, match=r"busy: .* at most 2 battles and 4 attempts .* queue of 2 is full"):
        admission.enter("e", 1)
    admission.release(b)
    assert not c.granted.is_set() and not d.granted.is_set()  # 3 + 2 > 4: c still waits, and d behind it
    admission.release(a)
    assert c.granted.is_set() and d.granted.is_set() and admission.attempts_reserved == 3
    admission.release(d)
    admission.release(d)  # twice is harmless
    assert admission.running == 1 and admission.queued == 0


def test_a_queued_battle_that_leaves_frees_its_place_and_one_too_large_is_refused_naming_concurrency() -> None:
    admission = Admission(max_running_battles=1, max_attempts_in_flight=4, max_queued_battles=1)
    first, waiting = admission.enter("a", 4), admission.enter("b", 4)
    admission.release(waiting)  # cancelled while queued
    assert admission.queued == 0 and admission.enter("c", 1).granted.is_set() is False
    with pytest.raises(ConfigError, match=r"^concurrency: 5 exceeds .* limit of 4 attempts in flight") as caught:
        admission.check(5)
    assert not isinstance(caught.value, CapacityError)
    assert first.granted.is_set()


def _silent_white() -> tuple[Starlette, asyncio.Event]:
    """An agent whose card answers and whose every message waits until the test ends."""
    release = asyncio.Event()

    async def card(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        body: dict[str, Any] = {"name": "silent", "url": base + "/", "version": "1", "capabilities": {}}
        return JSONResponse({**body, "defaultInputModes": ["text"], "defaultOutputModes": ["text"], "skills": []})

    async def message(request: Request) -> Response:
        await release.wait()
        return Response(status_code=503)

    routes = [
        Route("/.well-known/agent-card.json", card, methods=["GET"]),
        Route("/.well-known/agent.json", card, methods=["GET"]),
        Route("/", message, methods=["POST"]),
    ]
    return Starlette(routes=routes), release


async def _until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


async def test_a_backend_hears_queued_with_the_position_or_busy_and_a_queued_battle_starts_when_a_place_frees(
    tmp_path: Path,
) -> None:
    apps: list[Starlette] = []

    def factory(url: str) -> Starlette:
        limits = ServiceLimits(max_running_battles=1, max_attempts_in_flight=2, max_queued_battles=1)
        apps.append(create_app(url, runs_dir=tmp_path / "runs", limits=limits))
        return apps[0]

    white_app, release = _silent_white()
    records = {name: Recorded() for name in "abc"}
    async with contextlib.AsyncExitStack() as stack:
        green = await stack.enter_async_context(serve_app_factory(factory, startup_timeout_s=60))
        white = await stack.enter_async_context(serve_app(white_app))
        backends = {
            n: await stack.enter_async_context(serve_app(make_recording_backend(r))) for n, r in records.items()
        }
        ids = {name: f"adm-{name}-{uuid.uuid4().hex[:8]}" for name in "abc"}
        answers = {}
        for name in "abc":
            start = battle_start(ids[name], backends[name], white, task_config=json.dumps(MOCK))
            answers[name] = await send_v03(green, start)
        assert "accepted:" in answers["a"], answers
        assert "accepted and queued (position 1)" in answers["b"], answers
        assert "refused: busy:" in answers["c"], answers

        await _until(lambda: records["c"].results, "the busy refusal posted")
        (refusal,) = records["c"].results
        assert refusal["winner"] == "draw" and refusal["detail"]["reason"] == "busy", refusal
        await _until(lambda: records["b"].events, "the queued note posted")
        queued = records["b"].events[0]
        assert not queued["is_result"] and queued["detail"]["reason"] == "queued", queued
        assert queued["detail"]["queue_position"] == 1 and queued["detail"]["max_running_battles"] == 1, queued
        assert "battles_queued" in (await _health(green)) and (await _health(green))["battles_queued"] == 1

        registry = apps[0].state.registry
        await registry.cancel(ids["a"])  # a place frees: b starts
        await _until(
            lambda: any((e.get("detail") or {}).get("type") == "battle_started" for e in records["b"].events),
            "the queued battle started",
        )
        assert (await _health(green))["battles_queued"] == 0
        await registry.cancel(ids["b"])
        release.set()


async def _health(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        body: dict[str, Any] = (await http.get(url + "/health")).json()
        return body
