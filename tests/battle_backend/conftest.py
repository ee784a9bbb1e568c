"""Fixtures for the battle backend tests: a real backend on loopback (SQLite in tmp_path), fake A2A agents and
fake launchers on loopback, and helpers that drive a battle the way agents would.

Every server is started with tests.support.servers.serve_app and stopped when the test's exit stack closes.
Waits are bounded by ``asyncio.timeout`` only to turn a hang into a failure; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from battle_backend import BackendSettings, create_app
from battle_backend.context import BackendContext
from battle_backend.store.postgres.store import PostgresStore
from battle_backend.store.sqlite.store import SQLiteStore
from battle_backend.testing import FakeA2AAgent, FakeLauncher, LauncherMode
from tests.support.servers import serve_app

FAST_SETTINGS: dict[str, Any] = {
    "ready_timeout_s": 5.0,
    "ready_poll_interval_s": 0.5,
    "battle_timeout_default_s": 120.0,
    "green_ack_timeout_s": 1.0,
    "http_timeout_s": 5.0,
    "a2a_timeout_s": 5.0,
}
WAIT_LIMIT_S = 30.0

WHITE_REQUIREMENT = [{"role": "blue_agent", "name": "white_agent", "required": True}]


async def wait_until(check: Callable[[], Awaitable[Any]], *, limit: float = WAIT_LIMIT_S) -> Any:
    """Poll ``check`` until it returns something truthy (bounded so that a hang fails the test)."""
    async with asyncio.timeout(limit):
        while True:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.02)


@dataclass
class RunningBackend:
    """A backend served on loopback with a client pointed at it."""

    url: str
    client: httpx.AsyncClient
    app: Any
    settings: BackendSettings

    @property
    def ctx(self) -> BackendContext:
        """The app's internals (store, hub, scheduler) for assertions that the API cannot express."""
        return self.app.state.backend  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def run_backend(db_path: Path, **overrides: Any) -> AsyncIterator[RunningBackend]:
    """Serve a backend on ``db_path`` with fast test settings (overridable)."""
    settings = BackendSettings(db_path=db_path, **{**FAST_SETTINGS, **overrides})
    app = create_app(settings)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, trust_env=False, timeout=30.0) as client:
        yield RunningBackend(url=url, client=client, app=app, settings=settings)


@dataclass
class Registered:
    """An agent registered with the backend, with its fake server and fake launcher."""

    agent_id: str
    alias: str
    url: str
    fake: FakeA2AAgent
    launcher: FakeLauncher | None
    launcher_url: str


