"""Errors of the white agents, kept apart so every module can import them (no imports of their own)."""

from __future__ import annotations


class WhiteAgentConfigError(ValueError):
    """A white-agent configuration problem; the message names the offending option and what is allowed."""


class TurnAbandoned(Exception):
    """A turn the agent gives up without replying: a deliberately hanging turn (flaky ``no_reply``) woken because the
    server is stopping. It must never look like a reply: the A2A side answers it with a JSON-RPC error."""
