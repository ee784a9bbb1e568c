"""Start-up: the green agent answers /health before its scoring workers are warm, and says when they are.

``arena run`` sends the battle as soon as /health answers, so the seconds the scoring workers and the statistics
library take to start must not be spent before it (issue 15: /health within 3 s). These tests hold the warm-up
back on purpose: if the lifespan waited for it, the app would never start and the tests would fail.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from green_agent.engine.tau.scoring import ScoringPool
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import resolve_operator_token
from tests.support import TEST_OPERATOR_TOKEN

pytestmark = pytest.mark.asyncio


async def _health(app: object) -> dict[str, object]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://green.test") as client:
        response = await client.get("/health")
    assert response.status_code == 200
    body: dict[str, object] = response.json()
    return body


async def test_health_answers_while_the_scoring_workers_are_still_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()
    starts: list[int] = []

    async def slow_start(self: ScoringPool) -> None:
        starts.append(1)
        await release.wait()

    monkeypatch.setattr(ScoringPool, "start", slow_start)
    app = create_app("http://green.test", runs_dir=tmp_path, operator_token=resolve_operator_token(TEST_OPERATOR_TOKEN))
    async with asyncio.timeout(60), app.router.lifespan_context(app):
        before = await _health(app)
        assert before["status"] == "ok"
        assert before["warm"] is False
        while not starts:  # the warm-up was started, not skipped (it runs as soon as the loop gets to it)
            await asyncio.sleep(0.01)
        assert (await _health(app))["warm"] is False
        release.set()
        while not (await _health(app))["warm"]:
            await asyncio.sleep(0.05)


async def test_a_failed_warm_up_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken_start(self: ScoringPool) -> None:
        raise RuntimeError("no workers today")

    monkeypatch.setattr(ScoringPool, "start", broken_start)
    app = create_app("http://green.test", runs_dir=tmp_path, operator_token=resolve_operator_token(TEST_OPERATOR_TOKEN))
    async with asyncio.timeout(60), app.router.lifespan_context(app):
        while not (await _health(app))["warm"]:
            await asyncio.sleep(0.05)
        assert (await _health(app))["status"] == "ok"
