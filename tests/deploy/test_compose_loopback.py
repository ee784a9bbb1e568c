"""The containers' exact commands, run as processes on loopback: the whole Compose stack without Docker.

Each service's command comes from docker-compose.yml, substituted with the offline settings .env.example documents
(no profile: the backend on SQLite, the postgres service off);
only what Docker would provide is mapped: service host names -> 127.0.0.1, container ports -> free ports, bind
address 0.0.0.0 -> 127.0.0.1, /app -> a temporary directory. Environments hold the Dockerfile's ENV settings plus
exactly the variables each service's `environment` names. Start order and readiness follow depends_on and the
health checks, which are themselves run (the same `python -c` probes Docker would run). Then a battle is created
through the backend API and run to the end, and `arena export` turns its run directory into results.json and CSV.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from green_agent.engine.results import BattleResult
from launcher.cli.app import app
from launcher.ports import free_ports
from launcher.processes import ManagedProcess, ProcessGroup
from tests.deploy.conftest import documented_offline_env
from tests.deploy.deploy_support import (
    CONVENTION_PORTS,
    REPO,
    Loopback,
    active_services,
    command_argv,
    compose_profiles,
    dockerfile_runtime_env,
    healthcheck_argv,
    interpolate,
)

pytestmark = pytest.mark.slow

START_LIMIT_S = 240.0
BATTLE_LIMIT_S = 300.0
"""Upper bounds that only turn a hang into a failure (the stack starts in seconds; the battle takes well under a
minute)."""
BATTLE_CONFIG: dict[str, Any] = {
    "pass_k_config": {
        "mode": "manual",
        "k": 2,
        "domain": "retail",
        "task_id": 7,
        "split": "test",
        "calibration": True,
        "concurrency": 2,
        "turn_timeout_s": 5,
        "attempt_timeout_s": 120,
        "user_simulator": {"kind": "scripted"},
    }
}


def process_env(service: dict[str, Any], home: Path) -> dict[str, str]:
    """What the container's process sees: the image's ENV plus the service's environment (nothing else of ours).

    PATH puts this virtual environment first, as the image puts /opt/arena/bin; PYTHONPATH makes the working tree
    stand in for the image's installed project (an editable install made before a package existed misses it).
    """
    image_env = {k: v for k, v in dockerfile_runtime_env().items() if k not in ("PATH", "HOME")}
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        **image_env,
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    env.update({name: str(value) for name, value in (service.get("environment") or {}).items()})
    return env


async def wait_healthy(name: str, proc: ManagedProcess, probe: list[str], env: dict[str, str], cwd: Path) -> None:
    """Run the service's health check until it passes, as Docker would; fail fast if the service exits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_LIMIT_S
    while True:
        if not proc.running:
            raise AssertionError(f"{name} exited ({proc.returncode}) before it was healthy:\n{proc.stderr_tail()}")
        check = await asyncio.create_subprocess_exec(
            *probe, env=env, cwd=cwd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        if await check.wait() == 0:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{name} was not healthy within {START_LIMIT_S:g} s:\n{proc.stderr_tail()}")
        await asyncio.sleep(0.5)


async def run_once(group: ProcessGroup, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """A one-shot service: run it to its end, require exit 0, return the JSON it printed last."""
    proc = group.start(name, argv, env=env, cwd=cwd)
    async with asyncio.timeout(START_LIMIT_S):
        while proc.running:
            await asyncio.sleep(0.2)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr_tail()}"
    lines = proc.stdout_path.read_text(encoding="utf-8").strip().splitlines()
    await group.stop(proc)
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


async def agent_pids(client: httpx.AsyncClient, launcher_urls: list[str]) -> list[int]:
    pids = []
    for url in launcher_urls:
        health = (await client.get(url + "/health")).json()
        if health.get("pid"):
            pids.append(int(health["pid"]))
    return pids


async def test_the_compose_stack_runs_a_battle_end_to_end(tmp_path: Path, compose_raw: dict[str, Any]) -> None:
    env = documented_offline_env()
    project = interpolate(compose_raw, env)
    services = active_services(project, compose_profiles(env))
    assert "postgres" not in services
    backend_argv = command_argv(services["backend"])
    assert backend_argv[backend_argv.index("--db") + 1] == "/app/data/backend.sqlite3"  # SQLite, in the app dir
    app_dir = tmp_path / "app"
    for directory in ("data", "runs"):
        (app_dir / directory).mkdir(parents=True)
    (app_dir / "scenarios").symlink_to(REPO / "scenarios", target_is_directory=True)
    home = tmp_path / "home"
    home.mkdir()
    ports = dict(zip(CONVENTION_PORTS.values(), free_ports(len(CONVENTION_PORTS)), strict=True))
    world = Loopback(hosts=frozenset(services), ports=ports, app_dir=app_dir)
    backend_url = f"http://127.0.0.1:{ports[CONVENTION_PORTS['backend']]}"
    launchers = [f"http://127.0.0.1:{ports[CONVENTION_PORTS[n]]}" for n in ("green_launcher", "white_launcher")]
    long_running = [name for name, s in services.items() if s.get("restart") != "no"]
    assert sorted(long_running) == ["backend", "green", "white"]

    pids: list[int] = []
    async with (
        ProcessGroup(tmp_path / "logs", grace_s=10.0) as group,
        httpx.AsyncClient(timeout=30.0, trust_env=False) as client,
    ):
        started = {}
        for name in long_running:
            started[name] = group.start(
                name, world.argv(command_argv(services[name])), env=process_env(services[name], home), cwd=app_dir
            )
        await asyncio.gather(
            *(
                wait_healthy(
                    name,
                    started[name],
                    world.argv(healthcheck_argv(services[name])),
                    process_env(services[name], home),
                    app_dir,
                )
                for name in long_running
            )
        )
        register = services["register"]
        assert set(register["depends_on"]) == set(long_running)
        register_argv = world.argv(command_argv(register))
        registration = await run_once(group, "register", register_argv, process_env(register, home), app_dir)
        again = await run_once(group, "register-again", register_argv, process_env(register, home), app_dir)
        assert again["battle_request"] == registration["battle_request"]
        assert registration["green_agent"]["created"] and not again["green_agent"]["created"]

        response = await client.post(
            f"{backend_url}/battles", json={**registration["battle_request"], "config": BATTLE_CONFIG}
        )
        assert response.status_code == 201, response.text
        battle_id = response.json()["battle_id"]
        async with asyncio.timeout(BATTLE_LIMIT_S):
            while True:
                group.check_alive()
                battle = (await client.get(f"{backend_url}/battles/{battle_id}")).json()
                if battle["state"] in ("finished", "error"):
                    break
                await asyncio.sleep(0.5)
        assert battle["state"] == "finished", battle.get("error")
        detail = battle["result"]["detail"]
        result = BattleResult.model_validate(detail)
        assert result.status == "completed" and len(result.attempts) == 2
        # The battle went through the launchers: the backend reset both agents before starting it.
        resets = [e for e in battle["interact_history"] if e.get("reported_by") == "system"]
        assert resets, "no system steps recorded"
        pids = await agent_pids(client, launchers)
        assert len(pids) == 2
        (tmp_path / "battle.json").write_text(json.dumps(battle), encoding="utf-8")

    # Every process is gone: ours (the group stopped them) and the agents the launchers started.
    _, alive = psutil.wait_procs([p for p in map(_process, pids) if p is not None], timeout=15)
    assert not alive, f"agents left running: {[p.pid for p in alive]}"

    # The green agent's run directory, exported for a leaderboard and as CSV.
    run_dir = app_dir / "runs" / battle_id
    white_id = registration["white_agent"]["agent_id"]
    runner = CliRunner()
    exported = runner.invoke(app, ["export", str(run_dir), "--participant-id", f"white_agent={white_id}"])
    assert exported.exit_code == 0, exported.output
    document = json.loads(exported.stdout)
    assert document["participants"] == {"white_agent": white_id}
    assert [BattleResult.model_validate(r) for r in document["results"]] == [result]
    from_backend = runner.invoke(app, ["export", str(tmp_path / "battle.json")])
    assert json.loads(from_backend.stdout) == document  # the backend's record names the same participant
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["export", str(run_dir), "--format", "csv"]).stdout)))
    assert [(r["battle_id"], r["attempt"]) for r in rows] == [(battle_id, "1"), (battle_id, "2")]


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