@dataclass
class Arena:
    """Builds battles out of fake agents against one backend.

    All fake agents and launchers of a test are mounted under their own path prefix in ONE loopback server
    (started on first use), which keeps each test to two servers however many agents it registers.
    """

    backend: RunningBackend
    stack: contextlib.AsyncExitStack
    agents: list[Registered] = field(default_factory=list)
    _host: Starlette | None = None
    _host_url: str = ""

    async def mount(self, prefix: str, app: Any) -> str:
        """Serve ``app`` under ``/{prefix}`` of the shared fakes server; returns its URL."""
        if self._host is None:
            self._host = Starlette()
            self._host_url = await self.stack.enter_async_context(serve_app(self._host))
        self._host.router.routes.append(Mount(f"/{prefix}", app=app))
        return f"{self._host_url}/{prefix}"

    @property
    def client(self) -> httpx.AsyncClient:
        """Client of the backend."""
        return self.backend.client

    async def agent(
        self,
        alias: str,
        *,
        green: bool = False,
        launcher: LauncherMode | None = "ready",
        launcher_url: str | None = None,
        requirements: list[dict[str, Any]] | None = None,
        battle_timeout: float | None = None,
        ack_delay_s: float = 0.0,
        rpc_error: bool = False,
        on_battle_start: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> Registered:
        """Start a fake agent (and launcher) and register it; ``launcher=None`` registers no launcher."""
        fake = FakeA2AAgent(name=alias, ack_delay_s=ack_delay_s, rpc_error=rpc_error, on_battle_start=on_battle_start)
        self.stack.push_async_callback(fake.aclose)
        number = len(self.agents)
        url = await self.mount(f"agent-{number}", fake.app)
        fake_launcher = None
        if launcher is not None and launcher_url is None:
            fake_launcher = FakeLauncher(mode=launcher)
            self.stack.push_async_callback(fake_launcher.aclose)
            launcher_url = await self.mount(f"launcher-{number}", fake_launcher.app)
        body: dict[str, Any] = {"alias": alias, "agent_url": url, "launcher_url": launcher_url or "", "is_green": green}
        if green:
            body["participant_requirements"] = requirements if requirements is not None else WHITE_REQUIREMENT
        if battle_timeout is not None:
            body["battle_timeout"] = battle_timeout
        response = await self.client.post("/agents", json=body)
        assert response.status_code == 201, response.text
        registered = Registered(
            agent_id=response.json()["agent_id"],
            alias=alias,
            url=url,
            fake=fake,
            launcher=fake_launcher,
            launcher_url=launcher_url or "",
        )
        self.agents.append(registered)
        return registered

    async def pair(self, **green_options: Any) -> tuple[Registered, Registered]:
        """A green agent needing "white_agent" and a white agent."""
        green = await self.agent("green", green=True, **green_options)
        white = await self.agent("white")
        return green, white

    async def battle(
        self, green: Registered, *opponents: tuple[str, Registered], config: dict[str, Any] | None = None
    ) -> str:
        """Create a battle; returns its id."""
        body: dict[str, Any] = {
            "green_agent_id": green.agent_id,
            "opponents": [{"name": name, "agent_id": agent.agent_id} for name, agent in opponents],
        }
        if config is not None:
            body["config"] = config
        response = await self.client.post("/battles", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["battle_id"])

    async def get(self, battle_id: str) -> dict[str, Any]:
        """GET /battles/{id} as JSON."""
        response = await self.client.get(f"/battles/{battle_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    async def wait_state(self, battle_id: str, *states: str) -> dict[str, Any]:
        """Wait until the battle is in one of ``states``; returns the battle."""

        async def check() -> dict[str, Any] | None:
            battle = await self.get(battle_id)
            return battle if battle["state"] in states else None

        return await wait_until(check)  # type: ignore[no-any-return]

    async def wait_message(self, battle_id: str, text: str) -> dict[str, Any]:
        """Wait until an interact_history entry's message contains ``text``."""

        async def check() -> dict[str, Any] | None:
            battle = await self.get(battle_id)
            return battle if any(text in str(e.get("message", "")) for e in battle["interact_history"]) else None

        return await wait_until(check)  # type: ignore[no-any-return]

    async def started(self, green: Registered, battle_id: str) -> dict[str, Any]:
        """Wait for the green agent to receive battle_start for this battle; returns that message."""

        async def check() -> dict[str, Any] | None:
            found = next((m for m in green.fake.messages_of_type("battle_start") if m["battle_id"] == battle_id), None)
            if found is None:
                battle = await self.get(battle_id)
                assert battle["state"] != "error", f"the battle failed instead of starting: {battle.get('error')}"
            return found

        return await wait_until(check)  # type: ignore[no-any-return]

    async def post(
        self, battle_id: str, event: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """POST an event as an agent would. With ``headers=None`` it is posted as the battle's green agent does,
        with the battle token it received (results need it, and only events posted with it count as the battle's:
        attempts, progress, calibration); pass ``headers={}`` to post without one (stored, shown as unverified)."""
        if headers is None:
            token = self.green_token(battle_id)
            headers = {"X-Battle-Token": token} if token else None
        return await self.client.post(f"/battles/{battle_id}", json=event, headers=headers)

    def green_token(self, battle_id: str) -> str | None:
        """The battle token a registered fake green agent received in battle_start for ``battle_id``."""
        for agent in self.agents:
            for message in agent.fake.messages_of_type("battle_start"):
                if message.get("battle_id") == battle_id and message.get("battle_token"):
                    return str(message["battle_token"])
        return None


def progress(message: str, **extra: Any) -> dict[str, Any]:
    """A progress event."""
    return {
        "is_result": False,
        "message": message,
        "reported_by": "green",
        "timestamp": "2026-11-22T00:00:00Z",
        **extra,
    }


def result(winner: str, detail: Any = None, **extra: Any) -> dict[str, Any]:
    """A result event."""
    return {
        "is_result": True,
        "message": "done",
        "winner": winner,
        "reported_by": "green",
        "detail": detail if detail is not None else {},
        "timestamp": "2026-11-22T00:00:01Z",
        **extra,
    }


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite file per test."""
    return tmp_path / "backend.sqlite3"


STORE_KINDS = ("sqlite", "postgres")
"""The store's test suite runs against both implementations (PostgreSQL: a server the test run starts)."""


@contextlib.asynccontextmanager
async def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path, **options: Any) -> AsyncIterator[Any]:
    """An opened store of ``kind`` on a fresh database, closed afterwards."""
    store: Any
    if kind == "sqlite":
        store = SQLiteStore(tmp_path / "store.sqlite3", **options)
    else:
        store = PostgresStore(request.getfixturevalue("postgres_url"), **options)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A `BattleStore` on a fresh database, once per implementation."""
    async with open_store(request.param, request, tmp_path) as opened:
        yield opened


@pytest.fixture
async def backend(db_path: Path) -> AsyncIterator[RunningBackend]:
    """A backend with the fast test settings."""
    async with run_backend(db_path) as running:
        yield running


@pytest.fixture
async def arena(backend: RunningBackend) -> AsyncIterator[Arena]:
    """Fake agents around the default backend."""
    async with contextlib.AsyncExitStack() as stack:
        yield Arena(backend=backend, stack=stack)


@contextlib.asynccontextmanager
async def arena_on(running: RunningBackend) -> AsyncIterator[Arena]:
    """Fake agents around a backend the test started itself (custom settings)."""
    async with contextlib.AsyncExitStack() as stack:
        yield Arena(backend=running, stack=stack)
