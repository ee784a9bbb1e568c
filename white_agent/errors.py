"""Errors the white agents raise at startup (bad configuration), kept apart so every module can import them."""

from __future__ import annotations


class WhiteAgentConfigError(ValueError):
    """A white-agent configuration problem; the message names the offending option and what is allowed."""
