"""A real battle backend process (SQLite file or PostgreSQL URL) on a free loopback port, and a running battle on it
whose token the test holds: what the pool-member tests lease from (issue 29).

The battle's green and white agents are fakes (battle_backend.testing) served by the test on loopback; the green one
only receives battle_start (the token). Every process and server is stopped when the ``async with`` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from battle_backend.testing import FakeA2AAgent, FakeLauncher
from green_agent.service.attempt_lease_client import AttemptLeaseClient
from green_agent.wire.attempt_leases import AttemptOut
from launcher.ports import free_port, loopback_url
from launcher.processes import ProcessGroup, wait_until_ready
from tests.support.servers import serve_app

REPO = Path(__file__).resolve().parents[3]
WAIT_LIMIT_S = 60.0


@dataclass
class PoolBackend:
    url: str
    http: httpx.AsyncClient
    fakes_url: str
    fakes: Starlette
    green: FakeA2AAgent
    group: ProcessGroup
    """The test's process group (the backend; members started in their own process)."""

    async def battle(self, white_name: str = "white_agent") -> tuple[str, str]:
        """A running battle against an opponent named ``white_name``: (its id, the battle token its green agent
        received)."""
        agents: dict[str, str] = {}
        for alias, green in (("green", True), ("white", False)):
            body: dict[str, Any] = {
                "alias": alias,
                "agent_url": f"{self.fakes_url}/{alias}",
                "launcher_url": f"{self.fakes_url}/{alias}-launcher",
                "is_green": green,
            }
            if green:
                body["participant_requirements"] = [{"role": "blue_agent", "name": white_name, "required": True}]
            answer = await self.http.post(f"{self.url}/agents", json=body)
            assert answer.status_code == 201, answer.text
            agents[alias] = answer.json()["agent_id"]
        created = await self.http.post(
            f"{self.url}/battles",
            json={
                "green_agent_id": agents["green"],
                "opponents": [{"name": white_name, "agent_id": agents["white"]}],
            },
        )
        assert created.status_code == 201, created.text
        battle_id = str(created.json()["battle_id"])
        async with asyncio.timeout(WAIT_LIMIT_S):
            while True:
                starts = [m for m in self.green.messages_of_type("battle_start") if m.get("battle_id") == battle_id]
                if starts and starts[0].get("battle_token"):
                    return battle_id, str(starts[0]["battle_token"])
                await asyncio.sleep(0.05)

    async def over(self, battle_id: str) -> dict[str, Any]:
        """The battle as the backend shows it once no longer running (a result is delivered in the background; the
        caller bounds the wait)."""
        while True:
            answer = await self.http.get(f"{self.url}/battles/{battle_id}")
            shown: dict[str, Any] = answer.json()
            if shown["state"] != "running":
                return shown
            await asyncio.sleep(0.1)


async def stored_attempts(client: AttemptLeaseClient, battle_id: str, token: str) -> list[AttemptOut]:
    """Every attempt the backend's queue holds for the battle, page by page (publish order)."""
    out: list[AttemptOut] = []
    offset: int | None = 0
    while offset is not None:
        page = await client.read(battle_id, token=token, offset=offset, limit=100)
        out.extend(page.attempts)
        offset = page.next_offset
    return out


async def settled(
    client: AttemptLeaseClient, battle_id: str, token: str, total: int, *, limit_s: float
) -> list[AttemptOut]:
    """The battle's stored attempts once ``total`` of them are done or failed (``limit_s`` turns a hang into a
    failure)."""
    async with asyncio.timeout(limit_s):
        while True:
            page = await client.read(battle_id, token=token, limit=1)
            if page.counts.get("done", 0) + page.counts.get("failed", 0) == total:
                return await stored_attempts(client, battle_id, token)
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def pool_backend(tmp_path: Path, db: str) -> AsyncIterator[PoolBackend]:
    """``python -m battle_backend --db DB`` on a free port, with fake agents to start battles on it."""
    fakes = Starlette()
    green, white = FakeA2AAgent(name="green"), FakeA2AAgent(name="white")
    launchers = [FakeLauncher(), FakeLauncher()]
    for prefix, app in (
        ("green", green.app),
        ("white", white.app),
        ("green-launcher", launchers[0].app),
        ("white-launcher", launchers[1].app),
    ):
        fakes.router.routes.append(Mount(f"/{prefix}", app=app))
    async with (
        ProcessGroup(tmp_path / "logs", handle_signals=False) as group,
        serve_app(fakes) as fakes_url,
        httpx.AsyncClient(trust_env=False, timeout=30) as http,
    ):
        try:
            port = free_port()
            url = loopback_url(port)
            argv = [sys.executable, "-m", "battle_backend", "--port", str(port), "--db", db]
            argv += ["--ready-poll-interval", "0.5", "--battle-timeout-default", "3600"]
            proc = group.start("backend", argv, cwd=REPO)
            await wait_until_ready(proc, url + "/health", timeout_s=120)
            yield PoolBackend(url, http, fakes_url, fakes, green, group)
        finally:
            for agent in (green, white):
                await agent.aclose()
            for launcher in launchers:
                await launcher.aclose()
