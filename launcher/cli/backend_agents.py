"""``arena run --backend URL`` reuses the agents it registered before instead of registering a new pair every run.

Why: every registration stays in the backend (its battle records and pages refer to it), so a new pair per run
filled an AgentBeats backend's agent list with copies and split one agent's rating over them. An agent is looked up
by what it was registered with (``GET /agents``, ``register_info``): the same alias (stable: the green agent's, or
the white agent's kind plus a hash of its scenario table, so two different reference agents never share one), the
same agent and launcher URLs, the same battle timeout and participants. The agents ``arena run`` starts get the
ports of their earlier registration when those are free on loopback, so their URLs match; otherwise, or when the
lookup fails (it is best-effort: a backend that cannot list its agents still gets its registration), a new agent is
registered. A ``local`` backend is new for every run: nothing to reuse there.

Two runs against one backend at the same time must not pick the same earlier ports (the second agent could not bind
them): a run reuses only while it holds this machine's lock for that backend (:func:`reuse_lock`, an advisory file
lock in the temporary directory); a run that finds it held registers agents of its own, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from launcher.cli.backend_api import BackendApi, BackendError
from launcher.cli.scenario import WhiteAgentConfig
from launcher.ports import port_is_free

logger = logging.getLogger(__name__)

GREEN_ALIAS = "arena-green"


def white_alias(white: WhiteAgentConfig) -> str:
    """``arena-<kind>-white-<hash of the [white_agent] table>``: one registration per distinct agent under test."""
    table = json.dumps(white.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return f"arena-{white.kind}-white-{hashlib.sha256(table.encode()).hexdigest()[:8]}"


async def registered_agents(api: BackendApi) -> list[dict[str, Any]]:
    """The backend's agents, or none when it cannot list them (then everything is registered anew)."""
    try:
        return await api.agents()
    except BackendError as error:
        logger.info("cannot list the backend's agents (%s): registering new ones", error)
        return []


def _info(agent: Mapping[str, Any]) -> Mapping[str, Any]:
    info = agent.get("register_info")
    return info if isinstance(info, Mapping) else {}


def _port(url: object) -> int | None:
    if not isinstance(url, str) or not url:
        return None
    try:
        return httpx.URL(url).port
    except (httpx.InvalidURL, ValueError):
        return None


def earlier_ports(agents: Sequence[Mapping[str, Any]], alias: str, taken: Sequence[int]) -> tuple[int, int] | None:
    """(agent port, launcher port) of the newest registration of ``alias`` on loopback, when both are free now and
    not among ``taken``. Blocking (binds two sockets): call it in a worker thread."""
    for agent in reversed(agents):
        info = _info(agent)
        if info.get("alias") != alias:
            continue
        ports = (_port(info.get("agent_url")), _port(info.get("launcher_url")))
        urls = (str(info.get("agent_url")), str(info.get("launcher_url")))
        if not all(url.startswith("http://127.0.0.1:") for url in urls):
            continue
        agent_port, launcher_port = ports
        if agent_port is None or launcher_port is None or agent_port == launcher_port:
            continue
        if agent_port in taken or launcher_port in taken:
            continue
        if port_is_free(agent_port) and port_is_free(launcher_port):
            return agent_port, launcher_port
    return None


def same_registration(agent: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether ``agent`` was registered with ``body`` (every field of it; numbers compare as numbers)."""
    info = _info(agent)
    return all(key in info and info[key] == value for key, value in body.items())


async def register_or_reuse(api: BackendApi, agents: Sequence[Mapping[str, Any]], body: dict[str, Any]) -> str:
    """The id of the agent registered with ``body``: an earlier one, else a new registration."""
    for agent in reversed(agents):
        agent_id = agent.get("agent_id")
        if isinstance(agent_id, str) and agent_id and same_registration(agent, body):
            return agent_id
    return await api.register(body)


@contextlib.contextmanager
def reuse_lock(backend_url: str) -> Iterator[bool]:
    """Whether this run may reuse registrations on ``backend_url``: True while it holds the machine's lock for that
    backend (held until the block ends), False when another run holds it or the lock file cannot be opened."""
    digest = hashlib.sha256(backend_url.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"arena-{os.getuid()}-backend-{digest}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        logger.info("no reuse of registrations: cannot open %s (%s)", path, error)
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another arena run on this machine uses this backend now
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock
