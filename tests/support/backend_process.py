"""Our battle backend as a real process on a fixed loopback port and SQLite file, which a test stops and restarts
(the outage tests: the same port and database come back, as a restarted deployment would)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from launcher.ports import free_port, loopback_url
from launcher.processes import ManagedProcess, ProcessGroup, wait_until_ready

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RestartableBackend:
    """``python -m battle_backend`` in the test's process group; ``stop`` and ``start`` make an outage."""

    group: ProcessGroup
    port: int
    db: Path
    proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return loopback_url(self.port)

    async def start(self, timeout_s: float = 120.0) -> None:
        argv = [sys.executable, "-m", "battle_backend", "--port", str(self.port), "--db", str(self.db)]
        self.proc = self.group.start("backend", argv, cwd=REPO)
        await wait_until_ready(self.proc, self.url + "/health", timeout_s=timeout_s)

    async def stop(self) -> None:
        assert self.proc is not None
        await self.group.stop(self.proc)

    async def battle(self, battle_id: str) -> dict[str, Any]:
        """``GET /battles/{id}`` (with its interact_history)."""
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            response = await http.get(f"{self.url}/battles/{battle_id}")
            assert response.status_code == 200, response.text
            return response.json()  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def restartable_backend(tmp_path: Path) -> AsyncIterator[RestartableBackend]:
    """A started backend; it and everything in its process group are stopped on exit."""
    async with ProcessGroup(tmp_path / "logs", handle_signals=False) as group:
        backend = RestartableBackend(group, free_port(), tmp_path / "backend.sqlite3")
        await backend.start()
        yield backend
