"""``arena register``: tell an AgentBeats-compatible backend about a green agent and its white opponent, once.

Why a command of its own: docker compose (and the AgentBeats platform scenario) start the agents behind their
launchers, but nobody registers them with the backend, so the web page has nothing to pit against each other. This
is the one-shot step that does it, the way the platform's own scenario loader does: ``POST /agents`` for the white
agent and for the green agent (which requires one participant, named ``white_agent`` by default).

What it guarantees:
- it waits (bounded by ``--wait``) until the backend's ``GET /health`` answers and every agent card and launcher
  answers, because the backend refuses a registration whose card it cannot fetch (HTTP 400) and containers start in
  any order;
- it is idempotent: an agent already registered with the same alias, URLs, role and (green) requirements and
  battle timeout is reused, so restarting the stack (the backend's SQLite file lives on a volume) or re-running the
  command does not pile up duplicates; a changed setting registers a new agent, since the API cannot edit one;
- it prints one JSON object on stdout: both agent ids and a ready-to-send ``POST /battles`` body.

Exit codes: 0 registered (or found), 1 the backend or an agent did not answer in time or the backend refused,
2 configuration error (a bad URL or number, named).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import typer
from tenacity import AsyncRetrying, retry_if_exception_type, wait_fixed

from green_agent.engine.config import ConfigError
from launcher.errors import NotYet
from launcher.ports import is_loopback_url

logger = logging.getLogger(__name__)

AGENT_CARD_PATH = "/.well-known/agent-card.json"
DEFAULT_PARTICIPANT = "white_agent"
"""The participant name our green agent's battles use for the white agent (``arena run --backend`` uses it too)."""
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG_ERROR = 2


class RegistrationError(RuntimeError):
    """Something did not answer in time, or the backend refused a call; the message names the call and the answer."""


@dataclass(frozen=True)
class AgentSpec:
    """One ``POST /agents`` body, and how to recognise an existing registration of it."""

    alias: str
    agent_url: str
    launcher_url: str
    is_green: bool
    participant_requirements: tuple[tuple[str, str, bool], ...] = ()
    """(role, name, required) per opponent slot; green agents only."""
    battle_timeout_s: float | None = None

    def body(self) -> dict[str, Any]:
        """The registration body (AgentBeats' field names; no ``task_config``: AgentBeats would ask an LLM)."""
        body: dict[str, Any] = {
            "alias": self.alias,
            "agent_url": self.agent_url,
            "launcher_url": self.launcher_url,
            "is_green": self.is_green,
        }
        if self.is_green:
            body["participant_requirements"] = [
                {"role": role, "name": name, "required": required}
                for role, name, required in self.participant_requirements
            ]
        if self.battle_timeout_s is not None:
            body["battle_timeout"] = math.ceil(self.battle_timeout_s)  # whole seconds, as AgentBeats declares it
        return body

    def matches(self, record: dict[str, Any]) -> bool:
        """True when ``record`` (a ``GET /agents`` entry) is a registration of exactly this agent."""
        info = record.get("register_info")
        if not isinstance(info, dict):
            return False
        if (
            info.get("alias") != self.alias
            or _norm_url(info.get("agent_url")) != self.agent_url
            or _norm_url(info.get("launcher_url")) != self.launcher_url
            or bool(info.get("is_green")) != self.is_green
        ):
            return False
        if not self.is_green:
            return True
        requirements = info.get("participant_requirements") or []
        found = {
            (str(r.get("role")), str(r.get("name")), bool(r.get("required")))
            for r in requirements
            if isinstance(r, dict)
        }
        if found != set(self.participant_requirements):
            return False
        timeout = info.get("battle_timeout")
        if self.battle_timeout_s is None:
            return timeout is None
        return isinstance(timeout, (int, float)) and math.isclose(float(timeout), self.battle_timeout_s)


