"""Fetching an agent's card at registration, and finding the A2A endpoint in it.

AgentBeats refuses a registration whose card cannot be fetched with 400 "Failed to get agent card from agent_url";
we keep that status (clients check for it) and say why in the detail.
"""

from __future__ import annotations

from typing import Any

import httpx

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
"""The current path first, then the one a2a-sdk 0.2 agents still serve."""


class AgentCardError(Exception):
    """The card could not be fetched or is not a JSON object; the message says which URL and why."""


async def fetch_agent_card(client: httpx.AsyncClient, agent_url: str, *, timeout: float) -> dict[str, Any]:
    """GET the card (trying both well-known paths); raise AgentCardError with every reason when both fail."""
    base = agent_url.rstrip("/")
    reasons: list[str] = []
    for path in CARD_PATHS:
        url = base + path
        try:
            response = await client.get(url, timeout=timeout, follow_redirects=True)
        except httpx.HTTPError as exc:
            reasons.append(f"{url}: {type(exc).__name__}: {exc or 'no detail'}")
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                break  # the host is not there: the second path will not answer either
            continue
        if response.status_code != 200:
            reasons.append(f"{url}: HTTP {response.status_code}")
            continue
        try:
            card = response.json()
        except ValueError:
            reasons.append(f"{url}: the answer is not JSON")
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
