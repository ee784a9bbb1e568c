"""``arena run SCENARIO --backend local|URL`` and ``arena backend``, end to end as subprocesses.

The battle goes through our backend's AgentBeats API; afterwards the backend's ``GET /battles/{id}`` must show it
finished with our result, and no process the command started may be left (checked with psutil on every descendant
seen during the run, since launchers restart their agents under new pids).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from green_agent.engine.config import BattleConfig
from launcher.cli.backend_run import (
    estimate_battle_timeout,
    judge_battle,
    parse_backend,
)
from launcher.cli.run_verdict import EXIT_CONFIG_ERROR, EXIT_HARNESS_ERROR, EXIT_OK
from launcher.ports import free_port, loopback_url
from launcher.processes import ProcessGroup, wait_until_ready
from tests.interop.interop_support import REPO, SCENARIO, DescendantWatcher, still_running

RUN_LIMIT_S = 600
PAGE_RE = re.compile(r"battle page: (?P<backend>http://127\.0\.0\.1:\d+)/ui/battles/(?P<battle_id>[0-9a-f-]+)")
DB_RE = re.compile(r"arena backend --db (?P<db>\S+)")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"})
    return env


def arena(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


def start_arena_until(
    args: list[str], marker: str
) -> tuple[subprocess.Popen[str], DescendantWatcher, list[str], threading.Event, threading.Thread]:
    """Start ``arena ARGS`` and collect its output in a thread; the event is set once a line contains ``marker``."""
    proc = subprocess.Popen(
        arena(*args), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watcher = DescendantWatcher(proc.pid)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        with proc.stdout:  # closed at EOF, so the pipe is not left to the garbage collector
            for line in proc.stdout:
                lines.append(line)
                if marker in line:
                    seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, watcher, lines, seen, reader


def run_arena(args: list[str]) -> tuple[int, str, list[Any]]:
    """Run ``arena ...`` to its end; (exit code, output, every descendant it had)."""
    proc = subprocess.Popen(
        arena(*args), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watcher = DescendantWatcher(proc.pid)
    try:
        output, _ = proc.communicate(timeout=RUN_LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, output, watcher.stop()


def _assert_finished_with_our_result(battle: dict[str, Any], output: str) -> None:
    assert battle["state"] == "finished", battle
    winner = battle["result"]["winner"]
    assert winner.startswith("arena-replay-white-"), winner
    assert f"winner (as the backend records it): {winner}" in output
    attempts = battle["result"]["detail"]["attempts"]
    assert sorted((a["task_index"], a["attempt"], a["outcome"]) for a in attempts) == [
        (0, 1, "success"),
        (0, 2, "success"),
        (1, 1, "success"),
        (1, 2, "success"),
    ]
    messages = [e["message"] for e in battle["interact_history"] if e.get("reported_by") == "green_agent"]
    assert sum("✅ Attempt" in m for m in messages) == 4, messages
    assert battle["interact_history"][-1]["is_result"] is True


@pytest.mark.slow
def test_arena_run_backend_local_finishes_and_leaves_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, output, descendants = run_arena(["run", str(SCENARIO), "--backend", "local", "--runs-dir", str(runs)])
    assert code == EXIT_OK, output
    assert len(descendants) >= 5  # backend, two launchers, their agents (restarted by the reset: more pids)
    assert still_running(descendants) == [], output
    page = PAGE_RE.search(output)
    assert page is not None, output
    battle_id = page["battle_id"]
    assert (runs / battle_id / "summary.json").is_file()
    assert "Arena pass^k evaluation" in output and "✅ Attempt 2/2" in output

    # The run's backend is gone; its database is not: serve it again and read the battle through the API.
    db_match = DB_RE.search(output)
    assert db_match is not None, output
    db = Path(db_match["db"])
    assert db.is_file() and db.is_relative_to(runs)
    port = free_port()

    async def read_back() -> dict[str, Any]:
        async with ProcessGroup(tmp_path / "logs", handle_signals=False) as group:
            proc = group.start("backend", arena("backend", "--port", str(port), "--db", str(db)), env=_env(), cwd=REPO)
            await wait_until_ready(proc, loopback_url(port) + "/health", timeout_s=60)
            async with httpx.AsyncClient(base_url=loopback_url(port), trust_env=False) as http:
                response = await http.get(f"/battles/{battle_id}")
                assert response.status_code == 200
                battle: dict[str, Any] = response.json()
                return battle

    _assert_finished_with_our_result(asyncio.run(read_back()), output)


@pytest.mark.slow
async def test_arena_run_through_a_running_arena_backend(tmp_path: Path) -> None:
    port = free_port()
    url = loopback_url(port)
    async with ProcessGroup(tmp_path / "logs", handle_signals=False) as group:
        backend = group.start(
            "backend", arena("backend", "--port", str(port), "--db", str(tmp_path / "b.sqlite3")), env=_env(), cwd=REPO
        )
        await wait_until_ready(backend, url + "/health", timeout_s=60)
        code, output, descendants = await asyncio.to_thread(
            run_arena, ["run", str(SCENARIO), "--backend", url, "--runs-dir", str(tmp_path / "runs")]
        )
        assert code == EXIT_OK, output
        assert still_running(descendants) == [], output
        page = PAGE_RE.search(output)
        assert page is not None and page["backend"] == url, output
        async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
            battle = (await http.get(f"/battles/{page['battle_id']}")).json()
            agents = (await http.get("/agents")).json()
        _assert_finished_with_our_result(battle, output)
        # Both agents were registered through the API, behind launchers, and are unlocked again.
        assert {a["register_info"]["is_green"] for a in agents} == {True, False}
        assert all(a["register_info"]["launcher_url"] for a in agents)
        assert all(a["status"] == "unlocked" for a in agents)


@pytest.mark.slow
def test_ctrl_c_during_a_backend_battle_stops_everything(tmp_path: Path) -> None:
    proc, watcher, lines, page_seen, reader = start_arena_until(
        ["run", str(SCENARIO), "--backend", "local", "--runs-dir", str(tmp_path / "runs")], "battle page:"
    )
    try:
        assert page_seen.wait(timeout=RUN_LIMIT_S), "".join(lines)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    output = "".join(lines)
    assert code == 130, output
    assert "interrupted; all agents stopped" in output
    assert still_running(watcher.stop()) == [], output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--backend", "ftp://example"], "--backend: expected 'local' or an http(s) URL"),
        (["--keep-backend"], "need --backend"),
        (["--backend", "http://127.0.0.1:9", "--keep-backend"], "--keep-backend: only with --backend local"),
        (["--backend", "local", "--backend-url", "http://127.0.0.1:9"], "--backend-url: not with --backend"),
    ],
)
def test_bad_backend_options_exit_2_before_starting_anything(tmp_path: Path, extra: list[str], needle: str) -> None:
    code, output, descendants = run_arena(["run", str(SCENARIO), "--runs-dir", str(tmp_path / "runs"), *extra])
    assert code == EXIT_CONFIG_ERROR, output
    assert needle in output
    assert not (tmp_path / "runs").exists()
    assert still_running(descendants) == []


def test_an_unreachable_backend_is_a_harness_error(tmp_path: Path) -> None:
    url = loopback_url(free_port())  # nothing listens there
    code, output, descendants = run_arena(["run", str(SCENARIO), "--backend", url, "--runs-dir", str(tmp_path / "r")])
    assert code == EXIT_HARNESS_ERROR, output
    assert f"GET {url}/health: the backend did not answer" in output
    assert still_running(descendants) == []


def test_parse_backend() -> None:
    assert parse_backend(" local ") == "local"
    assert parse_backend("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"
    assert parse_backend("https://agentbeats.example/api") == "https://agentbeats.example/api"


def test_battle_timeout_estimate_covers_every_wave_at_its_limit() -> None:
    config = BattleConfig(mode="manual", k=4, task_id=[1, 2, 3], concurrency=4, attempt_timeout_s=100)
    assert estimate_battle_timeout(config) == 3 * 100 + 300  # 12 attempts, 3 waves
    assert estimate_battle_timeout(BattleConfig(k=2, attempt_timeout_s=10)) == 600  # never below 10 minutes
    sweep = BattleConfig(mode="all", k=4, concurrency=8, attempt_timeout_s=900)
    assert estimate_battle_timeout(sweep) >= 100 * 900


def _battle(
    state: str,
    result: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {"state": state, "result": result, "interact_history": history or [], "error": error}


def test_judge_battle_maps_backend_outcomes_to_exit_codes() -> None:
    ok = _battle("finished", {"winner": "green_agent", "detail": {"attempts": []}})
    assert judge_battle(ok) == (EXIT_OK, None)  # completed whatever the agent scored
    code, message = judge_battle(_battle("error", error="Failed to reset green agent"))
    assert code == EXIT_HARNESS_ERROR and "Failed to reset green agent" in str(message)
    # AgentBeats' timeout result and ours.
    for result in (
        {"winner": "draw", "score": {"reason": "timeout"}, "detail": {"message": "Battle timed out"}},
        {"winner": "draw", "reason": "timeout", "detail": {}},
    ):
        code, message = judge_battle(_battle("finished", result))
        assert code == EXIT_HARNESS_ERROR and "timed out" in str(message)
    # The green agent's reason code decides; the text is for humans (and is what the terminal shows).
    for reason, code in (("config_invalid", 2), ("request_invalid", 2), ("harness_error", 3), (None, 3)):
        detail = {"error": "k must be even", **({"reason": reason} if reason else {})}
        ended = {"is_result": True, "message": "battle could not start: k must be even", "winner": "draw"}
        verdict = judge_battle(_battle("finished", {"winner": "draw", "detail": detail}, [{**ended, "detail": detail}]))
        assert verdict == (code, "battle could not start: k must be even"), reason


@pytest.mark.slow
def test_keep_backend_serves_the_page_until_ctrl_c(tmp_path: Path) -> None:
    proc, watcher, lines, serving, reader = start_arena_until(
        ["run", str(SCENARIO), "--backend", "local", "--keep-backend", "-q", "--runs-dir", str(tmp_path / "r")],
        "keeps serving at",
    )
    try:
        assert serving.wait(timeout=RUN_LIMIT_S), "".join(lines)
        output = "".join(lines)
        found = re.search(r"battle: (?P<url>http://127\.0\.0\.1:\d+/ui/battles/[0-9a-f-]+)", output)
        assert found is not None, output
        page = httpx.get(found["url"], trust_env=False)
        assert page.status_code == 200 and "arena-replay-white-" in page.text
        # Only the backend is left running: the launchers and their agents were stopped after the battle.
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) == 1 and "battle_backend" in " ".join(children[0].cmdline())
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    assert code == EXIT_OK, "".join(lines)
    assert "backend stopped" in "".join(lines)
    assert still_running(watcher.stop()) == []
