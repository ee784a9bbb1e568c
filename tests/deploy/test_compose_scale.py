"""The scale profile of docker-compose.yml (issue 29): green workers that run a battle's attempts together with the
green agent it started on, through the postgres profile's backend. Checked by construction, as the rest of the file
(tests/deploy/test_compose_static.py): the pool flags on every green agent of the pool, the key as a Compose secret
file (never an environment variable or the image), replicas without host ports, health checks and dependencies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.routing import Match

from tests.deploy.conftest import documented_env, documented_postgres_env
from tests.deploy.deploy_support import (
    BYO_FILE,
    COMPOSE_FILE,
    DOCKERFILE,
    ENV_EXAMPLE,
    REPO,
    active_services,
    command_argv,
    compose_profiles,
    healthcheck_argv,
    interpolate,
    load_yaml,
    merge_compose,
    parse_command,
    read_env_file,
    strings_of,
)
from tests.deploy.test_compose_static import depends, dockerignore_excludes, schema_errors

SCALE_KEYS = ("ARENA_POOL_KEY_FILE", "ARENA_GREEN_ARGS")
"""What .env.example says to set for the scale profile (its ``#   KEY=VALUE`` lines)."""
SCALE_COMMAND = "docker compose --profile postgres --profile scale up --scale green-worker=3"
SECRET_PATH = "/run/secrets/pool_key"
POOL_FLAGS = ("--pool", "--pool-backend", "--pool-key-file", "--pool-capacity")
WORKER = "green-worker"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
MAX_CAPACITY = 4096
"""arena-green's largest --pool-capacity (green_agent/service/pool_member.py)."""


def scale_env() -> dict[str, str]:
    """The documented PostgreSQL settings plus the documented scale settings."""
    return {**documented_postgres_env(), **{key: documented_env((key,), "scale")[key] for key in SCALE_KEYS}}


@pytest.fixture(scope="module")
def scale() -> tuple[dict[str, Any], set[str]]:
    """The project as `docker compose --profile postgres --profile scale up` sees it with the documented .env."""
    env = scale_env()
    return interpolate(load_yaml(COMPOSE_FILE), env), compose_profiles(env, ["postgres", "scale"])


def pool_members(project: dict[str, Any], profiles: set[str]) -> dict[str, list[str]]:
    """Every active service whose green agent is in a pool -> the green agent's argv (after a launcher's ``--``)."""
    members = {}
    for name, service in active_services(project, profiles).items():
        argv = command_argv(service) if "command" in service else []
        agent = argv[argv.index("--") + 1 :] if "--" in argv else argv
        if agent[:1] == ["arena-green"] and "--pool" in agent:
            members[name] = agent
    return members


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def test_the_scale_deployment_matches_the_compose_specification(scale: tuple[dict[str, Any], set[str]]) -> None:
    project, profiles = scale
    assert profiles == {"postgres", "scale"}
    assert schema_errors(project) == []
    assert {WORKER, "postgres", "backend", "green"} <= set(active_services(project, profiles))


def test_every_green_agent_of_the_pool_gets_the_pool_flags_and_the_key_as_a_secret(
    scale: tuple[dict[str, Any], set[str]],
) -> None:
    project, profiles = scale
    members = pool_members(project, profiles)
    assert set(members) == {"green", WORKER}, "the green service (battles start there) and the workers"
    pools = set()
    backend_url = flag(command_argv(project["services"]["register"]), "--backend")
    for name, argv in members.items():
        pools.add(flag(argv, "--pool"))
        assert flag(argv, "--pool-backend") == backend_url == "http://backend:9000", name
        assert urlsplit(flag(argv, "--pool-backend")).hostname in active_services(project, profiles)
        assert flag(argv, "--pool-key-file") == SECRET_PATH, name
        assert project["services"][name]["secrets"] == ["pool_key"], name
    assert pools == {read_env_file(ENV_EXAMPLE)["ARENA_POOL"]}, "one pool: the workers' and the green service's"
    scenarios = {name: flag(argv, "--scenario") for name, argv in members.items()}
    assert len(set(scenarios.values())) == 1, f"members run only their operator's LLM user settings: {scenarios}"
    capacity = int(flag(members[WORKER], "--pool-capacity"))
    assert 1 <= capacity <= MAX_CAPACITY


def test_the_pool_key_is_a_secret_file_never_an_environment_variable_or_in_the_image(
    scale: tuple[dict[str, Any], set[str]], tmp_path: Path
) -> None:
    project, _ = scale
    secret = project["secrets"]["pool_key"]
    assert set(secret) == {"file"}, "a file on the host, not an environment variable or an external secret"
    assert secret["file"] == scale_env()["ARENA_POOL_KEY_FILE"]
    raw = load_yaml(COMPOSE_FILE)
    for document in (raw, load_yaml(BYO_FILE)):
        for name, service in document["services"].items():
            listing = json.dumps(service.get("environment") or {})
            assert "POOL_KEY" not in listing, f"{name}: the pool key must not travel in the environment"
    assert "POOL_KEY" not in DOCKERFILE.read_text(encoding="utf-8")
    # A key value given through the documented file appears nowhere in the project Compose builds.
    key_file = tmp_path / "pool.key"
    key_file.write_text("pool-key-only-in-the-file-3b9c\n", encoding="utf-8")
    project = interpolate(raw, {**scale_env(), "ARENA_POOL_KEY_FILE": str(key_file)})
    assert not [text for text in strings_of(project) if "pool-key-only-in-the-file" in text]


def test_without_a_key_file_the_secret_is_an_empty_file_that_no_pool_accepts() -> None:
    project = interpolate(load_yaml(COMPOSE_FILE), {})
    default = REPO / project["secrets"]["pool_key"]["file"]
    assert default.is_file() and default.read_bytes() == b"", "fail closed: arena-green refuses an empty key"
    assert read_env_file(ENV_EXAMPLE)["ARENA_POOL_KEY_FILE"] == ""
    from green_agent.service.pool_flags import read_pool_key

    with pytest.raises(ValueError, match=r"^--pool-key-file: the pool key is empty"):
        read_pool_key(default, None)
    # The documented key file stays out of the image's build context (.dockerignore is an allow-list) and out of git.
    assert dockerignore_excludes("pool.key")
    assert re.search(r"(?m)^/?pool\.key$", (REPO / ".gitignore").read_text(encoding="utf-8"))


def test_workers_are_replicas_without_host_ports(scale: tuple[dict[str, Any], set[str]]) -> None:
    project, profiles = scale
    worker = active_services(project, profiles)[WORKER]
    assert worker["profiles"] == ["scale"]
    assert int(worker["deploy"]["replicas"]) >= 1
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    assert [int(port) for port in worker["expose"]] == [int(flag(command_argv(worker), "--port"))]
    assert "volumes" not in worker, "replicas share no run directory"
    published = [name for name, service in active_services(project, profiles).items() if service.get("ports")]
    assert published == ["backend"]


def _serves_get(app: Any, path: str) -> bool:
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [], "query_string": b""}
    return any(route.matches(scope)[0] == Match.FULL for route in app.routes)


