"""How talking to the white agent can fail: the white client's classified errors.

The attempt loop blames the white agent for exactly these (green_agent/engine/attribution.py maps each to a failure
category); anything else the client raises is a harness bug. They live apart from the client so the rules and the
tests can name them without the A2A machinery.
"""

from __future__ import annotations

from typing import Literal

CommunicationKind = Literal["card", "connect", "network", "http_status", "jsonrpc", "invalid_response", "unexpected"]


class WhiteAgentError(Exception):
    """Base class: talking to the white agent failed in one of the ways below."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class WhiteAgentTimeout(WhiteAgentError):
    """No complete reply within the turn time limit (``failure: timeout``, detail says per-turn limit)."""

    def __init__(self, detail: str, *, timeout_s: float) -> None:
        super().__init__(detail)
        self.timeout_s = timeout_s


class WhiteAgentCommunicationError(WhiteAgentError):
    """We could not exchange a well-formed A2A request/reply (``failure: communication_error``).

    ``kind``: ``card`` (agent card unreachable or invalid), ``connect`` (connection refused / host unreachable),
    ``network`` (connection reset or closed mid-request), ``http_status`` (non-2xx answer), ``jsonrpc`` (a JSON-RPC
    error object, e.g. -32603 when the agent's executor raised), ``invalid_response`` (not a valid A2A reply),
    ``unexpected`` (anything else the SDK raised).
    """

    def __init__(
        self,
        detail: str,
        *,
        kind: CommunicationKind,
        status_code: int | None = None,
        jsonrpc_code: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.status_code = status_code
        self.jsonrpc_code = jsonrpc_code


class WhiteAgentReplyTooLarge(WhiteAgentError):
    """The reply body exceeded the byte cap (``failure: format_error``); reading stopped at the cap."""

    def __init__(self, detail: str, *, max_bytes: int, head: bytes = b"") -> None:
        super().__init__(detail)
        self.max_bytes = max_bytes
        self.head = head
        """The first bytes of the HTTP body read before the cap (a body refused for its Content-Length: what arrived
        of it within ``capped_transport.HEAD_READ_S``)."""


class WhiteAgentReportedFailure(WhiteAgentError):
    """The agent answered with a Task it put in a failure state (``failure: white_agent_error``)."""

    def __init__(self, detail: str, *, task_state: str, text: str, task_id: str | None) -> None:
        super().__init__(detail)
        self.task_state = task_state
        self.text = text
        self.task_id = task_id
