"""Durability: data survives a restart and a killed process; running battles are picked up again on start;
the schema is versioned."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from battle_backend import BackendSettings
from battle_backend.store.protocol import SchemaTooNew
from battle_backend.store.sqlite.schema import LATEST_VERSION
from battle_backend.store.sqlite.store import SQLiteStore
from tests.battle_backend.conftest import RunningBackend, arena_on, progress, result, run_backend, wait_until

REPO = Path(__file__).resolve().parents[3]


async def test_data_survives_a_restart(db_path: Path) -> None:
    async with run_backend(db_path) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        await arena.started(green, battle_id)
        for i in range(5):
            assert (await arena.post(battle_id, progress(f"event {i}"))).status_code == 204
        assert (await arena.post(battle_id, result("white_agent", {"score": 1}))).status_code == 204
        before_battle = await arena.get(battle_id)
        before_agents = (await backend.client.get("/agents")).json()
    async with run_backend(db_path) as restarted:
        after_battle = (await restarted.client.get(f"/battles/{battle_id}")).json()
        after_agents = (await restarted.client.get("/agents")).json()
    assert after_battle == before_battle
    assert after_agents == before_agents
    assert after_battle["state"] == "finished"
    assert [e["message"] for e in after_battle["interact_history"] if e.get("reported_by") == "green"][:5] == [
        f"event {i}" for i in range(5)
    ]


async def test_running_battle_goes_on_after_a_restart(db_path: Path) -> None:
    async with run_backend(db_path) as backend, arena_on(backend) as arena:
        green, white = await arena.pair()
        battle_id = await arena.battle(green, ("white_agent", white))
        token = (await arena.started(green, battle_id))["battle_token"]
        await arena.post(battle_id, progress("before restart"))
        async with run_backend(db_path) as restarted:
            # The first backend is still serving the fakes' URLs; only the second one is asked here.
            battle = (await restarted.client.get(f"/battles/{battle_id}")).json()
            assert battle["state"] == "running"
            response = await restarted.client.post(
                f"/battles/{battle_id}", json=result("white_agent"), headers={"X-Battle-Token": token}
            )
            assert response.status_code == 204
            battle = (await restarted.client.get(f"/battles/{battle_id}")).json()
            assert battle["state"] == "finished"
            assert any("Backend restarted" in str(e.get("message")) for e in battle["interact_history"])


async def test_battle_interrupted_during_setup_is_failed_on_start(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    green = await store.create_agent(
        {
            "alias": "g",
            "agent_url": "http://127.0.0.1:1",
            "launcher_url": "",
            "is_green": True,
            "participant_requirements": [],
        },
        {"name": "g"},
    )
    battle = await store.create_battle(green.agent_id, [], {}, "http://127.0.0.1:2")
    await store.start_battle(battle.battle_id, "token")
    await store.close()
    async with run_backend(db_path) as backend:
        recovered = (await backend.client.get(f"/battles/{battle.battle_id}")).json()
        assert recovered["state"] == "error"
        assert "restarted while this battle was being set up" in recovered["error"]
        assert (await backend.client.get(f"/agents/{green.agent_id}")).json()["status"] == "unlocked"


async def test_schema_is_versioned_and_migrated_once(db_path: Path) -> None:
    for _ in range(2):
        store = SQLiteStore(db_path)
        await store.open()
        await store.close()
    with sqlite3.connect(db_path) as conn:
        # A fresh file gets every migration, each recorded once (schema 2 added the events' idempotency key).
        versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert versions == [(number,) for number in range(1, LATEST_VERSION + 1)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_newer_schema_is_refused(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    await store.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (LATEST_VERSION + 1,))
    store = SQLiteStore(db_path)
    with pytest.raises(SchemaTooNew):
        await store.open()
    await store.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_killed_process_loses_no_committed_event(db_path: Path) -> None:
    """SIGKILL the real command (`python -m battle_backend`) right after events were accepted: all are there."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "battle_backend",
        "--port",
        str(port),
        "--db",
        str(db_path),
        "--ready-poll-interval",
        "0.5",
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:

            async def healthy() -> bool:
                assert process.poll() is None, "the backend process exited"
                try:
                    return (await client.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy)
            external = RunningBackend(url=url, client=client, app=None, settings=BackendSettings(db_path=db_path))
            async with arena_on(external) as arena:
                green, white = await arena.pair()
                battle_id = await arena.battle(green, ("white_agent", white))
                await arena.started(green, battle_id)
                for i in range(40):
                    assert (await arena.post(battle_id, progress(f"kill-test {i}"))).status_code == 204
                process.send_signal(signal.SIGKILL)
                await asyncio.to_thread(process.wait, 30)
    finally:
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait, 30)
    async with run_backend(db_path) as restarted:
        stored = (await restarted.client.get(f"/battles/{battle_id}")).json()
    messages = [e["message"] for e in stored["interact_history"] if str(e.get("message", "")).startswith("kill-test")]
    assert messages == [f"kill-test {i}" for i in range(40)]
    assert stored["state"] == "running"  # battle_start had been sent: the restarted backend carries it on