def test_workers_have_a_health_check_on_their_own_port_and_wait_for_a_healthy_backend(
    scale: tuple[dict[str, Any], set[str]], tmp_path: Path
) -> None:
    from green_agent.service.a2a_server import create_app as create_green_app

    project, profiles = scale
    worker = active_services(project, profiles)[WORKER]
    argv = healthcheck_argv(worker)
    assert argv[:2] == ["python", "-c"]
    compile(argv[2], "<green-worker healthcheck>", "exec")
    urls = argv[3:]
    assert urls == [f"http://127.0.0.1:{flag(command_argv(worker), '--port')}/health"]
    app = create_green_app("http://green-worker:9006", runs_dir=tmp_path)
    assert all(_serves_get(app, urlsplit(url).path) for url in urls)
    assert depends(worker) == {"backend": {"condition": "service_healthy"}}
    assert "healthcheck" in project["services"]["backend"]
    assert depends(project["services"]["backend"])["postgres"]["condition"] == "service_healthy"


def test_the_pool_flags_are_arena_greens_own(scale: tuple[dict[str, Any], set[str]]) -> None:
    """The real parser takes the workers' and the green service's commands."""
    project, profiles = scale
    for name, argv in pool_members(project, profiles).items():
        options = parse_command(argv).options
        assert options["pool"] == flag(argv, "--pool"), name
        assert str(options["pool_key_file"]) == SECRET_PATH, name
        assert options["pool_backend"] == flag(argv, "--pool-backend"), name
    service = active_services(project, profiles)["green"]
    assert parse_command(command_argv(service)).wrapped is not None


def test_without_the_scale_profile_no_worker_runs_and_the_green_agent_is_in_no_pool() -> None:
    raw = load_yaml(COMPOSE_FILE)
    example = read_env_file(ENV_EXAMPLE)
    postgres = documented_postgres_env()
    byo = merge_compose(raw, load_yaml(BYO_FILE))
    for project, profiles in (
        (interpolate(raw, {}), set()),
        (interpolate(raw, example), compose_profiles(example)),
        (interpolate(raw, postgres), compose_profiles(postgres)),
        (interpolate(byo, example), compose_profiles(example, ["byo-image"])),
    ):
        assert WORKER not in active_services(project, profiles)
        assert pool_members(project, profiles) == {}


def test_env_example_and_the_docs_show_the_scale_settings_and_command() -> None:
    env = scale_env()
    assert flag(env["ARENA_GREEN_ARGS"].split(), "--pool-key-file") == SECRET_PATH
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    for where in (text, doc):
        assert SCALE_COMMAND in where
    for key in SCALE_KEYS:
        assert f"{key}={env[key]}" in doc, f"docs/deploy.md does not show {key}={env[key]}"
    assert re.search(r"(?m)^#.*ARENA_POOL\b", text)
