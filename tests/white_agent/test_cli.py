"""The command line: configuration errors exit 2, a started agent serves its card, and SIGTERM stops it at once
even while a no_reply turn hangs (real subprocesses)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.white_agent.conftest import run_attempt
from tests.white_agent.helpers import arena_block, first_message, talk
from white_agent.__main__ import main
from white_agent.flaky import choose_fault
from white_agent.gold import load_gold_task

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


async def _wait_for_card(process: asyncio.subprocess.Process, url: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):  # the process imports a2a/starlette first
            if process.returncode is not None:
                pytest.fail("agent exited early")
            try:
                if (await http.get(f"{url}/.well-known/agent-card.json")).status_code == 200:
                    return
            except httpx.ConnectError:
                pass
            await asyncio.sleep(0.05)
    pytest.fail("agent card never answered")


async def _post_03(http: httpx.AsyncClient, url: str, text: str, data: Any = None, metadata: Any = None) -> Any:
    parts: list[dict[str, Any]] = [{"kind": "text", "text": text}] + ([{"kind": "data", "data": data}] if data else [])
    message = {"kind": "message", "role": "user", "messageId": str(uuid.uuid4()), "contextId": "ctx", "parts": parts}
    if metadata:
        message["metadata"] = metadata
    body = {"jsonrpc": "2.0", "id": "1", "method": "message/send", "params": {"message": message}}
    return (await http.post(f"{url}/", json=body, timeout=60)).json()


async def test_sigterm_stops_the_agent_while_a_no_reply_turn_hangs() -> None:
    """The hanging turn is abandoned (a JSON-RPC error, never a reply) and the process exits without waiting."""
    n_turns = len(load_gold_task("retail", "test", "5").steps) + 1
    seed = next(s for s in range(500) if choose_fault(s, "retail", "5", 1, {"no_reply": 1.0}, n_turns).turn == 1)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "white_agent", "--kind", "flaky", "--port", str(port), "--seed", str(seed)),
        *("--fault-rate", "no_reply=1.0", "--log-level", "info"),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        await _wait_for_card(process, url)
        async with httpx.AsyncClient() as http:
            text, data, metadata = first_message("hello", arena=arena_block("5"))
            assert "result" in await _post_03(http, url, text, data, metadata)  # turn 0 answers
            hanging = asyncio.create_task(_post_03(http, url, "Tool call result:\nok"))  # turn 1 hangs
            seen = b""
            async with asyncio.timeout(30):
                while b"no_reply fault: hanging" not in seen:
                    line = await process.stderr.readline()
                    assert line, "the agent closed stderr before hanging"
                    seen += line
            assert not hanging.done()
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=10)
            except TimeoutError:
                pytest.fail("the agent did not stop within 10 s of SIGTERM")
            answer = await asyncio.wait_for(hanging, timeout=10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    errors = seen + await process.stderr.read()
    assert "result" not in answer and answer["error"]["code"] == -32603
    assert "abandoned this turn" in answer["error"]["message"]
    assert process.returncode in (0, -signal.SIGTERM)
    assert b"Traceback" not in errors and b"Cancel" not in errors, errors.decode(errors="replace")[-2000:]


def test_replay_and_flaky_start_without_the_llm_and_mcp_stacks() -> None:
    """The OpenAI client and the MCP client are imported only by the kinds and the tool mode that use them."""
    code = (
        "import sys; from white_agent.__main__ import main; from white_agent.app import make_agent; "
        "make_agent('replay'); make_agent('flaky'); "
        "print(sorted(m for m in ('openai', 'mcp', 'mcp_types', 'httpx2', 'white_agent.llm') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True
    )
    assert loaded.returncode == 0, loaded.stderr.decode()
    assert loaded.stdout.decode().strip() == "[]"
