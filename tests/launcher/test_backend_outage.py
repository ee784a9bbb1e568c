"""``arena run --backend URL`` rides out a backend outage, and the battle's history arrives complete.

The Done-when of the issue (slow tests): our backend process is stopped for 30 s in the middle of a battle, and in a
second run around the battle's end, then restarted on the same port with the same database; ``arena run`` must still
exit 0, and the battle record must hold every event the green agent emitted (its ``runs/<id>/events.jsonl``), in
order, each once, and the result once. The quick tests drive the poll loop and the client's retries with fakes.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from launcher.cli.backend_api import BackendApi, BackendError
from launcher.cli.backend_run import BackendRunOptions, _follow
from launcher.cli.battle_display import BattleDisplay
from launcher.cli.run_command import RunOptions
from tests.support.backend_process import restartable_backend
from tests.support.event_keys import stored_event_keys

REPO = Path(__file__).resolve().parents[2]
OUTAGE_S = 30.0
RUN_LIMIT_S = 900.0
PAGE_RE = re.compile(r"battle page: http://127\.0\.0\.1:\d+/ui/battles/(?P<battle_id>[0-9a-f-]+)")


# --- quick: the poll loop and the client -----------------------------------------------------------------------


class _Group:
    def check_alive(self) -> None:
        """Every child is alive."""


class _FlakyApi:
    """``battle()`` fails transiently ``down`` times, then answers the finished battle."""

    def __init__(self, down: int, error: BackendError | None = None) -> None:
        self.down = down
        self.calls = 0
        self.error = error or BackendError("GET /battles/b: the backend did not answer (ConnectError)", transient=True)

    async def battle(self, battle_id: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error
        return {"state": "finished", "interact_history": [], "result": {"detail": {"attempts": []}}}


def _follow_with(api: _FlakyApi, *, outage_limit_s: float) -> tuple[Any, str]:
    output = io.StringIO()
    console = Console(file=output, width=200, color_system=None)
    options = BackendRunOptions(RunOptions(Path("s.toml")), "http://x", poll_interval_s=0.01)

    async def run() -> Any:
        with BattleDisplay(console, quiet=True) as display:
            return await _follow(api, "b", display, _Group(), options, 600.0, outage_limit_s)  # type: ignore[arg-type]

    try:
        value: Any = asyncio.run(run())
    except BackendError as error:
        value = error
    return value, output.getvalue()


def test_the_poll_rides_out_an_outage_with_one_line_when_it_goes_and_one_when_it_is_back() -> None:
    (battle, _events), output = _follow_with(_FlakyApi(down=6), outage_limit_s=60)
    assert battle["state"] == "finished"
    lines = output.splitlines()
    assert len(lines) == 2, output
    assert re.match(r"backend unreachable since \d\d:\d\d:\d\d, retrying \(GET /battles/b: ", lines[0]), output
    assert re.match(r"backend reachable again after \d+\.\d s \(unreachable since \d\d:\d\d:\d\d\)", lines[1]), output


def test_the_poll_gives_up_after_the_outage_limit_with_a_clear_message() -> None:
    error, output = _follow_with(_FlakyApi(down=10**6), outage_limit_s=0.3)
    assert isinstance(error, BackendError)
    assert "the backend has been unreachable since" in str(error) and "longer than the limit of 0.3 s" in str(error)
    assert "outbox.jsonl" in str(error)
    assert output.count("backend unreachable since") == 1


def test_a_refusal_is_not_an_outage() -> None:
    refusal = BackendError("GET /battles/b answered HTTP 404: not found")
    error, output = _follow_with(_FlakyApi(down=10**6, error=refusal), outage_limit_s=60)
    assert error is refusal and "unreachable" not in output


async def test_setup_calls_are_retried_only_when_they_cannot_have_been_applied() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if request.method == "GET" and len(seen) <= 2:
            raise httpx.ConnectError("connection refused", request=request)
        if request.method == "POST" and request.url.path == "/agents" and seen.count("POST") == 1:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/battles":
            raise httpx.ReadError("connection reset: the battle may exist now", request=request)
        return httpx.Response(200 if request.method == "GET" else 201, json={"status": "ok", "agent_id": "a1"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://backend") as http:
        api = BackendApi(http, "http://backend")
        assert await api.health() == {"status": "ok", "agent_id": "a1"}  # two refused connections, then the answer
        assert await api.register({"alias": "x"}) == "a1"  # refused once (never sent), then made once
        with pytest.raises(BackendError, match="did not answer"):
            await api.create_battle({})  # sent, answer lost: never repeated (it would make a second battle)
    assert seen == ["GET", "GET", "GET", "POST", "POST", "POST"]


async def test_an_oversized_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.cli import backend_api

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"[" + b"0," * 600 + b"0]")

    monkeypatch.setattr(backend_api, "MAX_ANSWER_BYTES", 1000)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        with pytest.raises(BackendError, match="answered more than 1000 bytes"):
            await BackendApi(http, "http://backend").battle("b")


# --- slow: the Done-when, end to end ----------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"}


def green_entries(battle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in battle["interact_history"] if e.get("reported_by") == "green_agent"]


def attempts_done(battle: dict[str, Any]) -> tuple[int, int | None]:
    """(attempts finished, attempts planned) as the backend has heard so far."""
    details = [e.get("detail") or {} for e in green_entries(battle) if not e.get("is_result")]
    total = next((d.get("attempts_total") for d in details if d.get("type") == "battle_started"), None)
    return sum(d.get("type") == "attempt_finished" for d in details), total


def long_scenario(tmp_path: Path) -> Path:
    """The offline demo made long by a wall-clock floor, not by the harness's speed: every attempt hits a ``no_reply``
    turn that only the 2.5 s turn timeout ends, 6 tasks x k=4 one at a time, so the battle lasts at least 60 s and more
    than 55 s remain after the first attempt (when the plug is pulled): the outage (30 s plus a restart) fits inside.
    """
    text = (REPO / "scenarios" / "offline_demo.toml").read_text()
    text = re.sub(r"(?m)^task_index = .*$", "task_index = [7, 9, 10, 11, 12, 13]", text)
    text = re.sub(r"(?m)^concurrency = .*$", "concurrency = 1", text)
    text = re.sub(r"(?m)^turn_timeout_s = .*$", "turn_timeout_s = 2.5", text)
    text = text[: text.index("[white_agent.fault_rates]")] + "[white_agent.fault_rates]\nno_reply = 1.0\n"
    path = tmp_path / "offline_long.toml"
    path.write_text(text.replace('name = "offline-demo"', 'name = "offline-long"'))
    return path


def _stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("when", ["mid-battle", "battle-end"])
async def test_arena_run_backend_rides_out_a_30_s_outage_and_every_event_arrives_once_in_order(
    tmp_path: Path, when: str
) -> None:
    scenario = long_scenario(tmp_path) if when == "mid-battle" else REPO / "scenarios" / "offline_demo.toml"
    runs = tmp_path / "runs"
    async with restartable_backend(tmp_path) as backend:
        argv = [
            sys.executable,
            "-m",
            "launcher",
            "run",
            str(scenario),
            "--backend",
            backend.url,
            "--runs-dir",
            str(runs),
        ]
        arena = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        lines: list[str] = []
        page = asyncio.Event()

        async def read() -> None:
            assert arena.stdout is not None
            async for raw in arena.stdout:
                lines.append(raw.decode("utf-8", "replace"))
                if PAGE_RE.search(lines[-1]):
                    page.set()

        reader = asyncio.create_task(read())
        try:
            async with asyncio.timeout(RUN_LIMIT_S):
                await page.wait()
                match = PAGE_RE.search("".join(lines))
                assert match is not None
                battle_id = match["battle_id"]
                while True:  # wait for the moment to pull the plug
                    done, total = attempts_done(await backend.battle(battle_id))
                    if total is not None and done >= (1 if when == "mid-battle" else total - 3):
                        break
                    await asyncio.sleep(0.1)
                stopped_at = datetime.now(UTC)
                await backend.stop()
                await asyncio.sleep(OUTAGE_S)
                await backend.start()
                restarted_at = datetime.now(UTC)
                code = await arena.wait()
                await reader
        finally:
            if arena.returncode is None:
                arena.kill()
                await arena.wait()
            reader.cancel()
        output = "".join(lines)
        assert code == 0, output
        battle = await backend.battle(battle_id)

    assert "backend unreachable since" in output and "backend reachable again after" in output, output
    emitted = [json.loads(line) for line in (runs / battle_id / "events.jsonl").read_text().splitlines()]
    posted = green_entries(battle)
    # Every event the green agent emitted, in order, each once, then the result once; nothing else from it.
    assert [(e["detail"]["type"], e["detail"]["timestamp"]) for e in posted[:-1]] == [
        (e["type"], e["timestamp"]) for e in emitted
    ]
    keys = [key.rsplit(":", 2) for key in stored_event_keys(backend.db, battle_id)]  # <battle id>:<nonce>:<seq>
    assert {(prefix, nonce) for prefix, nonce, _ in keys} == {(battle_id, keys[0][1])}  # one reporter
    assert [int(seq) for _, _, seq in keys] == list(range(1, len(emitted) + 2))
    assert [e["is_result"] for e in battle["interact_history"]].count(True) == 1 and posted[-1]["is_result"]
    assert battle["state"] == "finished" and isinstance(battle["result"]["detail"]["attempts"], list)
    result_reported = _stamp(posted[-1]["timestamp"])
    if when == "battle-end":  # the battle ended while the backend was down: the result waited in the outbox
        assert stopped_at < result_reported < restarted_at, (stopped_at, result_reported, restarted_at)
    else:  # the battle went on after the backend came back
        assert result_reported > restarted_at
        assert any(stopped_at < _stamp(e["detail"]["timestamp"]) < restarted_at for e in posted[:-1])
