"""Fetching an agent's card at registration, and finding the A2A endpoint in it.

AgentBeats refuses a registration whose card cannot be fetched with 400 "Failed to get agent card from agent_url";
we keep that status (clients check for it) and say why in the detail. The card is as hostile as a request body (it
is stored and shown on the page), so it is read with a byte cap and parsed with the same bounds (`body_limits`).
"""

from __future__ import annotations

from typing import Any

import httpx

from battle_backend.battles.api_models import ApiError
from battle_backend.battles.json_limits import JsonLimits, parse_json

DEFAULT_MAX_CARD_BYTES = 1024 * 1024

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
"""The current path first, then the one a2a-sdk 0.2 agents still serve."""


class AgentCardError(Exception):
    """The card could not be fetched or is not a JSON object; the message says which URL and why."""


class _CardTooLarge(Exception):
    """The card's body went past the byte cap."""


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _CardTooLarge
    received = bytearray()
    async for chunk in response.aiter_bytes():
        received += chunk
        if len(received) > max_bytes:
            raise _CardTooLarge
    return bytes(received)


def _problem(error: ApiError) -> str:
    """A body_limits refusal as one line (``agent_card.skills.0: the string contains ...``)."""
    if isinstance(error.detail, list) and error.detail and isinstance(error.detail[0], dict):
        item = error.detail[0]
        return f"{'.'.join(str(p) for p in item.get('loc', []))}: {item.get('msg')}"
    return str(error.detail)


async def fetch_agent_card(
    client: httpx.AsyncClient,
    agent_url: str,
    *,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_CARD_BYTES,
    limits: JsonLimits | None = None,
) -> dict[str, Any]:
    """GET the card (trying both well-known paths); raise AgentCardError with every reason when both fail.

    A card larger than ``max_bytes`` or out of the JSON bounds (``limits``: nesting, numbers, lone surrogates) is
    refused like one that is not JSON."""
    limits = limits or JsonLimits()
    base = agent_url.rstrip("/")
    reasons: list[str] = []
    for path in CARD_PATHS:
        url = base + path
        try:
            async with client.stream("GET", url, timeout=timeout, follow_redirects=True) as response:
                if response.status_code != 200:
                    reasons.append(f"{url}: HTTP {response.status_code}")
                    continue
                raw = await _read_capped(response, max_bytes)
        except _CardTooLarge:
            reasons.append(f"{url}: the card is larger than {max_bytes} bytes")
            continue
        except httpx.HTTPError as exc:
            reasons.append(f"{url}: {type(exc).__name__}: {exc or 'no detail'}")
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                break  # the host is not there: the second path will not answer either
            continue
        try:
            card = parse_json(raw, limits, loc=("agent_card",))
        except ApiError as error:
            reasons.append(f"{url}: the answer is not an acceptable JSON card ({_problem(error)})")
            continue
        if not isinstance(card, dict):
            reasons.append(f"{url}: the card is not a JSON object")
            continue
        return card
    raise AgentCardError("Failed to get agent card from agent_url (" + "; ".join(reasons) + ")")


def a2a_endpoint(card: dict[str, Any], agent_url: str) -> str:
    """Where to send JSON-RPC: the card's 0.3 ``url`` when it is an http(s) URL, else a JSON-RPC interface of a
    1.0 card, else the registered agent_url (that is what AgentBeats' client ends up using too)."""
    url = card.get("url")
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return url
    for key in ("supported_interfaces", "supportedInterfaces", "additional_interfaces", "additionalInterfaces"):
        interfaces = card.get(key)
        if not isinstance(interfaces, list):
            continue
        for interface in interfaces:
            if not isinstance(interface, dict):
                continue
            binding = str(
                interface.get("protocol_binding")
                or interface.get("protocolBinding")
                or interface.get("transport")
                or ""
            )
            candidate = interface.get("url")
            if (
                binding.upper() == "JSONRPC"
                and isinstance(candidate, str)
                and candidate.startswith(("http://", "https://"))
            ):
                return candidate
    return agent_url
