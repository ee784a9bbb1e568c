"""Shared helpers for the launcher tests: in-process servers on free loopback ports, child-process bookkeeping.

A uniquely named module (not conftest) so ``import`` cannot pick up another directory's conftest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psutil
import uvicorn
from starlette.types import ASGIApp

from launcher.ports import free_port, loopback_url

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PYTHON = sys.executable


class _InProcessServer(uvicorn.Server):
    """uvicorn without its signal capture (the test process keeps its own handlers)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: ASGIApp, port: int | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 in this event loop; yields its base URL; stops it on exit."""
    port = port or free_port()
    server = _InProcessServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("server exited before starting")
        await asyncio.sleep(0.02)
    try:
        yield loopback_url(port)
    finally:
        server.should_exit = True
        await task


def write_card_dir(root: Path, url: str) -> Path:
    """A directory ``python -m http.server`` can serve as a minimal agent (a card file only)."""
    card = root / ".well-known" / "agent-card.json"
    card.parent.mkdir(parents=True, exist_ok=True)
    card.write_text(json.dumps({"name": "static card", "url": url}), encoding="utf-8")
    return root


def http_server_argv(directory: Path, port: int) -> list[str]:
    return [PYTHON, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(directory), str(port)]


def pid_alive(pid: int) -> bool:
    """True for a live (non-zombie) process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout_s: float = 15.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout_s`` (a deadline, not a timed assertion)."""
    _, alive = psutil.wait_procs([p for p in map(_proc_or_none, pids) if p is not None], timeout=timeout_s)
    return [p.pid for p in alive if pid_alive(p.pid)]


def _proc_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def subprocess_environment() -> dict[str, str]:
    """Environment for child pythons: the repo and the fake agents importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def ours(runs: Path) -> list[psutil.Process]:
    """Processes with ``runs`` (a test's runs directory) on their command line: the agents a run started."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(runs) in part for part in (proc.info["cmdline"] or [])):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true; AssertionError after ``timeout`` s (a hang guard, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def attempts_on_disk(run_dir: Path) -> int:
    """Lines of the run's attempts.jsonl (0 before it exists)."""
    try:
        return (run_dir / "attempts.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0
