"""``arena register`` against a real backend (ours, on loopback) with fake agents and launchers: registration,
idempotence, waiting for late agents, errors that name what is missing, and the command line's exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from typer.testing import CliRunner

from battle_backend.testing import FakeA2AAgent, FakeLauncher
from green_agent.engine.config import ConfigError
from launcher.cli.app import app
from launcher.cli.register_command import RegisterOptions, RegistrationError, register_agents
from tests.battle_backend.conftest import RunningBackend, run_backend
from tests.support.servers import serve_app

LIMIT_S = 60.0
"""Only turns a hang into a failure."""


class Fakes:
    """Fake agents and launchers mounted under path prefixes of one loopback server (added while it runs)."""

    def __init__(self, host: Starlette, url: str) -> None:
        self.host = host
        self.url = url

    def mount(self, prefix: str, app: Any) -> str:
        self.host.router.routes.append(Mount(f"/{prefix}", app=app))
        return f"{self.url}/{prefix}"

    def agent(self, prefix: str, name: str) -> str:
        return self.mount(prefix, FakeA2AAgent(name=name).app)

    def launcher(self, prefix: str) -> str:
        return self.mount(prefix, FakeLauncher().app)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[RunningBackend]:
    async with run_backend(tmp_path / "backend.sqlite3") as running:
        yield running


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    host = Starlette()
    async with serve_app(host) as url:
        yield Fakes(host, url)


def options_for(backend: RunningBackend, fakes: Fakes, **overrides: Any) -> RegisterOptions:
    values: dict[str, Any] = {
        "backend_url": backend.url,
        "green_url": f"{fakes.url}/green",
        "green_launcher_url": f"{fakes.url}/green-launcher",
        "white_url": f"{fakes.url}/white",
        "white_launcher_url": f"{fakes.url}/white-launcher",
        "white_alias": "arena-replay-white",
        "battle_timeout_s": 1800.0,
        "wait_s": 20.0,
        "poll_interval_s": 0.05,
    }
    return RegisterOptions(**{**values, **overrides})


def mount_all(fakes: Fakes) -> None:
    fakes.agent("green", "arena-green-agent")
    fakes.launcher("green-launcher")
    fakes.agent("white", "replay-white")
    fakes.launcher("white-launcher")


async def agents(backend: RunningBackend) -> list[dict[str, Any]]:
    response = await backend.client.get("/agents")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


async def test_registers_both_agents_as_agentbeats_expects(backend: RunningBackend, fakes: Fakes) -> None:
    mount_all(fakes)
    registration = await register_agents(options_for(backend, fakes))
    assert registration.created == {"green_agent": True, "white_agent": True}
    records = {r["agent_id"]: r for r in await agents(backend)}
    green = records[registration.green_id]["register_info"]
    white = records[registration.white_id]["register_info"]
    assert green["is_green"] is True and white["is_green"] is False
    assert green["participant_requirements"] == [{"role": "blue_agent", "name": "white_agent", "required": True}]
    assert green["battle_timeout"] == 1800
    assert green["launcher_url"] == f"{fakes.url}/green-launcher"
    assert white["alias"] == "arena-replay-white" and white["launcher_url"] == f"{fakes.url}/white-launcher"
    # The printed battle request is accepted by the backend as it is.
    response = await backend.client.post("/battles", json=registration.as_json()["battle_request"])
    assert response.status_code == 201, response.text


async def test_running_it_again_finds_the_same_agents(backend: RunningBackend, fakes: Fakes) -> None:
    mount_all(fakes)
    first = await register_agents(options_for(backend, fakes))
    again = await register_agents(options_for(backend, fakes, green_url=f"{fakes.url}/green/"))  # slash ignored
    assert (again.green_id, again.white_id) == (first.green_id, first.white_id)
    assert again.created == {"green_agent": False, "white_agent": False}
    assert len(await agents(backend)) == 2


async def test_a_changed_setting_registers_a_new_agent(backend: RunningBackend, fakes: Fakes) -> None:
    mount_all(fakes)
    first = await register_agents(options_for(backend, fakes))
    changed = await register_agents(options_for(backend, fakes, battle_timeout_s=600.0))
    assert changed.white_id == first.white_id and changed.created["white_agent"] is False
    assert changed.green_id != first.green_id and changed.created["green_agent"] is True
    renamed = await register_agents(options_for(backend, fakes, battle_timeout_s=600.0, white_alias="other"))
    assert renamed.white_id != first.white_id and renamed.green_id == changed.green_id
    assert len(await agents(backend)) == 4


async def test_agents_without_launchers_are_registered_with_an_empty_launcher_url(
    backend: RunningBackend, fakes: Fakes
) -> None:
    fakes.agent("green", "g")
    fakes.agent("white", "w")
    registration = await register_agents(options_for(backend, fakes, green_launcher_url="", white_launcher_url=""))
    records = {r["agent_id"]: r["register_info"] for r in await agents(backend)}
    assert records[registration.white_id]["launcher_url"] == ""
    assert records[registration.green_id]["launcher_url"] == ""


async def test_waits_for_agents_that_come_up_late(backend: RunningBackend, fakes: Fakes) -> None:
    fakes.agent("green", "g")
    fakes.launcher("green-launcher")
    fakes.launcher("white-launcher")
    task = asyncio.create_task(register_agents(options_for(backend, fakes)))
    await asyncio.sleep(0.5)
    assert not task.done()  # the white agent's card does not answer yet
    fakes.agent("white", "w")
    async with asyncio.timeout(LIMIT_S):
        registration = await task
    assert registration.created["white_agent"] is True


async def test_gives_up_naming_what_did_not_answer(backend: RunningBackend, fakes: Fakes) -> None:
    fakes.agent("green", "g")
    fakes.launcher("green-launcher")
    fakes.agent("white", "w")
    with pytest.raises(RegistrationError, match="white agent's launcher"):
        await register_agents(options_for(backend, fakes, wait_s=0.3))
    assert await agents(backend) == []


async def test_a_refused_registration_is_an_error_with_the_backends_answer(
    backend: RunningBackend, fakes: Fakes
) -> None:
    mount_all(fakes)
    rejecting = Starlette()
    fakes.mount("broken", rejecting)  # answers 404 for the card path: the backend cannot fetch a card there

    class CardOnlyForUs(httpx.AsyncBaseTransport):
        """Lets our readiness probe see a card the backend will not find (the card path is rewritten for us)."""

        def __init__(self) -> None:
            self.inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/broken/.well-known/agent-card.json":
                request.url = request.url.copy_with(path="/white/.well-known/agent-card.json")
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    with pytest.raises(RegistrationError, match=r"POST .*/agents \(arena-replay-white\) answered HTTP 400"):
        await register_agents(options_for(backend, fakes, white_url=f"{fakes.url}/broken"), transport=CardOnlyForUs())


@pytest.mark.parametrize(
    ("overrides", "option"),
    [
        ({"white_url": "white:9004"}, "--white"),
        ({"backend_url": "ftp://backend"}, "--backend"),
        ({"green_launcher_url": "green"}, "--green-launcher"),
        ({"battle_timeout_s": 0.0}, "--battle-timeout"),
        ({"green_alias": " "}, "--green-alias"),
    ],
)
async def test_bad_options_are_configuration_errors_naming_the_option(overrides: dict[str, Any], option: str) -> None:
    base = {"backend_url": "http://127.0.0.1:1", "green_url": "http://127.0.0.1:2", "white_url": "http://127.0.0.1:3"}
    with pytest.raises(ConfigError, match=option):
        await register_agents(RegisterOptions(**{**base, **overrides}))


async def test_the_command_prints_the_ids_and_exits_zero(backend: RunningBackend, fakes: Fakes) -> None:
    mount_all(fakes)
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "register",
        "--backend",
        backend.url,
        "--green",
        f"{fakes.url}/green",
        "--green-launcher",
        f"{fakes.url}/green-launcher",
        "--white",
        f"{fakes.url}/white",
        "--white-launcher",
        f"{fakes.url}/white-launcher",
        "--wait",
        "30",
    ]
    outputs = []
    for _ in range(2):
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            async with asyncio.timeout(LIMIT_S):
                stdout, stderr = await process.communicate()
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        assert process.returncode == 0, stderr.decode()
        outputs.append(json.loads(stdout))
    first, second = outputs
    assert first["green_agent"]["created"] and first["white_agent"]["created"]
    assert not second["green_agent"]["created"] and not second["white_agent"]["created"]
    assert (
        second["battle_request"]
        == first["battle_request"]
        == {
            "green_agent_id": first["green_agent"]["agent_id"],
            "opponents": [{"name": "white_agent", "agent_id": first["white_agent"]["agent_id"]}],
        }
    )


def test_command_exit_codes_for_bad_options_and_an_absent_backend() -> None:
    runner = CliRunner()
    bad = runner.invoke(
        app, ["register", "--backend", "backend:9000", "--green", "http://g:1", "--white", "http://w:1"]
    )
    assert bad.exit_code == 2 and "--backend" in bad.output
    absent = runner.invoke(
        app,
        [
            "register",
            "--backend",
            "http://127.0.0.1:9",
            "--green",
            "http://127.0.0.1:9",
            "--white",
            "http://127.0.0.1:9",
            "--wait",
            "0",
        ],
    )
    assert absent.exit_code == 1 and "the backend" in absent.output


async def test_a_fractional_battle_timeout_is_registered_in_whole_seconds_and_found_again(
    backend: RunningBackend, fakes: Fakes
) -> None:
    mount_all(fakes)
    first = await register_agents(options_for(backend, fakes, battle_timeout_s=90.2))
    again = await register_agents(options_for(backend, fakes, battle_timeout_s=90.2))
    assert again.green_id == first.green_id and again.created["green_agent"] is False
    records = {r["agent_id"]: r["register_info"] for r in await agents(backend)}
    assert records[first.green_id]["battle_timeout"] == 91