@dataclass
class RegisterOptions:
    """Everything ``arena register`` was asked to do (URLs as the backend will use them)."""

    backend_url: str
    green_url: str
    white_url: str
    green_launcher_url: str = ""
    white_launcher_url: str = ""
    green_alias: str = "arena-green"
    white_alias: str = "arena-white"
    participant_name: str = DEFAULT_PARTICIPANT
    battle_timeout_s: float | None = 3600.0
    wait_s: float = 180.0
    poll_interval_s: float = 1.0
    request_timeout_s: float = 15.0

    def validated(self) -> RegisterOptions:
        """URLs normalised (no trailing slash); :class:`ConfigError` naming the option otherwise."""
        checks = {
            "--backend": self.backend_url,
            "--green": self.green_url,
            "--white": self.white_url,
        }
        optional = {"--green-launcher": self.green_launcher_url, "--white-launcher": self.white_launcher_url}
        for option, value in {**checks, **{k: v for k, v in optional.items() if v.strip()}}.items():
            parts = urlsplit(value.strip())
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(f"{option}: expected an http(s) URL, got {value!r}")
        for option, alias in (("--green-alias", self.green_alias), ("--white-alias", self.white_alias)):
            if not alias.strip():
                raise ConfigError(f"{option}: must not be empty")
        if not self.participant_name.strip():
            raise ConfigError("--participant-name: must not be empty")
        if self.battle_timeout_s is not None and not self.battle_timeout_s > 0:
            raise ConfigError(f"--battle-timeout: must be > 0 seconds (got {self.battle_timeout_s:g})")
        if not self.wait_s >= 0:
            raise ConfigError(f"--wait: must be >= 0 seconds (got {self.wait_s:g})")
        return RegisterOptions(
            backend_url=_norm_url(self.backend_url),
            green_url=_norm_url(self.green_url),
            white_url=_norm_url(self.white_url),
            green_launcher_url=_norm_url(self.green_launcher_url),
            white_launcher_url=_norm_url(self.white_launcher_url),
            green_alias=self.green_alias.strip(),
            white_alias=self.white_alias.strip(),
            participant_name=self.participant_name.strip(),
            battle_timeout_s=None if self.battle_timeout_s is None else float(math.ceil(self.battle_timeout_s)),
            wait_s=self.wait_s,
            poll_interval_s=self.poll_interval_s,
            request_timeout_s=self.request_timeout_s,
        )

    def specs(self) -> tuple[AgentSpec, AgentSpec]:
        """(white, green) registrations."""
        white = AgentSpec(self.white_alias, self.white_url, self.white_launcher_url, is_green=False)
        green = AgentSpec(
            self.green_alias,
            self.green_url,
            self.green_launcher_url,
            is_green=True,
            participant_requirements=(("blue_agent", self.participant_name, True),),
            battle_timeout_s=self.battle_timeout_s,
        )
        return white, green


@dataclass
class Registration:
    """The outcome: both agent ids, and whether each was created now or found."""

    backend_url: str
    green_id: str
    white_id: str
    participant_name: str
    created: dict[str, bool] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """What the command prints: ids plus a ``POST /battles`` body that pits the two against each other."""
        return {
            "backend_url": self.backend_url,
            "green_agent": {"agent_id": self.green_id, "created": self.created.get("green_agent", False)},
            "white_agent": {"agent_id": self.white_id, "created": self.created.get("white_agent", False)},
            "battle_request": {
                "green_agent_id": self.green_id,
                "opponents": [{"name": self.participant_name, "agent_id": self.white_id}],
            },
        }


def _norm_url(value: Any) -> str:
    return str(value or "").strip().rstrip("/")


async def _answers_200(client: httpx.AsyncClient, url: str) -> None:
    """Return when ``url`` answers 200; :class:`NotYet` otherwise."""
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise NotYet(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__) from error
    if response.status_code != 200:
        raise NotYet(f"HTTP {response.status_code}")


async def _wait_for(client: httpx.AsyncClient, url: str, what: str, deadline: float, interval_s: float) -> None:
    """Poll ``url`` until it answers 200 or the deadline passes (then :class:`RegistrationError` naming ``what``)."""
    loop = asyncio.get_running_loop()
    retrying = AsyncRetrying(
        retry=retry_if_exception_type(NotYet),
        stop=lambda _state: loop.time() >= deadline,
        wait=wait_fixed(interval_s),
        reraise=True,
    )
    try:
        await retrying(_answers_200, client, url)
    except NotYet as last:
        raise RegistrationError(f"{what} at {url} did not answer in time ({last})") from None


async def wait_until_reachable(client: httpx.AsyncClient, options: RegisterOptions) -> None:
    """The backend's /health, both agent cards and the launchers' /status, all within ``options.wait_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.wait_s
    interval = options.poll_interval_s
    targets = [
        (options.backend_url + "/health", "the backend"),
        (options.green_url + AGENT_CARD_PATH, "the green agent's card"),
        (options.white_url + AGENT_CARD_PATH, "the white agent's card"),
    ]
    if options.green_launcher_url:
        targets.append((options.green_launcher_url + "/status", "the green agent's launcher"))
    if options.white_launcher_url:
        targets.append((options.white_launcher_url + "/status", "the white agent's launcher"))
    await asyncio.gather(*(_wait_for(client, url, what, deadline, interval) for url, what in targets))


async def list_agents(client: httpx.AsyncClient, backend_url: str) -> list[dict[str, Any]]:
    """``GET /agents``: the registered agents (AgentBeats and our backend answer the same record shape)."""
    url = backend_url + "/agents"
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise RegistrationError(f"GET {url}: the backend did not answer ({type(error).__name__}: {error})") from error
    if response.status_code != 200:
        raise RegistrationError(f"GET {url} answered HTTP {response.status_code}: {response.text[:500]}")
    try:
        listed = response.json()
    except ValueError as error:
        raise RegistrationError(f"GET {url} answered something that is not JSON: {response.text[:200]}") from error
    if not isinstance(listed, list):
        raise RegistrationError(f"GET {url} answered {str(listed)[:200]} instead of a list of agents")
    return [record for record in listed if isinstance(record, dict)]


async def register_agent(client: httpx.AsyncClient, backend_url: str, body: dict[str, Any]) -> str:
    """``POST /agents``; the new agent's id."""
    url = backend_url + "/agents"
    try:
        response = await client.post(url, json=body)
    except httpx.HTTPError as error:
        raise RegistrationError(f"POST {url}: the backend did not answer ({type(error).__name__}: {error})") from error
    if response.status_code not in (200, 201):
        raise RegistrationError(
            f"POST {url} ({body.get('alias')}) answered HTTP {response.status_code}: {response.text[:500]}"
        )
    try:
        record = response.json()
    except ValueError:
        record = None
    agent_id = record.get("agent_id") if isinstance(record, dict) else None
    if not isinstance(agent_id, str) or not agent_id:
        raise RegistrationError(f"POST {url} answered without an agent_id: {response.text[:300]}")
    return agent_id


async def _ensure(
    client: httpx.AsyncClient,
    backend_url: str,
    existing: list[dict[str, Any]],
    spec: AgentSpec,
    log: Callable[[str], None],
) -> tuple[str, bool]:
    """The id of ``spec``'s registration: the oldest matching one, or a new one."""
    matches = sorted((r for r in existing if spec.matches(r)), key=lambda r: str(r.get("created_at") or ""))
    for record in matches:
        agent_id = record.get("agent_id")
        if isinstance(agent_id, str) and agent_id:
            log(f"{spec.alias}: already registered as {agent_id}")
            return agent_id, False
    agent_id = await register_agent(client, backend_url, spec.body())
    log(f"{spec.alias}: registered as {agent_id}")
    return agent_id, True


