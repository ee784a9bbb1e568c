"""docker-compose.yml, compose.byo-white.yml, .env.example, the Dockerfile and .dockerignore, checked by construction:
the Compose specification's JSON schema, every command against its program's parser, ports, health checks,
volumes, dependencies, and secrets. (No Docker engine runs here; test_compose_loopback runs the same commands.)"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
from starlette.routing import Match

from launcher.cli.scenario import load_scenario
from launcher.ports import free_ports
from tests.deploy.conftest import (
    POSTGRES_KEYS,
    POSTGRES_TEST_PASSWORD,
    documented_offline_env,
    documented_postgres_env,
)
from tests.deploy.deploy_support import (
    AGENT_CARD_PATH,
    BYO_FILE,
    COMPOSE_FILE,
    CONSOLE_SCRIPTS,
    CONVENTION_PORTS,
    DOCKERFILE,
    DOCKERIGNORE,
    ENV_EXAMPLE,
    PG_ISREADY_OPTIONS,
    REPO,
    CommandRejected,
    MissingVariable,
    ParsedCommand,
    active_services,
    command_argv,
    compose_profiles,
    healthcheck_argv,
    interpolate,
    merge_compose,
    parse_command,
    parse_pg_isready,
    project_scripts,
    read_env_file,
    strings_of,
    substitute,
    variable_references,
)

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_-]{12,}|sk-proj-|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-|AIza[0-9A-Za-z_-]{20,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|Bearer\s+[A-Za-z0-9._-]{12,})"
)
LONG_RUNNING = ("backend", "green", "white")
SQLITE_DB = "/app/data/backend.sqlite3"
"""The backend's database without the postgres profile: SQLite on the backend-data volume."""
PASSWORD_ALIASES = {"PGPASSWORD": "POSTGRES_PASSWORD"}
"""Secret environment entries fed from a secret variable of another name: libpq reads PGPASSWORD, the postgres
image POSTGRES_PASSWORD, and one .env value sets both."""
DEPLOY_DOC = REPO / "docs" / "deploy.md"


