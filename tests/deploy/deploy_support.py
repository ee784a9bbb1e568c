"""Helpers for the deployment tests: read the Compose files the way Compose does (variable substitution, override
merging, string commands split like a shell), and check every command against the real command-line parsers.

Why by hand: no Docker engine runs here, so correctness comes from construction. Each container command is parsed
by the very parser its program uses (typer/click for ``arena``, argparse for ``arena-green`` / ``arena-white`` /
``python -m battle_backend``), recursively for the agent command a launcher wraps, and the same commands are then
run on loopback with host names and ports remapped.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import typer.main
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
BYO_FILE = REPO / "compose.byo-white.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ENV_EXAMPLE = REPO / ".env.example"
AGENTBEATS_SCENARIOS = REPO / "scenarios" / "agentbeats"
PLATFORM_SCENARIO = AGENTBEATS_SCENARIOS / "platform" / "scenario.toml"
ASSESSMENT_SCENARIOS = sorted(AGENTBEATS_SCENARIOS.glob("assessment_*.toml"))

CONVENTION_PORTS = {"backend": 9000, "white": 9004, "green": 9006, "green_launcher": 9111, "white_launcher": 9210}
"""The AgentBeats port conventions (shared notes: agentbeats.md)."""
AGENT_CARD_PATH = "/.well-known/agent-card.json"
CONSOLE_SCRIPTS = {
    "arena": "launcher.cli.app:app",
    "arena-green": "green_agent.service.main:main",
    "arena-white": "white_agent.__main__:main",
}

# -- YAML and variable substitution ---------------------------------------------------------------------------------


def load_yaml(path: Path) -> dict[str, Any]:
    """A Compose file as data (YAML 1.1 merge keys ``<<`` and anchors resolved, as Compose does)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a .env file (comments and blank lines skipped; values taken verbatim)."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = stripped.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), f"{path}:{number}: not KEY=VALUE: {line!r}"
        values[name] = value
    return values


_VARIABLE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-|:\?|\?|:\+|\+)(?P<arg>.*))?", re.DOTALL)


class MissingVariable(ValueError):
    """A ``${VAR:?message}`` / ``${VAR?message}`` whose variable is not set (Compose refuses to start)."""


def variable_references(text: str) -> list[tuple[str, str | None, str | None]]:
    """Every ``(name, operator, argument)`` substituted in ``text`` (``$$`` is an escaped dollar, not a reference)."""
    found: list[tuple[str, str | None, str | None]] = []
    for match in _VARIABLE.finditer(text):
        if match.group("escaped"):
            continue
        if match.group("named"):
            found.append((match.group("named"), None, None))
            continue
        braced = _BRACED.fullmatch(match.group("braced") or "")
        assert braced, f"unsupported substitution ${{{match.group('braced')}}} in {text!r}"
        found.append((braced.group("name"), braced.group("op"), braced.group("arg")))
    return found