async def register_agents(
    options: RegisterOptions,
    *,
    log: Callable[[str], None] = logger.info,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Registration:
    """Wait for everything to answer, then register (or find) the white and the green agent.

    Raises :class:`ConfigError` for bad options, :class:`RegistrationError` when something does not answer in time or
    the
    backend refuses a call (the message names the call and the answer).
    """
    options = options.validated()
    white, green = options.specs()
    timeout = httpx.Timeout(options.request_timeout_s)
    # Loopback calls never go through a proxy from the environment; service names and remote backends may need one.
    loopback = all(is_loopback_url(url) for url in (options.backend_url, options.green_url, options.white_url))
    async with httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=not loopback) as client:
        log(f"waiting for the backend at {options.backend_url} and the agents")
        await wait_until_reachable(client, options)
        existing = await list_agents(client, options.backend_url)
        white_id, white_created = await _ensure(client, options.backend_url, existing, white, log)
        green_id, green_created = await _ensure(client, options.backend_url, existing, green, log)
    return Registration(
        backend_url=options.backend_url,
        green_id=green_id,
        white_id=white_id,
        participant_name=options.participant_name,
        created={"green_agent": green_created, "white_agent": white_created},
    )


def register_command(
    backend: Annotated[
        str, typer.Option("--backend", help="URL of the AgentBeats-compatible backend", show_default=False)
    ],
    green: Annotated[str, typer.Option("--green", help="the green agent's URL (its --card-url)", show_default=False)],
    white: Annotated[str, typer.Option("--white", help="the white agent's URL (its --card-url)", show_default=False)],
    green_launcher: Annotated[
        str,
        typer.Option(
            "--green-launcher", help="the green agent's launcher URL (empty: none; the backend then cannot reset it)"
        ),
    ] = "",
    white_launcher: Annotated[
        str,
        typer.Option(
            "--white-launcher", help="the white agent's launcher URL (empty: none, e.g. an agent you run yourself)"
        ),
    ] = "",
    green_alias: Annotated[
        str, typer.Option("--green-alias", help="the green agent's name on the backend")
    ] = "arena-green",
    white_alias: Annotated[
        str, typer.Option("--white-alias", help="the white agent's name on the backend")
    ] = "arena-white",
    participant_name: Annotated[
        str, typer.Option("--participant-name", help="the name of the green agent's opponent slot")
    ] = DEFAULT_PARTICIPANT,
    battle_timeout: Annotated[
        float, typer.Option("--battle-timeout", help="seconds a battle may run before the backend calls it a draw")
    ] = 3600.0,
    wait: Annotated[
        float,
        typer.Option("--wait", help="seconds to wait for the backend, the agent cards and the launchers to answer"),
    ] = 180.0,
    log_level: Annotated[str, typer.Option("--log-level", help="log level (messages go to stderr)")] = "info",
) -> None:
    """Register a green agent and its white opponent with a backend, idempotently; print both ids as JSON.

    Example: arena register --backend http://127.0.0.1:9000 --green http://127.0.0.1:9006
    --green-launcher http://127.0.0.1:9111 --white http://127.0.0.1:9004 --white-launcher http://127.0.0.1:9210
    """
    logging.basicConfig(level=log_level.upper(), format="%(message)s", stream=sys.stderr, force=True)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # one line per poll otherwise
    options = RegisterOptions(
        backend_url=backend,
        green_url=green,
        white_url=white,
        green_launcher_url=green_launcher,
        white_launcher_url=white_launcher,
        green_alias=green_alias,
        white_alias=white_alias,
        participant_name=participant_name,
        battle_timeout_s=battle_timeout,
        wait_s=wait,
    )
    try:
        registration = asyncio.run(register_agents(options))
    except ConfigError as error:
        typer.echo(f"configuration error: {error}", err=True)
        raise typer.Exit(EXIT_CONFIG_ERROR) from None
    except RegistrationError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    typer.echo(json.dumps(registration.as_json()))