def compose_schema() -> dict[str, Any]:
    """The Compose specification's JSON schema, as vendored (and kept current) by check-jsonschema."""
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def deployments(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> dict[str, tuple[dict[str, Any], set[str]]]:
    """Every way the files are used: name -> (substituted project, active profiles).

    Profiles are what Compose would activate for that environment and those ``--profile`` options."""
    example = read_env_file(ENV_EXAMPLE)
    offline = documented_offline_env()
    postgres = documented_postgres_env()
    byo = merge_compose(compose_raw, byo_raw)
    byo_url = {**example, "BYO_WHITE_URL": "http://host.docker.internal:8080"}
    byo_image = {**example, "BYO_WHITE_IMAGE": "ghcr.io/someone/agent:1"}
    byo_image_postgres = {**postgres, "BYO_WHITE_IMAGE": "ghcr.io/someone/agent:1"}
    return {
        "no .env": (interpolate(compose_raw, {}), compose_profiles({})),
        ".env.example": (interpolate(compose_raw, example), compose_profiles(example)),
        "offline (documented)": (interpolate(compose_raw, offline), compose_profiles(offline)),
        "postgres (documented)": (interpolate(compose_raw, postgres), compose_profiles(postgres)),
        "byo url": (interpolate(byo, byo_url), compose_profiles(byo_url)),
        "byo image": (interpolate(byo, byo_image), compose_profiles(byo_image, ["byo-image"])),
        "byo image + postgres": (
            interpolate(byo, byo_image_postgres),
            compose_profiles(byo_image_postgres, ["byo-image", "postgres"]),
        ),
    }


@pytest.fixture(scope="module")
def projects(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> dict[str, tuple[dict[str, Any], set[str]]]:
    return deployments(compose_raw, byo_raw)


def parsed_services(project: dict[str, Any], profiles: set[str]) -> dict[str, ParsedCommand]:
    return {
        name: parse_command(command_argv(service))
        for name, service in active_services(project, profiles).items()
        if "command" in service
    }


# -- the variable-substitution helper itself (so that the checks below check what Compose would see) ---------------


def test_profiles_follow_compose_rules() -> None:
    assert compose_profiles({}) == set()
    assert compose_profiles({"COMPOSE_PROFILES": ""}) == set()
    assert compose_profiles({"COMPOSE_PROFILES": "postgres, byo-image"}) == {"postgres", "byo-image"}
    # One --profile on the command line and COMPOSE_PROFILES (from the shell or .env) is ignored, not merged.
    assert compose_profiles({"COMPOSE_PROFILES": "postgres"}, ["byo-image"]) == {"byo-image"}
    project = {"services": {"always": {}, "db": {"profiles": ["postgres"]}, "x": {"profiles": ["a", "b"]}}}
    assert set(active_services(project)) == {"always"}
    assert set(active_services(project, {"postgres"})) == {"always", "db"}
    assert set(active_services(project, {"b"})) == {"always", "x"}
    assert set(active_services(project, {"*"})) == {"always", "db", "x"}


def test_substitution_follows_compose_rules() -> None:
    env = {"SET": "value", "EMPTY": ""}
    assert substitute("${SET:-d} ${EMPTY:-d} ${UNSET:-d}", env) == "value d d"
    assert substitute("${SET-d} ${EMPTY-d} ${UNSET-d}", env) == "value  d"
    assert substitute("$$HOME $SET ${SET:+alt} ${EMPTY:+alt}", env) == "$HOME value alt "
    with pytest.raises(MissingVariable):
        substitute("${UNSET:?needed}", env)
    assert variable_references("a $$B ${C:-x} $D") == [("C", ":-", "x"), ("D", None, None)]


# -- schema -------------------------------------------------------------------------------------------------------


def test_files_as_written_match_the_compose_specification(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> None:
    assert schema_errors(compose_raw) == []
    assert schema_errors(byo_raw) == []


def test_every_deployment_matches_the_compose_specification(projects: dict[str, Any]) -> None:
    for name, (project, _) in projects.items():
        assert schema_errors(project) == [], name


def test_the_schema_check_can_fail(compose_raw: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(compose_raw))
    broken["services"]["backend"]["healthcheck"]["retries"] = "many"
    broken["services"]["green"]["depends_on"] = {"backend": {"condition": "when_ready"}}
    assert len(schema_errors(broken)) >= 2


def test_check_jsonschema_accepts_both_files() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE_FILE),
            str(BYO_FILE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_variable_has_a_default_or_is_optional(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> None:
    # `docker compose up` with no .env at all must work (the offline kinds need no key): nothing is required. This
    # holds for services behind a profile too: Compose substitutes the whole file before it applies profiles, so a
    # ${POSTGRES_PASSWORD:?} would stop every `docker compose up`, not only those with the postgres profile (the
    # postgres image refuses an empty password instead).
    for document in (compose_raw, byo_raw):
        for text in strings_of(document):
            for name, op, _ in variable_references(text):
                assert op in (":-", "-"), f"${{{name}}} in {text!r} has no default"


def test_every_variable_is_documented_in_env_example(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> None:
    documented = set(read_env_file(ENV_EXAMPLE))
    used = {
        name for doc in (compose_raw, byo_raw) for text in strings_of(doc) for name, _, _ in variable_references(text)
    }
    assert used - documented == set()
    assert documented - used == set(), "variables in .env.example that nothing reads"


# -- commands -------------------------------------------------------------------------------------------------------


def test_console_scripts_are_the_programs_the_commands_run() -> None:
    assert project_scripts() == CONSOLE_SCRIPTS
    installed = {
        ep.name: ep.value
        for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.name in CONSOLE_SCRIPTS
    }
    assert installed == CONSOLE_SCRIPTS


def test_every_command_is_accepted_by_its_program(projects: dict[str, Any]) -> None:
    for name, (project, profiles) in projects.items():
        services = parsed_services(project, profiles)
        assert services, name
        for service, parsed in services.items():
            assert parsed.extra == [] or parsed.wrapped is not None, f"{name}/{service}: stray arguments {parsed.extra}"


@pytest.mark.parametrize(
    "argv",
    [
        [
            "arena",
            "launcher",
            "--port",
            "9111",
            "--agent-url",
            "http://green:9006",
            "--",
            "arena-green",
            "--mcp-allowed-hosts",
            "green:*",
        ],
        ["arena", "backend", "--host", "0.0.0.0", "--bind", "9000"],
        [
            "arena",
            "register",
            "--backend",
            "http://backend:9000",
            "--green",
            "http://g:1",
            "--white",
            "http://w:1",
            "--seed",
            "3",
        ],
        ["arena-white", "--kind", "robot", "--port", "9004"],
        ["arena", "serve"],
        ["curl", "http://backend:9000/health"],
    ],
)
def test_a_command_with_an_unknown_option_or_program_is_rejected(argv: list[str]) -> None:
    with pytest.raises(CommandRejected):
        parse_command(argv)


def test_agent_commands_pass_key_names_never_values(projects: dict[str, Any]) -> None:
    for name, (project, profiles) in projects.items():
        for service, parsed in parsed_services(project, profiles).items():
            argv = parsed.argv + (parsed.wrapped.argv if parsed.wrapped else [])
            assert not any(token.startswith("--api-key") and token != "--api-key-env" for token in argv), service
            if parsed.wrapped and parsed.wrapped.program == "arena-white":
                key_env = parsed.wrapped.options["api_key_env"]
                assert key_env in project["services"][service]["environment"], f"{name}/{service}"


# -- ports, URLs and health checks --------------------------------------------------------------------------------


def url_port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def test_ports_follow_the_agentbeats_conventions_and_agree(projects: dict[str, Any]) -> None:
    project, profiles = projects[".env.example"]
    services = project["services"]
    parsed = parsed_services(project, profiles)

    backend = parsed["backend"].wrapped
    assert backend is not None
    assert backend.options["port"] == CONVENTION_PORTS["backend"]
    assert backend.options["host"] == "0.0.0.0"
    assert backend.options["public_url"] == f"http://backend:{CONVENTION_PORTS['backend']}"
    published = services["backend"]["ports"]
    assert [p.rsplit(":", 1)[1] for p in published] == [str(CONVENTION_PORTS["backend"])]
    assert published == [f"127.0.0.1:{CONVENTION_PORTS['backend']}:{CONVENTION_PORTS['backend']}"]

    for name in ("green", "white"):
        launcher = parsed[name]
        agent = launcher.wrapped
        assert agent is not None and agent.program == f"arena-{name}"
        assert launcher.subcommand == "launcher" and launcher.options["host"] == "0.0.0.0"
        assert launcher.options["port"] == CONVENTION_PORTS[f"{name}_launcher"]
        assert agent.options["port"] == CONVENTION_PORTS[name] and agent.options["host"] == "0.0.0.0"
        # The agent announces the URL the other containers reach it at, and its launcher waits on that same URL.
        assert agent.options["card_url"] == f"http://{name}:{CONVENTION_PORTS[name]}"
        assert launcher.options["agent_url"] == agent.options["card_url"]
        assert sorted(int(p) for p in services[name]["expose"]) == sorted(
            [CONVENTION_PORTS[name], CONVENTION_PORTS[f"{name}_launcher"]]
        )

    register = parsed["register"].options
    assert register["backend"] == backend.options["public_url"]
    assert register["green"] == parsed["green"].wrapped.options["card_url"]  # type: ignore[union-attr]
    assert register["white"] == parsed["white"].wrapped.options["card_url"]  # type: ignore[union-attr]
    assert register["green_launcher"] == f"http://green:{parsed['green'].options['port']}"
    assert register["white_launcher"] == f"http://white:{parsed['white'].options['port']}"
    for option in ("backend", "green", "white", "green_launcher", "white_launcher"):
        assert urlsplit(register[option]).hostname in services, option


def health_targets(project: dict[str, Any], profiles: set[str]) -> dict[str, list[str]]:
    """Service -> the URLs its health check probes (checked to be a Python urllib probe run by `python -c`), for the
    services that run our image (the postgres service's pg_isready check is tested on its own)."""
    targets: dict[str, list[str]] = {}
    ours = arena_image_services(project)
    for name, service in active_services(project, profiles).items():
        if "healthcheck" not in service or name not in ours:
            continue
        argv = healthcheck_argv(service)
        assert argv[:2] == ["python", "-c"], f"{name}: the slim image has no curl; probe with python -c"
        compile(argv[2], f"<{name} healthcheck>", "exec")
        targets[name] = argv[3:]
    return targets


def test_health_checks_probe_each_service_on_its_own_ports(projects: dict[str, Any]) -> None:
    project, profiles = projects[".env.example"]
    parsed = parsed_services(project, profiles)
    targets = health_targets(project, profiles)
    assert set(targets) == set(LONG_RUNNING)
    assert targets["backend"] == [f"http://127.0.0.1:{parsed['backend'].wrapped.options['port']}/health"]  # type: ignore[union-attr]
    for name in ("green", "white"):
        agent_port = parsed[name].wrapped.options["port"]  # type: ignore[union-attr]
        assert targets[name] == [
            f"http://127.0.0.1:{agent_port}{AGENT_CARD_PATH}",
            f"http://127.0.0.1:{parsed[name].options['port']}/status",
        ]


def _serves_get(app: Any, path: str) -> bool:
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [], "query_string": b""}
    return any(route.matches(scope)[0] == Match.FULL for route in app.routes)


def test_health_check_urls_are_routes_the_services_serve(projects: dict[str, Any], tmp_path: Path) -> None:
    from battle_backend import BackendSettings, create_app
    from green_agent.service.a2a_server import create_app as create_green_app
    from launcher.agentbeats_launcher import AgentLauncher, build_launcher_app
    from white_agent.app import create_white_agent_app, make_agent

    apps = {
        CONVENTION_PORTS["backend"]: create_app(BackendSettings(db_path=tmp_path / "b.sqlite3")),
        CONVENTION_PORTS["green"]: create_green_app("http://green:9006", runs_dir=tmp_path),
        CONVENTION_PORTS["white"]: create_white_agent_app(make_agent("replay"), "http://white:9004"),
        CONVENTION_PORTS["green_launcher"]: build_launcher_app(
            AgentLauncher(agent_argv=["true"], agent_url="http://green:9006", log_dir=tmp_path), autostart=False
        ),
        CONVENTION_PORTS["white_launcher"]: build_launcher_app(
            AgentLauncher(agent_argv=["true"], agent_url="http://white:9004", log_dir=tmp_path), autostart=False
        ),
    }
    project, profiles = projects[".env.example"]
    for service, urls in health_targets(project, profiles).items():
        for url in urls:
            parts = urlsplit(url)
            assert parts.hostname == "127.0.0.1", f"{service}: a health check runs inside its own container"
            assert _serves_get(apps[url_port(url)], parts.path), f"{service}: nothing serves GET {url}"
    assert not _serves_get(apps[CONVENTION_PORTS["backend"]], "/healthz")  # the route check can fail


# -- secrets ------------------------------------------------------------------------------------------------------


def test_secret_variables_are_passed_by_name_only(compose_raw: dict[str, Any], byo_raw: dict[str, Any]) -> None:
    for document in (compose_raw, byo_raw):
        for name, service in document["services"].items():
            environment = service.get("environment") or {}
            assert isinstance(environment, dict), f"{name}: environment as a mapping"
            for key, value in environment.items():
                if SECRET_NAME.search(key):
                    source = PASSWORD_ALIASES.get(key, key)
                    assert value == f"${{{source}:-}}", f"{name}: {key} must be passed through as ${{{source}:-}}"


def test_no_secret_value_is_written_anywhere() -> None:
    files = [
        COMPOSE_FILE,
        BYO_FILE,
        ENV_EXAMPLE,
        DOCKERFILE,
        DOCKERIGNORE,
        *sorted((REPO / "scenarios" / "agentbeats").rglob("*.toml")),
    ]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not SECRET_VALUE.search(text), f"{path} holds something that looks like a credential"
    assert SECRET_VALUE.search("OPENAI_API_KEY=sk-abcdefghijklmnopqrstu")  # the pattern can fail


def test_env_example_leaves_every_secret_empty() -> None:
    for key, value in read_env_file(ENV_EXAMPLE).items():
        if SECRET_NAME.search(key):
            assert value == "", f".env.example: {key} must be empty"


def test_dockerfile_bakes_in_no_secret() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith(("ARG ", "ENV ")):
            assert not SECRET_NAME.search(line), line
        if line.startswith("COPY "):
            assert ".env" not in line.split(), line


def dockerignore_excludes(path: str) -> bool:
    """Docker's .dockerignore rules: patterns in order, the last matching one wins; a match on a parent counts."""
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        regex = re.escape(body).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def test_build_context_leaves_out_secrets_and_local_state() -> None:
    for path in (
        ".env",
        ".env.local",
        ".venv/bin/python",
        ".venv-agentbeats/x",
        "runs/b/summary.json",
        "backend.sqlite3",
        "tests/deploy/test_compose_static.py",
        ".git/config",
        "scratch/x",
        "green_agent/__pycache__/config.cpython-311.pyc",
        "scenarios/local.sqlite3",
    ):
        assert dockerignore_excludes(path), path
    for path in (
        "pyproject.toml",
        "README.md",
        "green_agent/engine/config.py",
        "battle_backend/templates/base.html",
        "white_agent/__main__.py",
        "launcher/cli/app.py",
        "scenarios/offline_demo.toml",
    ):
        assert not dockerignore_excludes(path), path


# -- the image ----------------------------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    stages: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("FROM "):
            stages.append([])
        if stages and line.strip() and not line.startswith("#"):
            stages[-1].append(line.strip())
    return stages


def test_dockerfile_is_multi_stage_slim_non_root_and_prints_help_by_default() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"(?m)^ARG PYTHON_IMAGE=python:3\.11-slim$", text)
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert all(stage[0].startswith("FROM ${PYTHON_IMAGE} AS ") for stage in stages)
    build, runtime = stages[0], stages[-1]
    assert any("pip install ." in line for line in build)
    assert any(line.startswith("COPY --from=build /opt/arena /opt/arena") for line in runtime)
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    # numeric (Kubernetes' runAsNonRoot cannot check a name), not root, and the uid/gid the image created
    assert users and re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", users[-1]), users
    uid, gid = users[-1].split(":")
    assert f"--uid {uid} " in text and f"--gid {gid} " in text
    assert runtime[-1] == 'CMD ["arena", "--help"]'
    expose = [int(p) for line in runtime if line.startswith("EXPOSE ") for p in line.split()[1:]]
    assert sorted(expose) == sorted(CONVENTION_PORTS.values())


def test_dockerfile_copies_every_package_and_only_what_the_context_holds() -> None:
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied: set[str] = set()
    for stage in dockerfile_stages():
        for line in stage:
            if line.startswith("COPY ") and "--from=" not in line:
                sources = line.split()[1:-1]
                for source in sources:
                    assert (REPO / source).exists(), f"COPY of a missing path: {source}"
                    assert not dockerignore_excludes(source), f"COPY {source}, but .dockerignore leaves it out"
                    copied.add(source)
    assert packages <= copied, f"packages not copied into the build: {packages - copied}"
    assert {"pyproject.toml", pyproject["project"]["readme"], "scenarios"} <= copied


def arena_image_services(document: dict[str, Any]) -> dict[str, Any]:
    """The services that run this project's image (built from the Dockerfile), not a third-party one."""
    return {
        name: service
        for name, service in document["services"].items()
        if "build" in service or "ARENA_IMAGE" in str(service.get("image", ""))
    }


def test_arena_image_services_are_the_project_ones(compose_raw: dict[str, Any]) -> None:
    assert set(arena_image_services(compose_raw)) == {*LONG_RUNNING, "register", "green-worker"}


def test_runtime_directories_exist_writable_for_the_user_before_volumes_mount(compose_raw: dict[str, Any]) -> None:
    runtime = " ".join(dockerfile_stages()[-1])
    targets = {
        volume.split(":")[1]
        for service in arena_image_services(compose_raw).values()
        for volume in service.get("volumes", [])
    }
    for target in targets:
        assert "mkdir -p" in runtime and target in runtime.split("mkdir -p", 1)[1].split("&&")[0], target
        assert re.search(rf"chown arena:arena[^&]*{re.escape(target)}", runtime), target


def test_the_default_command_prints_help() -> None:
    from typer.testing import CliRunner

    from launcher.cli.app import app

    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "register" in result.output and "export" in result.output


def test_healthcheck_python_is_the_image_python(compose_raw: dict[str, Any]) -> None:
    # PATH puts the virtual environment first, so `python` in a health check is the one with the project.
    runtime = " ".join(dockerfile_stages()[-1])
    assert "PATH=/opt/arena/bin:$PATH" in runtime
    services = arena_image_services(compose_raw).values()
    assert all(healthcheck_argv(s)[0] == "python" for s in services if "healthcheck" in s)


# -- volumes, dependencies, restarts ------------------------------------------------------------------------------


def test_volumes_are_declared_used_and_hold_what_the_commands_write(projects: dict[str, Any]) -> None:
    project, profiles = projects[".env.example"]
    declared = set(project.get("volumes") or {})
    used: dict[str, dict[str, str]] = {}
    for name, service in project["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert source in declared, f"{name}: volume {source} is not declared"
            used.setdefault(name, {})[source] = target
    assert declared == {source for mounts in used.values() for source in mounts}
    parsed = parsed_services(project, profiles)
    db = str(parsed["backend"].wrapped.options["db"])  # type: ignore[union-attr]
    assert db == SQLITE_DB and db.startswith(used["backend"]["backend-data"] + "/")
    runs_dir = str(parsed["green"].wrapped.options["runs_dir"])  # type: ignore[union-attr]
    assert runs_dir == used["green"]["green-runs"]
    assert str(parsed["green"].options["log_dir"]).startswith(runs_dir + "/")


def depends(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    value = service.get("depends_on") or {}
    return value if isinstance(value, dict) else {name: {"condition": "service_started"} for name in value}


def test_dependencies_are_declared_satisfiable_and_acyclic(projects: dict[str, Any]) -> None:
    for deployment, (project, profiles) in projects.items():
        services = project["services"]
        active = active_services(project, profiles)
        for name, service in active.items():
            for target, spec in depends(service).items():
                assert target in services, f"{deployment}/{name}: depends on undefined {target}"
                if target not in active:
                    assert spec.get("required") is False, f"{deployment}/{name}: needs {target}, which is off"
                if spec.get("condition") == "service_healthy":
                    assert "healthcheck" in services[target], f"{deployment}: {target} has no health check"
        for name in active:
            assert_acyclic(services, name, (), deployment)


def assert_acyclic(services: dict[str, Any], name: str, path: tuple[str, ...], deployment: str) -> None:
    assert name not in path, f"{deployment}: dependency cycle {' -> '.join((*path, name))}"
    for target in depends(services.get(name, {})):
        assert_acyclic(services, target, (*path, name), deployment)


def test_registration_runs_once_after_everything_is_healthy(projects: dict[str, Any]) -> None:
    project, _ = projects[".env.example"]
    register = project["services"]["register"]
    assert register["restart"] == "no"
    assert {name: spec["condition"] for name, spec in depends(register).items()} == {
        name: "service_healthy" for name in LONG_RUNNING
    }
    for name in LONG_RUNNING:
        assert project["services"][name]["restart"] == "unless-stopped"
        assert project["services"][name]["init"] is True  # an init reaps the launchers' grandchildren


def test_only_the_backend_is_published(projects: dict[str, Any]) -> None:
    project, _ = projects[".env.example"]
    assert [name for name, s in project["services"].items() if s.get("ports")] == ["backend"]


# -- the scenarios the green agent defaults to --------------------------------------------------------------------


def test_scenario_paths_resolve_inside_the_image(projects: dict[str, Any]) -> None:
    # The image's WORKDIR is /app and scenarios/ is copied to /app/scenarios: relative paths resolve there.
    assert re.search(r"(?m)^WORKDIR /app$", DOCKERFILE.read_text(encoding="utf-8"))
    for deployment, (project, profiles) in projects.items():
        green = parsed_services(project, profiles)["green"].wrapped
        assert green is not None
        scenario = Path(green.options["scenario"])
        assert not scenario.is_absolute() and scenario.parts[0] == "scenarios", deployment
        load_scenario(REPO / scenario)  # raises ConfigError naming the field if it is not a valid scenario


def test_offline_settings_pick_an_offline_white_agent_and_a_calibration_scenario(projects: dict[str, Any]) -> None:
    project, profiles = projects["offline (documented)"]
    parsed = parsed_services(project, profiles)
    white = parsed["white"].wrapped
    assert white is not None and white.options["kind"] in ("replay", "flaky")
    assert white.options["fault_rate"], "the documented offline agent injects faults"
    scenario = load_scenario(REPO / parsed["green"].wrapped.options["scenario"])  # type: ignore[union-attr]
    assert scenario.pass_k_config.calibration is True
    assert scenario.pass_k_config.user_simulator.kind == "scripted"


def test_default_white_agent_is_the_reference_llm_agent(projects: dict[str, Any]) -> None:
    for deployment in ("no .env", ".env.example"):
        project, profiles = projects[deployment]
        white = parsed_services(project, profiles)["white"].wrapped
        assert white is not None and white.options["kind"] == "llm", deployment
        assert project["services"]["white"]["environment"]["OPENAI_BASE_URL"], "an empty base URL breaks openai"


# -- bring your own white agent -------------------------------------------------------------------------------------


def test_byo_url_mode_registers_the_given_url_without_a_launcher(projects: dict[str, Any]) -> None:
    project, profiles = projects["byo url"]
    active = active_services(project, profiles)
    assert "white" not in active and "byo-white" not in active
    register = parsed_services(project, profiles)["register"].options
    assert register["white"] == "http://host.docker.internal:8080"
    assert register["white_launcher"] == ""
    for name in ("backend", "green", "register"):
        assert "host.docker.internal:host-gateway" in project["services"][name]["extra_hosts"], name


def test_byo_image_mode_runs_the_image_and_registers_it_by_service_name(projects: dict[str, Any]) -> None:
    project, profiles = projects["byo image"]
    active = active_services(project, profiles)
    assert "white" not in active and "byo-white" in active
    byo = active["byo-white"]
    assert byo["image"] == "ghcr.io/someone/agent:1" and "build" not in byo
    register = parsed_services(project, profiles)["register"].options
    assert register["white"] == byo["environment"]["AGENT_URL"] == "http://byo-white:9004"
    assert [int(p) for p in byo["expose"]] == [url_port(register["white"])]
    assert byo["environment"]["AGENT_PORT"] == byo["environment"]["PORT"] == "9004"


def test_reference_white_agent_can_still_be_asked_for_in_byo_mode(
    compose_raw: dict[str, Any], byo_raw: dict[str, Any]
) -> None:
    project = interpolate(merge_compose(compose_raw, byo_raw), {})
    assert "white" in active_services(project, {"reference-white"})


def test_readme_states_the_compose_version_the_files_need() -> None:
    """``depends_on: {required: false}`` (compose.byo-white.yml) exists since Compose v2.20; older Compose, e.g.
    Debian's docker-compose 1.29, rejects the files, so the README must say which version is needed."""
    uses_required = any("required:" in path.read_text(encoding="utf-8") for path in REPO.glob("*compose*.yml"))
    assert uses_required
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert re.search(r"Compose v2\.20 or newer", readme)
    assert re.search(r"docker-compose`? 1\.29", readme)


# -- PostgreSQL: the postgres profile -------------------------------------------------------------------------------


def option_value(argv: list[str], option: str) -> str:
    """The token after ``option`` in ``argv`` (exactly one occurrence): what Compose hands the program."""
    assert argv.count(option) == 1, f"{option} given {argv.count(option)} times in {argv}"
    return argv[argv.index(option) + 1]


def backend_db(project: dict[str, Any], profiles: set[str]) -> tuple[ParsedCommand, str]:
    """The backend's command as ``python -m battle_backend`` parsed it, and its --db argument as Compose passes it."""
    backend = parsed_services(project, profiles)["backend"].wrapped
    assert backend is not None and backend.program == "python -m battle_backend"
    return backend, option_value(backend.argv, "--db")


POSTGRES_DEPLOYMENTS = ("postgres (documented)", "byo image + postgres")
OFFICIAL_POSTGRES_IMAGE = r"postgres:(?P<major>\d+)(?:\.\d+)*(?:-alpine[\d.]*|-bookworm|-trixie)?"


def test_postgres_service_is_the_pinned_official_image_with_a_volume_a_health_check_and_no_host_port(
    projects: dict[str, Any],
) -> None:
    for deployment in POSTGRES_DEPLOYMENTS:
        project, profiles = projects[deployment]
        active = active_services(project, profiles)
        assert "postgres" in active, deployment
        postgres = active["postgres"]
        assert postgres["profiles"] == ["postgres"]
        # The official image (Docker Hub's library/postgres), pinned to one major version: a new major version cannot
        # read the old one's data directory (pg_dump and pg_restore, or pg_upgrade, move it).
        image = re.fullmatch(OFFICIAL_POSTGRES_IMAGE, postgres["image"])
        assert image, f"{deployment}: {postgres['image']!r} is not the official image pinned to a major version"
        assert "build" not in postgres and "command" not in postgres and "entrypoint" not in postgres
        assert postgres["restart"] == "unless-stopped"
        assert "ports" not in postgres, "the database is reached on the Compose network only"
        assert [int(port) for port in postgres["expose"]] == [5432]
        environment = postgres["environment"]
        assert environment["POSTGRES_USER"] == environment["POSTGRES_DB"] == "arena"
        assert environment["POSTGRES_PASSWORD"] == POSTGRES_TEST_PASSWORD
        # Its data on a named volume, at the image's PGDATA (/var/lib/postgresql/data up to major version 17; 18
        # moved it, so a bump of the pin has to move the volume too).
        assert int(image.group("major")) <= 17
        mounts = dict(volume.split(":")[:2] for volume in postgres["volumes"])
        assert mounts == {"postgres-data": "/var/lib/postgresql/data"}
        assert "postgres-data" in project["volumes"]
        # The health check: pg_isready (which the image ships) for the configured user and database, over TCP inside
        # its own container.
        check = parse_pg_isready(healthcheck_argv(postgres))
        assert check["username"] == environment["POSTGRES_USER"]
        assert check["dbname"] == environment["POSTGRES_DB"]
        assert check["host"] == "127.0.0.1" and check["port"] in (None, 5432)
        # Still only the backend's web page is published on the host.
        assert [name for name, service in active.items() if service.get("ports")] == ["backend"]


def test_postgres_profile_points_the_backend_at_the_database_with_a_url_without_password(
    projects: dict[str, Any],
) -> None:
    for deployment in POSTGRES_DEPLOYMENTS:
        project, profiles = projects[deployment]
        active = active_services(project, profiles)
        _, db = backend_db(project, profiles)  # the real parser accepted the command line
        url = urlsplit(db)
        assert url.scheme == "postgresql", f"{deployment}: --db {db}"
        assert url.password is None and ":" not in url.netloc.partition("@")[0], f"{deployment}: password in {db}"
        assert "password" not in url.query.lower()
        postgres = active["postgres"]
        assert url.hostname == "postgres" and url.port in [int(port) for port in postgres["expose"]]
        assert url.username == postgres["environment"]["POSTGRES_USER"]
        assert url.path == "/" + postgres["environment"]["POSTGRES_DB"]
        assert depends(active["backend"])["postgres"] == {"condition": "service_healthy", "required": False}


def test_the_backend_parser_reads_the_postgres_url_as_a_database_url(projects: dict[str, Any]) -> None:
    """Needs the backend's PostgreSQL command line (`--db` takes a SQLite path or a postgresql:// URL). A parser that
    reads --db as a Path turns ``postgresql://arena@postgres:5432/arena`` into ``postgresql:/arena@...``."""
    project, profiles = projects["postgres (documented)"]
    backend, db = backend_db(project, profiles)
    value = backend.options["db"]
    parsed, expected = urlsplit(str(value)), urlsplit(db)
    seen = (parsed.scheme, parsed.username, parsed.password, parsed.hostname, parsed.port, parsed.path)
    assert seen[0] in ("postgresql", "postgres"), f"--db {db} parsed as {value!r}"
    assert seen[1:] == (expected.username, None, expected.hostname, expected.port, expected.path), (
        f"--db {db} parsed as {value!r}: not the database URL"
    )
    # ... and main() turns it into the settings of a PostgreSQL store, not of a SQLite file named like the URL.
    assert backend.settings.db_url == db


def test_a_database_url_the_backend_does_not_support_is_rejected() -> None:
    argv = ["arena", "backend", "--port", "9000", "--db", "mysql://arena@db:3306/arena"]
    with pytest.raises(CommandRejected):
        parse_command(argv)


def test_the_database_password_reaches_the_backend_only_through_pgpassword(projects: dict[str, Any]) -> None:
    project, profiles = projects["postgres (documented)"]
    active = active_services(project, profiles)
    # In the whole substituted project the password is exactly two environment values: the image's and libpq's.
    assert [text for text in strings_of(project) if POSTGRES_TEST_PASSWORD in text] == [POSTGRES_TEST_PASSWORD] * 2
    assert active["postgres"]["environment"]["POSTGRES_PASSWORD"] == POSTGRES_TEST_PASSWORD
    assert active["backend"]["environment"]["PGPASSWORD"] == POSTGRES_TEST_PASSWORD
    # ... so never on a command line or in a health check, in any deployment.
    for deployment, (each, each_profiles) in projects.items():
        for name, service in active_services(each, each_profiles).items():
            argv = command_argv(service) if "command" in service else []
            argv += healthcheck_argv(service) if "healthcheck" in service else []
            assert not [token for token in argv if POSTGRES_TEST_PASSWORD in token], f"{deployment}/{name}"


def test_libpq_takes_the_password_from_pgpassword_as_the_url_has_none(
    projects: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What psycopg (libpq) makes of the documented URL and the backend's environment."""
    from psycopg import pq

    project, profiles = projects["postgres (documented)"]
    _, db = backend_db(project, profiles)
    given = {option.keyword.decode(): option.val for option in pq.Conninfo.parse(db.encode())}
    assert given["password"] is None
    assert (given["user"], given["host"], given["port"], given["dbname"]) == (b"arena", b"postgres", b"5432", b"arena")
    monkeypatch.setenv("PGPASSWORD", active_services(project, profiles)["backend"]["environment"]["PGPASSWORD"])
    defaults = {option.keyword.decode(): option for option in pq.Conninfo.get_defaults()}
    assert defaults["password"].envvar == b"PGPASSWORD"
    assert defaults["password"].val == POSTGRES_TEST_PASSWORD.encode()


def test_without_the_profile_the_backend_uses_sqlite_on_its_volume_and_postgres_stays_off(
    projects: dict[str, Any],
) -> None:
    without = [name for name, (_, profiles) in projects.items() if "postgres" not in profiles]
    assert len(without) >= 5
    for deployment in without:
        project, profiles = projects[deployment]
        active = active_services(project, profiles)
        assert "postgres" not in active, deployment
        backend, db = backend_db(project, profiles)
        assert db == SQLITE_DB and str(backend.options["db"]) == SQLITE_DB, deployment
        assert backend.settings.db_url is None and str(backend.settings.db_path) == SQLITE_DB, deployment
        assert f"backend-data:{SQLITE_DB.rsplit('/', 1)[0]}" in active["backend"]["volumes"]
        # The backend starts alone: its wait for the database is optional.
        assert depends(active["backend"])["postgres"]["required"] is False
        assert active["backend"]["environment"]["PGPASSWORD"] == ""


def test_env_example_and_the_docs_show_the_same_postgres_switch() -> None:
    env = documented_postgres_env()
    assert compose_profiles(env) == {"postgres"}
    assert read_env_file(ENV_EXAMPLE)["ARENA_BACKEND_DB"] == "", "SQLite stays the default"
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    for key in POSTGRES_KEYS:
        assert f"{key}={env[key]}" in doc, f"docs/deploy.md does not show {key}={env[key]}"
    assert "POSTGRES_PASSWORD=" in doc


PG_ISREADY = shutil.which("pg_isready")


@pytest.mark.skipif(PG_ISREADY is None, reason="PostgreSQL's client programs (pg_isready) are not installed")
def test_pg_isready_accepts_the_health_check_and_the_mirror_knows_its_options(compose_raw: dict[str, Any]) -> None:
    assert PG_ISREADY is not None
    shown = subprocess.run([PG_ISREADY, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert set(re.findall(r"--[a-z]+", shown)) - {"--help", "--version"} == set(PG_ISREADY_OPTIONS)
    argv = healthcheck_argv(compose_raw["services"]["postgres"])
    assert argv[0] == "pg_isready"
    # Exit codes: 0 accepting, 1 rejecting, 2 no response, 3 no attempt (e.g. bad options). Against a port nobody
    # listens on, the health check's own options give 2; an unknown option gives 3.
    env = {**os.environ, "PGPORT": str(free_ports(1)[0]), "PGCONNECT_TIMEOUT": "2"}
    run = subprocess.run([PG_ISREADY, *argv[1:]], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    bad = [PG_ISREADY, *argv[1:], "--no-such-option"]
    assert subprocess.run(bad, env=env, capture_output=True, timeout=30, check=False).returncode == 3
    with pytest.raises(CommandRejected):
        parse_pg_isready([*argv, "--no-such-option"])