def substitute(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution of one string (the forms Compose documents; no nesting)."""

    def replace(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        if match.group("named"):
            return env.get(match.group("named"), "")
        braced = _BRACED.fullmatch(match.group("braced") or "")
        assert braced, f"unsupported substitution ${{{match.group('braced')}}}"
        name, op, arg = braced.group("name"), braced.group("op"), braced.group("arg") or ""
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return value if value is not None else arg
        if op == ":?":
            if not value:
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op == "?":
            if value is None:
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op == ":+":
            return arg if value else ""
        if op == "+":
            return arg if value is not None else ""
        return value or ""

    return _VARIABLE.sub(replace, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """Substitute variables in every string of a Compose document (keys included, as Compose does)."""
    if isinstance(node, str):
        return substitute(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {
            interpolate(key, env) if isinstance(key, str) else key: interpolate(value, env)
            for key, value in node.items()
        }
    return node


def strings_of(node: Any) -> Iterator[str]:
    """Every string in a document (keys and values)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from strings_of(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield key
            yield from strings_of(value)


_REPLACED_SEQUENCES = frozenset({"command", "entrypoint", "test", "profiles"})
"""Sequences an override replaces (Compose's merge rules); the other sequences we use are appended, de-duplicated."""


def merge_compose(base: dict[str, Any], override: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
    """``docker compose -f base -f override``: mappings merged recursively, commands replaced, lists appended."""
    merged = dict(base)
    for name, value in override.items():
        current = merged.get(name)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[name] = merge_compose(current, value, key=name)
        elif isinstance(current, list) and isinstance(value, list) and name not in _REPLACED_SEQUENCES:
            merged[name] = current + [item for item in value if item not in current]
        else:
            merged[name] = value
    return merged


def compose_profiles(env: Mapping[str, str], flags: list[str] | tuple[str, ...] = ()) -> set[str]:
    """The profiles Compose activates: the ``--profile`` options when any is given, else ``COMPOSE_PROFILES`` from the
    environment or .env (comma-separated). Compose v2 ignores ``COMPOSE_PROFILES`` as soon as one ``--profile`` is on
    the command line: the two are not merged."""
    if flags:
        return set(flags)
    return {name.strip() for name in env.get("COMPOSE_PROFILES", "").split(",") if name.strip()}


def active_services(project: dict[str, Any], profiles: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The services ``docker compose up`` starts with ``profiles`` active (no profile = always; ``*`` = every profile).

    Note that Compose substitutes variables in the whole file first, inactive services included: a ``${VAR:?}`` in a
    service that no active profile starts still stops Compose (hence the defaults everywhere)."""
    return {
        name: service
        for name, service in project["services"].items()
        if not service.get("profiles") or "*" in profiles or set(service["profiles"]) & set(profiles)
    }


def command_argv(service: Mapping[str, Any]) -> list[str]:
    """A service's command as argv: a list as is; a string split like a shell (Compose does the same)."""
    command = service.get("command")
    if isinstance(command, str):
        return shlex.split(command)
    assert isinstance(command, list), f"command must be a list or a string, got {command!r}"
    return [str(item) for item in command]


def healthcheck_argv(service: Mapping[str, Any]) -> list[str]:
    """The health check's program and arguments (``CMD`` form only: the slim image has no shell tools to rely on)."""
    test = service["healthcheck"]["test"]
    assert isinstance(test, list) and test and test[0] == "CMD", f"health checks use the CMD form, got {test!r}"
    return [str(item) for item in test[1:]]


# -- the command lines, checked by the programs' own parsers --------------------------------------------------------


@dataclass
class ParsedCommand:
    """A command line as its program parsed it: the options (by destination name) and the command it wraps."""

    program: str
    subcommand: str | None
    options: dict[str, Any]
    argv: list[str]
    wrapped: ParsedCommand | None = None
    extra: list[str] = field(default_factory=list)
    settings: Any = None
    """``python -m battle_backend`` only: the BackendSettings its main() validates the options into before serving."""

    def url_option(self, name: str) -> str:
        value = self.options[name]
        assert isinstance(value, str), f"{self.program} {self.subcommand or ''}: {name} is {value!r}"
        return value


class CommandRejected(AssertionError):
    """The program's parser refused the command line (unknown option, bad value, missing argument)."""


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = namespace


def _argparse_of(main: Any, args: list[str], label: str) -> dict[str, Any]:
    """Run ``main(args)`` only up to its ``parse_args``; the parsed namespace, or CommandRejected with its error."""
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, argv: Any = None, namespace: Any = None) -> argparse.Namespace:
        raise _Parsed(original(self, argv, namespace))

    stderr = io.StringIO()
    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), contextlib.redirect_stderr(stderr):
        try:
            main(args)
        except _Parsed as parsed:
            return vars(parsed.namespace)
        except SystemExit as error:
            raise CommandRejected(
                f"{label} {shlex.join(args)}: {stderr.getvalue().strip()} (exit {error.code})"
            ) from None
    raise AssertionError(f"{label}: main() returned without parsing its arguments")


def _parse_arena(args: list[str]) -> ParsedCommand:
    from launcher import cli

    group = typer.main.get_command(cli.app)
    assert args, "arena needs a command"
    name, rest = args[0], args[1:]
    commands = getattr(group, "commands", {})
    if name not in commands:
        raise CommandRejected(f"arena has no command {name!r} (commands: {', '.join(sorted(commands))})")
    command = commands[name]
    try:
        ctx = command.make_context(name, list(rest))
    except typer.TyperException as error:  # the (vendored) click UsageError family: the real parser refused
        raise CommandRejected(f"arena {name} {shlex.join(rest)}: {error}") from None
    parsed = ParsedCommand("arena", name, dict(ctx.params), ["arena", *args], extra=list(ctx.args))
    if name == "launcher":
        parsed.wrapped = parse_command(list(ctx.params["command"]))
    elif name in ("backend", "green", "white"):
        module = {"backend": "battle_backend", "green": "green_agent", "white": "white_agent"}[name]
        parsed.wrapped = _parse_module(module, list(ctx.args))
    return parsed


def _parse_module(module: str, args: list[str]) -> ParsedCommand:
    if module == "battle_backend":
        from battle_backend.__main__ import main as backend_main
        from battle_backend.__main__ import settings_from_args

        options = _argparse_of(backend_main, args, "battle_backend")
        try:  # the step main() runs next: a ValueError there is a parser error too
            settings = settings_from_args(argparse.Namespace(**options))
        except ValueError as error:
            raise CommandRejected(f"battle_backend {shlex.join(args)}: {error}") from None
        argv = ["python", "-m", module, *args]
        return ParsedCommand("python -m battle_backend", None, options, argv, settings=settings)
    if module == "green_agent":
        from green_agent.service.main import main as green_main

        return ParsedCommand("arena-green", None, _argparse_of(green_main, args, "arena-green"), ["arena-green", *args])
    if module == "white_agent":
        from white_agent.__main__ import main as white_main

        return ParsedCommand("arena-white", None, _argparse_of(white_main, args, "arena-white"), ["arena-white", *args])
    raise CommandRejected(f"unknown module {module}")


def parse_command(argv: list[str]) -> ParsedCommand:
    """Parse ``argv`` with the parser of the program it names (a console script of this project)."""
    assert argv, "empty command"
    program, args = argv[0], list(argv[1:])
    if program == "arena":
        return _parse_arena(args)
    if program == "arena-green":
        return _parse_module("green_agent", args)
    if program == "arena-white":
        return _parse_module("white_agent", args)
    if program in ("python", "python3") and args[:1] == ["-m"] and len(args) >= 2:
        return _parse_module(args[1], args[2:])
    raise CommandRejected(f"{program!r} is not one of this project's console scripts ({', '.join(CONSOLE_SCRIPTS)})")


def _pg_isready_parser() -> argparse.ArgumentParser:
    """PostgreSQL's ``pg_isready`` options (its ``--help``; a test compares the two where the program is installed).
    The postgres image ships the program; our image does not, so only the postgres service may use it."""
    parser = argparse.ArgumentParser(prog="pg_isready", add_help=False, exit_on_error=False)
    parser.add_argument("-d", "--dbname")
    parser.add_argument("-h", "--host")
    parser.add_argument("-p", "--port", type=int)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-t", "--timeout", type=int)
    parser.add_argument("-U", "--username")
    return parser


PG_ISREADY_OPTIONS = ("--dbname", "--host", "--port", "--quiet", "--timeout", "--username")
"""The long options the mirror above knows (checked against the real program's --help where it is installed)."""


def parse_pg_isready(argv: list[str]) -> dict[str, Any]:
    """A ``pg_isready ...`` command line parsed by the options PostgreSQL documents; CommandRejected otherwise."""
    if not argv or argv[0] != "pg_isready":
        raise CommandRejected(f"not a pg_isready command: {argv!r}")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace, extra = _pg_isready_parser().parse_known_args(argv[1:])
    except (argparse.ArgumentError, SystemExit) as error:
        raise CommandRejected(f"pg_isready {shlex.join(argv[1:])}: {error} {stderr.getvalue().strip()}") from None
    if extra:
        raise CommandRejected(f"pg_isready {shlex.join(argv[1:])}: unrecognized arguments {extra}")
    return vars(namespace)


def project_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(data["project"]["scripts"])


# -- running the containers' commands on loopback -------------------------------------------------------------------


_URL = re.compile(r"^(?P<scheme>https?)://(?P<host>[^/:]+):(?P<port>\d+)(?P<rest>.*)$")


@dataclass
class Loopback:
    """How a container's world maps onto this machine: service names -> 127.0.0.1, container ports -> free ports,
    container paths (``/app/...``) -> a temporary directory."""

    hosts: frozenset[str]
    ports: dict[int, int]
    app_dir: Path

    def value(self, token: str, previous: str | None = None) -> str:
        match = _URL.match(token)
        if match and match.group("host") in self.hosts | {"127.0.0.1", "localhost", "0.0.0.0"}:
            port = self.ports.get(int(match.group("port")), int(match.group("port")))
            return f"{match.group('scheme')}://127.0.0.1:{port}{match.group('rest')}"
        if token == "0.0.0.0":
            return "127.0.0.1"  # tests bind loopback only
        if previous == "--port" and token.isdigit() and int(token) in self.ports:
            return str(self.ports[int(token)])
        if token == "/app" or token.startswith("/app/"):
            return str(self.app_dir) + token[len("/app") :]
        return token

    def argv(self, argv: list[str]) -> list[str]:
        """The same command line with hosts, ports and container paths mapped."""
        out: list[str] = []
        previous: str | None = None
        for token in argv:
            out.append(self.value(token, previous))
            previous = token
        return out


def dockerfile_runtime_env(dockerfile: Path = DOCKERFILE) -> dict[str, str]:
    """``ENV`` settings of the Dockerfile's last stage (``KEY=VALUE`` form, continuation lines joined)."""
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    stages = re.split(r"(?m)^FROM\s", text)
    env: dict[str, str] = {}
    for line in stages[-1].splitlines():
        if line.startswith("ENV "):
            for item in shlex.split(line[4:]):
                name, _, value = item.partition("=")
                env[name] = value
    return env
