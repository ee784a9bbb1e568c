"""scenarios/agentbeats/: the platform's scenario.toml (agentbeats==1.2.6 `load_scenario`) and the newer
[green_agent] / [[participants]] / [config] shape (the RDI agentbeats-tutorial runner). Commands are checked by
their programs' parsers, URLs and ports against each other; the real platform loader reads the platform file
(agentbeats venv), and the offline assessment file is run end to end the way the tutorial's runner and client do,
its results.json compared with `arena export`'s."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from green_agent.engine.config import parse_battle_config
from launcher.cli.app import app
from launcher.cli.assessment_client import run_assessment
from launcher.cli.scenario import load_scenario
from launcher.ports import free_ports
from launcher.processes import ProcessGroup, wait_until_ready
from tests.deploy.deploy_support import (
    AGENT_CARD_PATH,
    ASSESSMENT_SCENARIOS,
    CONVENTION_PORTS,
    PLATFORM_SCENARIO,
    REPO,
    Loopback,
    ParsedCommand,
    parse_command,
)

BATTLE_LIMIT_S = 600.0
"""Only turns a hang into a failure."""


def load_toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


# -- the platform shape -----------------------------------------------------------------------------------------


def platform_services() -> dict[str, tuple[dict[str, Any], ParsedCommand]]:
    data = load_toml(PLATFORM_SCENARIO)
    services = {}
    for service in data["services"]:
        assert service["type"] == "command", service["name"]
        parsed = parse_command(shlex.split(service["command"]))
        key = parsed.subcommand if parsed.subcommand != "launcher" else parsed.wrapped.program  # type: ignore[union-attr]
        services[str(key)] = (service, parsed)
    return services


def test_platform_scenario_has_the_loader_fields_and_launches_through_services() -> None:
    data = load_toml(PLATFORM_SCENARIO)
    assert data["scenario"]["name"] and data["scenario"]["version"]
    assert "agents" not in data, "[[agents]] would start AgentBeats' own card agents, not ours"
    assert data["launch"]["mode"] in ("tmux", "separate", "current")
    assert set(platform_services()) == {"backend", "arena-white", "arena-green", "register"}
    for service in data["services"]:
        assert (PLATFORM_SCENARIO.parent / service["working_dir"]).resolve() == REPO


def test_platform_scenario_ports_and_urls_agree() -> None:
    services = platform_services()
    backend = services["backend"][1].wrapped
    assert backend is not None and backend.options["port"] == CONVENTION_PORTS["backend"]
    assert services["backend"][0]["health_check"] == f"http://127.0.0.1:{backend.options['port']}/health"
    urls = {}
    for role, program in (("green", "arena-green"), ("white", "arena-white")):
        service, launcher = services[program]
        agent = launcher.wrapped
        assert agent is not None
        assert agent.options["port"] == CONVENTION_PORTS[role]
        assert launcher.options["port"] == CONVENTION_PORTS[f"{role}_launcher"]
        assert launcher.options["agent_url"] == agent.options["card_url"] == f"http://127.0.0.1:{agent.options['port']}"
        assert service["health_check"] == agent.options["card_url"] + AGENT_CARD_PATH
        urls[role] = agent.options["card_url"]
        urls[f"{role}_launcher"] = f"http://127.0.0.1:{launcher.options['port']}"
    register = services["register"][1].options
    assert register["backend"] == f"http://127.0.0.1:{backend.options['port']}"
    assert (register["green"], register["white"]) == (urls["green"], urls["white"])
    assert (register["green_launcher"], register["white_launcher"]) == (urls["green_launcher"], urls["white_launcher"])


def test_platform_scenario_is_offline() -> None:
    services = platform_services()
    white = services["arena-white"][1].wrapped
    green = services["arena-green"][1].wrapped
    assert white is not None and green is not None
    assert white.options["kind"] == "flaky"
    scenario = load_scenario(REPO / green.options["scenario"])
    assert scenario.pass_k_config.calibration and scenario.pass_k_config.user_simulator.kind == "scripted"


@pytest.mark.agentbeats
def test_the_agentbeats_loader_reads_the_platform_scenario() -> None:
    from tests.interop.interop_support import agentbeats_venv

    venv = agentbeats_venv()
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from agentbeats.utils.deploy.scenario_manager import ScenarioManager\n"
        "m = ScenarioManager(scenario_root=Path(sys.argv[1]), project_dir=Path(sys.argv[2]))\n"
        "print(json.dumps({'services': [[s.name, s.type, str(s.working_dir.resolve()), s.command, s.health_check]\n"
        "                               for s in m.services], 'agents': len(m.agents)}))\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, str(PLATFORM_SCENARIO.parent), str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["agents"] == 0
    expected = [
        [s["name"], "command", str(REPO), s["command"], s.get("health_check")]
        for s in load_toml(PLATFORM_SCENARIO)["services"]
    ]
    assert loaded["services"] == expected


# -- the assessment shape ---------------------------------------------------------------------------------------


@pytest.fixture(params=ASSESSMENT_SCENARIOS, ids=lambda p: p.name)
def assessment(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load_toml(request.param)


def test_there_are_offline_and_llm_assessment_scenarios() -> None:
    assert [p.name for p in ASSESSMENT_SCENARIOS] == ["assessment_llm.toml", "assessment_offline.toml"]


def test_assessment_commands_serve_the_endpoints_they_announce(assessment: dict[str, Any]) -> None:
    green = parse_command(shlex.split(assessment["green_agent"]["cmd"]))
    assert green.program == "arena-green"
    assert green.options["card_url"] == assessment["green_agent"]["endpoint"]
    assert green.options["port"] == port_of(assessment["green_agent"]["endpoint"]) == CONVENTION_PORTS["green"]
    (participant,) = assessment["participants"]
    white = parse_command(shlex.split(participant["cmd"]))
    assert white.program == "arena-white"
    assert white.options["card_url"] == participant["endpoint"]
    assert white.options["port"] == port_of(participant["endpoint"]) == CONVENTION_PORTS["white"]
    assert participant["role"] == participant["name"] == "white_agent"  # the role our green agent looks up
    assert participant["agentbeats_id"] == "" and assessment["green_agent"]["agentbeats_id"] == ""


def test_assessment_configs_are_valid_battle_configs(assessment: dict[str, Any]) -> None:
    config = parse_battle_config(assessment["config"])
    (participant,) = assessment["participants"]
    white = parse_command(shlex.split(participant["cmd"]))
    if white.options["kind"] == "llm":
        assert config.user_simulator.kind == "llm"
        # the user's key variable is the green agent's own default (remote configs may not name one)
        assert "api_key_env" not in assessment["config"]["user_simulator"]
        assert white.options["api_key_env"] == config.user_simulator.api_key_env == "OPENAI_API_KEY"
    else:  # offline agents learn the task from calibration metadata; a scripted user needs no key
        assert config.calibration and config.user_simulator.kind == "scripted"


def test_offline_assessment_is_the_offline_demo_battle() -> None:
    offline = load_toml(AGENTBEATS_OFFLINE)
    demo = load_scenario(REPO / "scenarios" / "offline_demo.toml")
    assert parse_battle_config(offline["config"]) == demo.pass_k_config
    white = parse_command(shlex.split(offline["participants"][0]["cmd"])).options
    assert white["seed"] == demo.white_agent.seed
    assert {k: float(v) for k, v in (i.split("=") for i in white["fault_rate"])} == demo.white_agent.fault_rates


AGENTBEATS_OFFLINE = REPO / "scenarios" / "agentbeats" / "assessment_offline.toml"


@pytest.mark.slow
async def test_offline_assessment_runs_like_the_tutorial_runner_and_exports_the_same_results(tmp_path: Path) -> None:
    data = load_toml(AGENTBEATS_OFFLINE)
    green_port, white_port = CONVENTION_PORTS["green"], CONVENTION_PORTS["white"]
    ports = dict(zip((green_port, white_port), free_ports(2), strict=True))
    world = Loopback(hosts=frozenset(), ports=ports, app_dir=tmp_path)
    green_url = world.value(data["green_agent"]["endpoint"])
    (participant,) = data["participants"]
    white_url = world.value(participant["endpoint"])
    # The runner passes its environment on with its interpreter's directory first on PATH (there: the tutorial's
    # venv; here: ours, which has Arena's console scripts). PYTHONPATH stands in for an up-to-date install.
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    async with ProcessGroup(tmp_path / "logs") as group:
        # The runner: start every cmd (split like a shell, no shell), wait for the agent cards.
        for name, command, url in (
            ("white", participant["cmd"], white_url),
            ("green", data["green_agent"]["cmd"], green_url),
        ):
            proc = group.start(name, world.argv(shlex.split(command)), env=env, cwd=tmp_path)
            await wait_until_ready(proc, url + AGENT_CARD_PATH, timeout_s=180)
        # The client: one message {"participants": {role: endpoint}, "config": {...}}, then the Result artifact.
        async with asyncio.timeout(BATTLE_LIMIT_S):
            outcome = await run_assessment(green_url, white_url, data["config"])
    assert outcome.state == "completed", outcome.error
    assert outcome.result is not None
    role_to_id = {p["role"]: p["agentbeats_id"] for p in data["participants"] if p.get("agentbeats_id")}
    client_results = {"participants": role_to_id, "results": [outcome.result]}

    battle_id = outcome.result["battle_id"]
    exported = CliRunner().invoke(app, ["export", str(tmp_path / "runs" / battle_id)])
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout) == client_results
    assert len(outcome.result["attempts"]) == 5 * 4
