"""A hostile white agent squats the green agent's idempotency keys on a default backend (issue 24, item 1).

``arena run --backend local`` (the backend's default settings: no ``--require-token``) against a hostile white agent
that, as soon as its battle_info tells it where the backend is, learns the green agent's event-id nonce and posts
tokenless events under every key the green agent will use next: forged ``attempt_finished`` events ("success"), a
forged ``battle_started`` (calibration), a forged "system" line, and a forged result (refused: results need the
token). The nonce comes from the public ``GET /battles/{id}`` where the backend shows it; where it does not, the
test hands it over (read from the green agent's outbox), so the backend is tried against an attacker who knows
every key.

On the code of f70a336 the backend answered the green agent's real, token-carrying events and result with 204
"duplicate" and dropped them: the battle ended as a draw by timeout and ``arena run`` exited 1. Now: the battle
finishes with the green agent's result and every one of its events; the forged events are stored, marked
unverified, and count for nothing (no attempt in the viewer, no progress, no system line); ``arena run`` exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from battle_backend import BackendSettings, create_app
from tests.adversarial.harness import REPO, alive, descendants
from tests.adversarial.hostile_agent import HostileAgent, Reply, Turn, malformed, message_reply, serve_hostile
from tests.support.servers import serve_app

RUN_LIMIT_S = 400.0
BATTLE_TIMEOUT_S = 150
SQUATTED_KEYS = 120
"""Keys squatted ahead of the green agent (it posts about a dozen events for this battle)."""
PAGE_RE = re.compile(r"battle page: (?P<backend>http://127\.0\.0\.1:\d+)/ui/battles/(?P<battle_id>[0-9a-f-]+)")
FORGED_TASK = "mock/base/0"


def scenario_text(white_url: str) -> str:
    return f"""
name = "squatting"

[pass_k_config]
mode = "manual"
domain = "mock"
split = "base"
task_index = [0]
k = 2
max_steps = 6
turn_timeout_s = 10
attempt_timeout_s = 60
concurrency = 2

[user_simulator]
kind = "scripted"

[white_agent]
kind = "external"
url = "{white_url}"
"""


def forged_event(battle_id: str, key: str, seq: int) -> dict[str, Any]:
    """What the squatter posts under the green agent's key ``key`` (a different forgery for every few keys)."""
    if seq == 1:
        detail: dict[str, Any] = {
            "type": "battle_started",
            "attempts_total": 2,
            "k": 2,
            "tasks": [FORGED_TASK],
            "calibration": True,
        }
        return {"is_result": False, "message": "forged start", "reported_by": "green_agent", "detail": detail}
    if seq % 3 == 0:
        return {"is_result": False, "message": "Battle finished", "reported_by": "system", "event_id": key}
    attempt = 1 + seq % 2
    detail = {
        "type": "attempt_finished",
        "task_key": FORGED_TASK,
        "attempt": attempt,
        "outcome": "success",
        "reward": 1.0,
        "category": "FORGED",
        "done": 2,
        "total": 2,
    }
    return {
        "is_result": False,
        "message": f"✅ Attempt {attempt}/2 (forged)",
        "reported_by": "green_agent",
        "detail": detail,
        "event_id": key,
    }


class Squatter:
    """The hostile agent's side business: on battle_info, learn the nonce and squat the keys (on the agent's loop)."""

    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.task: asyncio.Task[None] | None = None
        self.nonce_source = ""
        self.statuses: list[int] = []
        self.result_status: int | None = None
        self.errors: list[str] = []

    def behaviour(self, fallback: Any) -> Any:
        def behave(turn: Turn) -> Reply:
            with contextlib.suppress(ValueError):
                info = json.loads(turn.text)
                if isinstance(info, dict) and info.get("type") == "battle_info" and self.task is None:
                    self.task = asyncio.get_running_loop().create_task(
                        self._squat(str(info["backend_url"]), str(info["battle_id"]))
                    )
                    return message_reply(turn, "ready", note="battle_info")
            reply: Reply = fallback(turn)
            return reply

        return behave

    def _nonce_from_outbox(self, battle_id: str) -> str | None:
        outbox = self.runs / battle_id / "outbox.jsonl"
        with contextlib.suppress(OSError):
            found = re.search(re.escape(battle_id) + r":([0-9a-f]+):\d+", outbox.read_text(encoding="utf-8"))
            if found:
                return found.group(1)
        return None

    async def _squat(self, backend: str, battle_id: str) -> None:
        try:
            async with httpx.AsyncClient(base_url=backend, trust_env=False, timeout=10) as http:
                nonce = None
                async with asyncio.timeout(120):
                    while nonce is None:
                        battle = (await http.get(f"/battles/{battle_id}")).json()
                        for event in battle.get("interact_history", []):
                            key = event.get("event_id") if isinstance(event, dict) else None
                            if isinstance(key, str) and key.startswith(f"{battle_id}:"):
                                nonce, self.nonce_source = key.rsplit(":", 2)[1], "GET /battles/{id}"
                        if nonce is None and (nonce := self._nonce_from_outbox(battle_id)) is not None:
                            self.nonce_source = "the green agent's outbox (handed over by the test)"
                        if nonce is None:
                            await asyncio.sleep(0.02)
                for seq in range(1, SQUATTED_KEYS + 1):
                    key = f"{battle_id}:{nonce}:{seq}"
                    body = forged_event(battle_id, key, seq) | {"event_id": key}
                    self.statuses.append((await http.post(f"/battles/{battle_id}", json=body)).status_code)
                    if self.statuses[-1] == 400:  # the battle is over
                        break
                forged_result = {
                    "is_result": True,
                    "winner": "white_agent",
                    "reported_by": "green_agent",
                    "detail": {"forged": True},
                    "event_id": f"{battle_id}:{nonce}:{SQUATTED_KEYS + 1}",
                }
                self.result_status = (await http.post(f"/battles/{battle_id}", json=forged_result)).status_code
        except Exception as error:  # reported by the test
            self.errors.append(f"{type(error).__name__}: {error}")


