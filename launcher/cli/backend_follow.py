"""Following a backend battle from ``arena run --backend``: new ``interact_history`` entries become display updates
(:class:`Follower`), and the green agent behind its launcher is watched (:class:`GreenWatch`)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from launcher.cli.battle_display import BattleDisplay
from launcher.processes import ProcessError


class Follower:
    """Turns new ``interact_history`` entries into display updates."""

    def __init__(self, display: BattleDisplay) -> None:
        self.display = display
        self.seen = 0
        self.events: list[dict[str, Any]] = []

    def feed(self, battle: dict[str, Any]) -> None:
        history = battle.get("interact_history") or []
        for entry in history[self.seen :]:
            if not isinstance(entry, dict) or entry.get("is_result"):
                continue
            message = str(entry.get("message") or "")
            detail = entry.get("detail")
            if entry.get("reported_by") == "system" or not (isinstance(detail, dict) and "type" in detail):
                self.display.line(f"backend: {message}" if entry.get("reported_by") == "system" else message)
                continue
            self.events.append(detail)
            self.display.on_event(detail, message)
        self.seen = max(self.seen, len(history))


class GreenWatch:
    """Whether the green agent behind its launcher still runs, asked at most every ``interval_s``: a launcher
    outlives its agent, so without this a killed green agent left ``arena run --backend`` waiting for the battle
    timeout (and a timed-out battle can no longer be resumed)."""

    def __init__(self, http: httpx.AsyncClient, launcher_url: str, interval_s: float = 2.0) -> None:
        self._http = http
        self._url = launcher_url
        self._interval_s = interval_s
        self._last = 0.0

    async def __call__(self) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            return
        self._last = now
        try:
            health = (await self._http.get(self._url + "/health", timeout=5.0)).json()
        except (httpx.HTTPError, ValueError):
            return  # the launcher process itself is watched by its process group
        if isinstance(health, dict) and health.get("agent_running") is False:
            reason = f" ({str(health['last_error'])[:300]})" if health.get("last_error") else ""
            raise ProcessError(f"the green agent behind the launcher at {self._url} stopped during the battle{reason}")
