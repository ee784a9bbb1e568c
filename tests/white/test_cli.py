"""The command line: configuration errors exit 2, and a started agent serves its card (a real subprocess)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

from tests.white.conftest import run_attempt
from tests.white.helpers import arena_block, talk
from white_agent.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def test_bad_fault_rates_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kind", "flaky", "--fault-rate", "crash=0.7", "no_reply=0.7"]) == 2
    assert "sum to at most 1" in capsys.readouterr().err
    assert main(["--kind", "flaky", "--fault-rate", "explode=0.1"]) == 2
    assert main(["--kind", "flaky", "--fault-rate", "crash"]) == 2


def test_llm_without_key_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ARENA_TEST_ABSENT_KEY", raising=False)
    assert main(["--kind", "llm", "--api-key-env", "ARENA_TEST_ABSENT_KEY"]) == 2
    assert "ARENA_TEST_ABSENT_KEY" in capsys.readouterr().err


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--kind", "oracle"])
    assert exit_info.value.code == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_module_entry_point_serves_a_flaky_agent() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "white_agent",
        "--kind",
        "flaky",
        "--port",
        str(port),
        "--seed",
        "3",
        "--fault-rate",
        "task_reply=1.0",
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(600):  # wait for the card (the process imports a2a/starlette first)
                if process.returncode is not None:
                    pytest.fail("agent exited early")
                try:
                    card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("agent card never answered")
        assert card["url"] == f"{url}/"
        async with talk(url, "0.3") as talker:
            answers = await run_attempt(talker, "ctx", arena_block("5"))
        assert all(a.kind == "task" for a in answers) and answers[-1].action()["name"] == "respond"  # type: ignore[index]
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            _, errors = await asyncio.wait_for(process.communicate(), timeout=30)
        except TimeoutError:
            process.kill()
            _, errors = await process.communicate()
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM so the exit status reports it
    assert process.returncode in (0, -signal.SIGTERM)
    assert b"Traceback" not in (errors or b"")
