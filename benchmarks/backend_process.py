"""Our battle backend as a separate process for the benchmark scripts (not a test helper: scripts only).

Why a process: the figures must include what a deployment pays (HTTP, its own event loop, SQLite in its own
process), and the outbox benchmark stops and restarts it to make an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_backend(port: int, db: Path | str, *options: str) -> subprocess.Popen[bytes]:
    """``python -m battle_backend`` on 127.0.0.1:port with its store at ``db``: a SQLite file, or a PostgreSQL URL
    (quiet)."""
    argv = [sys.executable, "-m", "battle_backend", "--port", str(port), "--db", str(db), "--log-level", "error"]
    return subprocess.Popen([*argv, *options], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def stop_backend(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


async def wait_healthy(client: httpx.AsyncClient, process: subprocess.Popen[bytes], limit_s: float) -> None:
    """Until ``GET /health`` answers 200; RuntimeError when the process exits first, TimeoutError after limit_s."""
    async with asyncio.timeout(limit_s):
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the backend exited with code {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/health")).status_code == 200:
                    return
            await asyncio.sleep(0.02)
