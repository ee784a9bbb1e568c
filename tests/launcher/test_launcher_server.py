"""The AgentBeats launcher: /status strings, /reset restarts and tells the backend, /launch, /terminate, shutdown."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from launcher_test_helpers import REPO, http_server_argv, pid_alive, serve, wait_gone, write_card_dir
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from launcher.agentbeats_launcher import (
    STATUS_RUNNING,
    STATUS_STOPPED,
    AgentLauncher,
    build_launcher_app,
    extra_args_to_argv,
)
from launcher.ports import free_port, loopback_url


class FakeBackend:
    """Records ``PUT /agents/{id}`` bodies like the AgentBeats backend's ready signal."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, dict[str, Any]]] = []
        self.received = asyncio.Event()
        self.app = Starlette(routes=[Route("/agents/{agent_id}", self.put_agent, methods=["PUT"])])

    async def put_agent(self, request: Request) -> Response:
        self.puts.append((request.path_params["agent_id"], await request.json()))
        self.received.set()
        return Response(status_code=204)


def make_launcher(tmp_path: Path) -> AgentLauncher:
    port = free_port()
    url = loopback_url(port)
    www = write_card_dir(tmp_path / "www", url)
    return AgentLauncher(
        agent_argv=http_server_argv(www, port),
        agent_url=url,
        log_dir=tmp_path / "logs",
        name="static",
        ready_timeout_s=30,
        grace_s=3,
    )


def test_extra_args_follow_the_platform_convention() -> None:
    assert extra_args_to_argv({"verbose": True, "quiet": False, "model": "m", "n": 3}) == [
        "--verbose",
        "--model=m",
        "--n=3",
    ]


async def test_status_before_and_after_reset_and_backend_ready(tmp_path: Path) -> None:
    launcher = make_launcher(tmp_path)
    backend = FakeBackend()
    async with (
        serve(backend.app) as backend_url,
        serve(build_launcher_app(launcher, autostart=False)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        status = (await client.get("/status")).json()
        assert status == {"status": STATUS_STOPPED}

        response = await client.post(
            "/reset", json={"signal": "reset", "agent_id": "agent-42", "backend_url": backend_url, "extra_args": {}}
        )
        assert response.status_code == 200
        first_pid = response.json()["pid"]

        status = (await client.get("/status")).json()
        assert status["status"] == STATUS_RUNNING
        assert status["pid"] == first_pid

        await asyncio.wait_for(backend.received.wait(), timeout=60)
        assert backend.puts == [("agent-42", {"ready": True})]
        # Ready is only claimed once the card answers.
        assert (await client.get(launcher.card_url)).status_code == 200
        health = (await client.get("/health")).json()
        assert health["agent_ready"] is True and health["last_error"] is None

        # A second reset replaces the process.
        backend.received.clear()
        response = await client.post(
            "/reset", json={"signal": "reset", "agent_id": "agent-42", "backend_url": backend_url, "extra_args": {}}
        )
        second_pid = response.json()["pid"]
        assert second_pid != first_pid
        assert wait_gone([first_pid], timeout_s=10) == []
        await asyncio.wait_for(backend.received.wait(), timeout=60)
        assert len(backend.puts) == 2
    # Leaving the app (lifespan shutdown) stops the agent.
    assert not pid_alive(second_pid)


async def test_reset_rejects_bad_signals(tmp_path: Path) -> None:
    launcher = make_launcher(tmp_path)
    async with (
        serve(build_launcher_app(launcher, autostart=False)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        bad = await client.post("/reset", json={"signal": "explode", "agent_id": "a"})
        assert bad.status_code == 400
        assert "unsupported signal" in bad.json()["error"]
        assert (await client.post("/reset", content=b"not json")).status_code == 400
        assert (await client.get("/status")).json() == {"status": STATUS_STOPPED}


async def test_agent_that_cannot_start_is_never_reported_ready(tmp_path: Path) -> None:
    backend = FakeBackend()
    launcher = AgentLauncher(
        agent_argv=[sys.executable, "-c", "import sys; sys.exit(4)"],
        agent_url=loopback_url(free_port()),
        log_dir=tmp_path,
        name="broken",
        ready_timeout_s=30,
    )
    async with (
        serve(backend.app) as backend_url,
        serve(build_launcher_app(launcher, autostart=False)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await client.post("/reset", json={"signal": "reset", "agent_id": "x", "backend_url": backend_url})
        await asyncio.wait_for(launcher.drain(), timeout=60)
        health = (await client.get("/health")).json()
        assert "exited with code 4" in health["last_error"]
        assert (await client.get("/status")).json() == {"status": STATUS_STOPPED}
    assert backend.puts == []


async def test_launch_and_terminate(tmp_path: Path) -> None:
    launcher = make_launcher(tmp_path)
    async with (
        serve(build_launcher_app(launcher, autostart=False)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        launched = (await client.post("/launch")).json()
        assert launched["status"] == "launched"
        assert launched["agent_url"] == launcher.agent_url
        assert (await client.post("/launch")).json()["status"] == "already_running"
        pid = launched["pid"]
        assert (await client.post("/terminate")).json() == {"status": "terminated"}
        assert not pid_alive(pid)
        assert (await client.get("/status")).json() == {"status": STATUS_STOPPED}


def test_launcher_command_serves_and_stops_its_agent_on_sigterm(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    agent_port, launcher_port = free_port(), free_port()
    agent_url = loopback_url(agent_port)
    www = write_card_dir(tmp_path / "www", agent_url)
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "launcher",
        "--port",
        str(launcher_port),
        "--agent-url",
        agent_url,
        "--log-dir",
        str(tmp_path / "logs"),
        "--",
        *http_server_argv(www, agent_port),
    ]
    launcher = subprocess.Popen(argv, cwd=REPO, env=subprocess_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        status = _poll_status(loopback_url(launcher_port), launcher)
        assert status["status"] == STATUS_RUNNING
        agent_pid = status["pid"]
        assert httpx.get(agent_url + "/.well-known/agent-card.json", timeout=10).status_code == 200
        launcher.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully (lifespan stops the agent), then re-raises the signal it caught.
        assert launcher.wait(timeout=60) in (0, -signal.SIGTERM)
        assert wait_gone([agent_pid], timeout_s=10) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if launcher.stderr is not None:
            launcher.stderr.close()


def _poll_status(url: str, launcher: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait (bounded) until the launcher reports its agent running."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.stderr.read().decode() if launcher.stderr else ""
        try:
            status: dict[str, Any] = httpx.get(url + "/status", timeout=2).json()
            if status["status"] == STATUS_RUNNING:
                return status
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("launcher never reported its agent running")
