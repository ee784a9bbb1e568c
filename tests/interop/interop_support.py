"""Helpers for the interoperability tests: the REAL AgentBeats backend (agentbeats==1.2.6 in a venv of its own), our
backend, our agents behind our launchers, and one battle driven through the AgentBeats HTTP API.

Why the real backend runs from a copy of its package: it keeps its SQLite file next to its own source
(``backend/db/data/database.db``, chosen from ``__file__`` in ``backend/db/storage.py`` and
``backend/services/match_storage.py``; no setting or working directory changes it). Serving a copy of the package
from the test's temporary directory (it comes first on ``sys.path``) gives every run a database of its own and leaves
the venv untouched.

Why the proxy variables: on every registration the real backend asks an LLM (openrouter.ai, hard-coded) to match
agents to roles, in the background. The test machine must not reach the internet, so HTTP(S)_PROXY point at a
loopback port where nothing listens: that call fails at once (the backend only logs it) while NO_PROXY keeps every
loopback call direct.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from rich.console import Console

from green_agent.engine.config import remote_config_dict
from launcher.cli.battle_display import BattleDisplay
from launcher.cli.run_command import RunOptions, green_agent_argv, start_agent, white_agent_argv
from launcher.cli.scenario import load_scenario
from launcher.ports import free_port, free_ports, loopback_url
from launcher.processes import ProcessGroup, wait_until_ready

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCENARIO = HERE / "interop_scenario.toml"
VENV_SCRIPT = REPO / "scripts" / "agentbeats_venv.sh"
WHITE_REQUIREMENT = [{"role": "blue_agent", "name": "white_agent", "required": True}]
WHITE_ALIAS = "arena-replay-white"
GREEN_ALIAS = "arena-green"
BATTLE_LIMIT_S = 600.0
"""Upper bound on one battle (it takes well under a minute); only turns a hang into a failure."""
DEAD_PROXY = "http://127.0.0.1:9"
"""The discard port: nothing listens there, so a proxied (internet) request fails at once."""


def agentbeats_venv() -> Path:
    """Build or reuse the AgentBeats venv; skip when it cannot be built, except in CI (CI=true), where that fails."""
    configured = os.environ.get("ARENA_AGENTBEATS_VENV", ".venv-agentbeats")
    venv = Path(configured) if Path(configured).is_absolute() else REPO / configured
    try:
        done = subprocess.run(
            ["bash", str(VENV_SCRIPT)],
            check=False,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1200,
            env={**os.environ, "ARENA_AGENTBEATS_VENV": str(venv)},
        )
        ok, output = done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    except (OSError, subprocess.TimeoutExpired) as error:
        ok, output = False, str(error)
    if not ok:
        reason = f"the AgentBeats venv ({venv}) could not be built by {VENV_SCRIPT.name}:\n{output}"
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the AgentBeats interop test; " + reason)
        pytest.skip(reason)
    return venv


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages/backend/app.py"))
    if not found:
        raise FileNotFoundError(f"backend/app.py not found under {venv}/lib/python3*/site-packages")
    return found[0].parent.parent


def isolated_backend_copy(venv: Path, root: Path) -> Path:
    """A copy of the real backend package under ``root`` (without any database); returns the directory to serve from."""
    source = _site_packages(venv) / "backend"
    target = root / "agentbeats_site"
    shutil.copytree(source, target / "backend", ignore=shutil.ignore_patterns("__pycache__", "data"))
    return target


def real_backend_db(site: Path) -> Path:
    """Where the copied backend keeps its SQLite file."""
    return site / "backend" / "db" / "data" / "database.db"


async def start_real_backend(group: ProcessGroup, venv: Path, root: Path) -> tuple[str, Path]:
    """The real AgentBeats backend on a free loopback port, as docs/design/agentbeats-protocol.md describes; returns
    (URL, its SQLite file)."""
    site = isolated_backend_copy(venv, root)
    port = free_port()
    url = loopback_url(port)
    env = {
        **os.environ,
        "DEV_LOGIN": "true",
        "OPENROUTER_API_KEY": "dummy",
        "PUBLIC_BACKEND_URL": url,
        "HTTP_PROXY": DEAD_PROXY,
        "HTTPS_PROXY": DEAD_PROXY,
        "http_proxy": DEAD_PROXY,
        "https_proxy": DEAD_PROXY,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "PYTHONPATH": str(site),
    }
    env.pop("OPENAI_API_KEY", None)
    argv = [
        str(venv / "bin" / "python"),
        "-m",
        "uvicorn",
        "backend.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    proc = group.start("agentbeats_backend", argv, env=env, cwd=site)
    await wait_until_ready(proc, url + "/health", timeout_s=120)
    return url, real_backend_db(site)


async def start_our_backend(group: ProcessGroup, root: Path) -> str:
    """``python -m battle_backend`` on a free loopback port with its SQLite file under ``root``."""
    port = free_port()
    url = loopback_url(port)
    argv = [
        sys.executable,
        "-m",
        "battle_backend",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(root / "arena_backend.sqlite3"),
    ]
    proc = group.start("arena_backend", argv, cwd=REPO)
    await wait_until_ready(proc, url + "/health", timeout_s=120)
    return url


@dataclass(frozen=True)
class Agents:
    """Our white and green agents, each behind an ``arena launcher``."""

    white_url: str
    white_launcher: str
    green_url: str
    green_launcher: str


async def start_agents(group: ProcessGroup, runs_dir: Path, log_dir: Path) -> Agents:
    """The replay white agent and the green agent (``--scenario`` = the interop scenario) behind launchers."""
    from launcher.cli.scenario import load_scenario

    scenario = load_scenario(SCENARIO)
    white_port, green_port, white_launcher_port, green_launcher_port = free_ports(4)
    options = RunOptions(scenario_path=SCENARIO, runs_dir=runs_dir, with_launchers=True, quiet=True)
    display = BattleDisplay(Console(file=io.StringIO()), quiet=True)
    white_url, _ = await start_agent(
        group,
        display,
        "white_agent",
        white_agent_argv(scenario.white_agent, white_port, python=sys.executable),
        white_port,
        white_launcher_port,
        options,
        log_dir,
    )
    green_url, _ = await start_agent(
        group,
        display,
        "green_agent",
        green_agent_argv(green_port, runs_dir, python=sys.executable, scenario=SCENARIO),
        green_port,
        green_launcher_port,
        options,
        log_dir,
    )
    return Agents(white_url, loopback_url(white_launcher_port), green_url, loopback_url(green_launcher_port))


async def _checked(response: httpx.Response, *expected: int) -> Any:
    assert response.status_code in expected, (
        f"{response.request.method} {response.request.url}: HTTP {response.status_code} {response.text[:500]}"
    )
    return response.json() if response.content else None


@dataclass
class BattleRun:
    """One battle as the backend recorded it, and the agent records after it."""

    battle: dict[str, Any]
    white: dict[str, Any]
    green: dict[str, Any]


async def run_battle(backend_url: str, agents: Agents) -> BattleRun:
    """Register both agents and create the battle through the AgentBeats API; poll until it is finished or errored."""
    async with httpx.AsyncClient(base_url=backend_url, timeout=30.0, trust_env=False) as http:
        white = await _checked(
            await http.post(
                "/agents",
                json={
                    "alias": WHITE_ALIAS,
                    "agent_url": agents.white_url,
                    "launcher_url": agents.white_launcher,
                    "is_green": False,
                },
            ),
            201,
        )
        green = await _checked(
            await http.post(
                "/agents",
                json={
                    "alias": GREEN_ALIAS,
                    "agent_url": agents.green_url,
                    "launcher_url": agents.green_launcher,
                    "is_green": True,
                    "participant_requirements": WHITE_REQUIREMENT,
                    "battle_timeout": 600,
                },
            ),
            201,
        )
        config = remote_config_dict(load_scenario(SCENARIO).pass_k_config)  # what a remote config may say
        created = await _checked(
            await http.post(
                "/battles",
                json={
                    "green_agent_id": green["agent_id"],
                    "opponents": [{"name": "white_agent", "agent_id": white["agent_id"]}],
                    "config": {"pass_k_config": config},
                },
            ),
            201,
        )
        battle_id = created["battle_id"]
        async with asyncio.timeout(BATTLE_LIMIT_S):
            while True:
                battle = await _checked(await http.get(f"/battles/{battle_id}"), 200)
                if battle["state"] in ("finished", "error"):
                    break
                await asyncio.sleep(0.5)
        white_after = await _checked(await http.get(f"/agents/{white['agent_id']}"), 200)
        green_after = await _checked(await http.get(f"/agents/{green['agent_id']}"), 200)
    return BattleRun(battle, white_after, green_after)


def green_events(battle: dict[str, Any]) -> list[dict[str, Any]]:
    """The progress events our green agent posted (not the backend's own system lines, not the result)."""
    return [e for e in battle["interact_history"] if e.get("reported_by") == "green_agent" and not e.get("is_result")]


def result_events(battle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in battle["interact_history"] if e.get("is_result")]


def event_kinds(battle: dict[str, Any]) -> Counter[str]:
    """How many progress events of each type (``detail.type``) the green agent posted."""
    return Counter(str((e.get("detail") or {}).get("type")) for e in green_events(battle))


def normalised_messages(battle: dict[str, Any]) -> list[str]:
    """The progress lines without their timings, sorted (attempts run concurrently, so arrival order varies)."""
    return sorted(re.sub(r"time=[0-9.]+s", "time=?", str(e.get("message"))) for e in green_events(battle))


def attempt_outcomes(battle: dict[str, Any]) -> list[tuple[int, int, str, float | None]]:
    """(task index, attempt, outcome, reward) of every attempt in the result, sorted."""
    attempts = battle["result"]["detail"]["attempts"]
    return sorted((a["task_index"], a["attempt"], a["outcome"], a["reward"]) for a in attempts)


def descendants(group: ProcessGroup) -> list[psutil.Process]:
    """Every process the group's children started, and the children themselves (taken before teardown)."""
    found: list[psutil.Process] = []
    for proc in group.processes:
        try:
            parent = psutil.Process(proc.pid)
            found.append(parent)
            found.extend(parent.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return found


def still_running(processes: list[psutil.Process]) -> list[str]:
    """Those of ``processes`` that are still alive (zombies count as gone)."""
    alive = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
        except psutil.NoSuchProcess:
            continue
    return alive


class DescendantWatcher:
    """Records every descendant of a running process (sampled until it exits), to check none outlives it.

    Agents restarted by a launcher get new pids during the run, so one snapshot is not enough.
    """

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        import threading

        self.root = psutil.Process(pid)
        self.seen: dict[int, psutil.Process] = {}
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for child in self.root.children(recursive=True):
                    self.seen.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                return
            self._stop.wait(self._interval_s)

    def stop(self) -> list[psutil.Process]:
        self._stop.set()
        self._thread.join(timeout=5)
        return list(self.seen.values())