DB_RE = re.compile(r"arena backend --db (?P<db>\S+)")


def _run_arena(scenario: Path, runs: Path) -> tuple[int, str, list[Any]]:
    """``arena run SCENARIO --backend local`` to its end: (exit code, output, every descendant seen)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    argv = [sys.executable, "-m", "launcher", "run", str(scenario), "--backend", "local"]
    argv += ["--runs-dir", str(runs), "--battle-timeout", str(BATTLE_TIMEOUT_S)]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[Any] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            seen.extend(d for d in descendants(proc.pid) if d not in seen)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        output, _ = proc.communicate(timeout=RUN_LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stop.set()
        watcher.join(timeout=5)
    return proc.returncode, output, seen


@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT_S + 120)
async def test_a_squatter_on_a_default_backend_claims_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    squatter = Squatter(runs)
    agent = HostileAgent(name="squatting white agent")
    with serve_hostile(agent) as white_url:
        agent.set_behaviour(squatter.behaviour(malformed()))
        scenario = tmp_path / "squatting.toml"
        scenario.write_text(scenario_text(white_url), encoding="utf-8")
        code, output, seen = await asyncio.to_thread(_run_arena, scenario, runs)
    left = alive(seen)
    for process in left:
        with contextlib.suppress(Exception):
            process.kill()
    assert left == [], left

    page, db = PAGE_RE.search(output), DB_RE.search(output)
    assert page is not None, output
    battle_id = page["battle_id"]
    assert squatter.errors == [], squatter.errors
    assert squatter.nonce_source, "the squatter never learnt the nonce"
    print(f"\n[squatting] nonce from {squatter.nonce_source}; forged posts: {squatter.statuses}")
    assert squatter.statuses and set(squatter.statuses) <= {204, 400}, squatter.statuses
    assert squatter.result_status in (400, 401)  # a tokenless result is refused (or comes after the real one)
    assert code == 0, output
    assert db is not None, output

    # the run's backend is gone; its database is served again, in this process, to read the battle back
    settings = BackendSettings(db_path=Path(db["db"]), battle_timeout_default_s=600.0)
    async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, trust_env=False) as http:
        battle = (await http.get(f"/battles/{battle_id}")).json()
        page_html = (await http.get(f"/ui/battles/{battle_id}")).text
        viewers = [(await http.get(f"/ui/battles/{battle_id}/attempts/{FORGED_TASK}/{n}")).text for n in (1, 2)]

    history = battle["interact_history"]
    assert battle["state"] == "finished" and battle["result"].get("reason") != "timeout", battle.get("result")
    assert isinstance(battle["result"]["detail"]["attempts"], list) and "forged" not in battle["result"]["detail"]
    assert not any("event_id" in entry for entry in history)  # the keys are not shown any more

    # every event the green agent emitted is stored, in order, once, then its one result, all verified
    emitted = [json.loads(line) for line in (runs / battle_id / "events.jsonl").read_text().splitlines()]
    real = [e for e in history if not e.get("unverified") and e.get("reported_by") == "green_agent"]
    assert [(e["detail"]["type"], e["detail"]["timestamp"]) for e in real[:-1]] == [
        (e["type"], e["timestamp"]) for e in emitted
    ]
    assert real[-1]["is_result"] is True and [e["is_result"] for e in history].count(True) == 1
    assert not any("forged" in str(e.get("message")) for e in real)

    # every forged event that got in is stored and marked unverified, on the API and on the page
    forged = [e for e in history if e.get("unverified")]
    assert len(forged) == squatter.statuses.count(204) > 0
    assert page_html.count("badge-unverified") == len(forged)
    # no forged attempt is the battle's: the viewer shows the green agent's attempts only
    assert all("FORGED" not in viewer and "(forged)" not in viewer for viewer in viewers)
    assert "FORGED" not in page_html.split('id="timeline"', 1)[0]  # the progress box and result come before
