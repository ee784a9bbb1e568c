"""Talking to AgentBeats launchers: ``POST /reset`` before a battle and ``GET /status`` for check_launcher."""

from __future__ import annotations

from typing import Any

import httpx

LAUNCHER_ONLINE = "server up, with agent running"


class LauncherError(Exception):
    """The reset did not go through; the message names the launcher and the reason."""


async def reset_agent(
    client: httpx.AsyncClient, launcher_url: str, agent_id: str, backend_url: str, *, timeout: float
) -> None:
    """Ask the launcher to restart its agent; it reports back with ``PUT /agents/{id} {"ready": true}``."""
    url = launcher_url.rstrip("/") + "/reset"
    body = {"signal": "reset", "agent_id": agent_id, "backend_url": backend_url, "extra_args": {}}
    try:
        response = await client.post(url, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LauncherError(
            f"launcher {launcher_url} unreachable ({type(exc).__name__}: {exc or 'no detail'})"
        ) from exc
    if not 200 <= response.status_code < 300:
        raise LauncherError(f"launcher {launcher_url} answered HTTP {response.status_code} to POST /reset")


async def check_launcher(client: httpx.AsyncClient, launcher_url: str, *, timeout: float) -> dict[str, Any]:
    """AgentBeats' check: online when ``GET /status`` says the agent is running (JSON {"status": ...} or plain text)."""
    clean = launcher_url.rstrip("/")
    try:
        response = await client.get(clean + "/status", timeout=timeout)
    except httpx.HTTPError as exc:
        return {"online": False, "error": f"{type(exc).__name__}: {exc or 'no detail'}", "launcher_url": clean}
    status: Any = None
    if response.status_code == 200:
        try:
            payload = response.json()
            status = payload.get("status") if isinstance(payload, dict) else payload
        except ValueError:
            status = response.text.strip()
    return {"online": status == LAUNCHER_ONLINE, "status_code": response.status_code, "launcher_url": clean}
