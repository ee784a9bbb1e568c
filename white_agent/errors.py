"""Errors of the white agents, kept apart so every module can import them (no imports of their own).

The whole tree of the package's exceptions (the ones one module alone raises and catches stay beside it); checked
against the code by tests/architecture/test_exception_trees.py. Each line: the class, then its module under
``white_agent``; the roots are the outside bases.

Exception tree::

    Exception
        _NotJson (proto_values)
        TurnAbandoned (errors)
    LookupError
        GoldTaskNotFound (gold)
    RuntimeError
        ContextsFull (errors)
        InjectedCrash (flaky)
        McpToolsError (errors)
    ValueError
        WhiteAgentConfigError (errors)
"""

from __future__ import annotations


class WhiteAgentConfigError(ValueError):
    """A white-agent configuration problem; the message names the offending option and what is allowed."""


class ContextsFull(RuntimeError):
    """A new conversation arrived while the agent holds as many live ones as it may: refused, never evicting a live
    one (white_agent/contexts.py). Answered with a JSON-RPC error naming the bound."""


class McpToolsError(RuntimeError):
    """The attempt's MCP endpoint could not be reached or refused us (the agent reports it as its own failure)."""


class TurnAbandoned(Exception):
    """A turn the agent gives up without replying: a deliberately hanging turn (flaky ``no_reply``) woken because the
    server is stopping. It must never look like a reply: the A2A side answers it with a JSON-RPC error."""
