"""Command line: ``python -m white_agent --kind replay|flaky|llm --host 127.0.0.1 --port 9004`` (console: arena-white).

Options: ``--card-url`` (the URL the card announces, default ``http://HOST:PORT/``), ``--seed`` and
``--fault-rate NAME=RATE ...`` (flaky), ``--model --base-url --api-key-env --temperature`` (llm),
``--max-tool-calls-per-turn`` (llm, tool mode "mcp"), ``--max-contexts`` (all), ``--log-level`` (default warning:
quiet). Exit code 2 on a configuration error. In tool mode "mcp" every agent finds its MCP endpoint in the first
message; nothing needs configuring.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Callable, Sequence

import uvicorn

from white_agent.app import AGENT_KINDS, create_white_agent_app, make_agent
from white_agent.contexts import DEFAULT_IDLE_S, DEFAULT_MAX_CONTEXTS
from white_agent.errors import TurnAbandoned, WhiteAgentConfigError
from white_agent.flaky import CRASH_MARKER, FAULTS, FlakyAgent, InjectedCrash

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
GRACEFUL_SHUTDOWN_S = 1
"""How long turns still running at shutdown may take before uvicorn cancels them (an LLM call, say). Deliberately
hanging turns (flaky ``no_reply``) do not wait for it: they are abandoned as shutdown begins (:class:`PromptServer`)."""


class _HideInjectedCrash(logging.Filter):
    """Drops the SDK's error logs about the flaky agent's deliberate crash and abandoned hangs (expected, not news)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], InjectedCrash | TurnAbandoned):
            return False
        try:
            return CRASH_MARKER not in record.getMessage()
        except (TypeError, ValueError):  # a malformed record is not our business
            return True


def configure_logging(level: str) -> None:
    """Root logging at ``level`` on stderr, with the injected-crash filter on the handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_HideInjectedCrash())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class PromptServer(uvicorn.Server):
    """uvicorn's server, calling ``before_shutdown`` as its shutdown begins (on SIGTERM/SIGINT).

    Why: uvicorn lets running requests finish (up to :data:`GRACEFUL_SHUTDOWN_S`) before the app hears of the
    shutdown, so a turn that hangs on purpose would hold the exit for that long. ``before_shutdown`` (the flaky
    agent's :meth:`~white_agent.flaky.FlakyAgent.abandon_hanging_turns`) wakes such turns first; each then fails
    with a JSON-RPC error instead of replying, and the server exits at once.
    """

    def __init__(self, config: uvicorn.Config, *, before_shutdown: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self._before_shutdown = before_shutdown

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, then one ready line with the URL on standard error (once it listens)."""
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            print(f"arena-white ready: http://{self.config.host}:{port}", file=sys.stderr, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Abandon the deliberately hanging turns, then uvicorn's graceful shutdown."""
        if self._before_shutdown is not None:
            self._before_shutdown()
        await super().shutdown(sockets=sockets)


def _parse_fault_rates(items: Sequence[str]) -> dict[str, float]:
    rates: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise WhiteAgentConfigError(f"--fault-rate: expected NAME=RATE, got {item!r}")
        try:
            rates[name.strip()] = float(value)
        except ValueError:
            raise WhiteAgentConfigError(f"--fault-rate {name}: rate must be a number (got {value!r})") from None
    return rates


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and the launcher's help)."""
    parser = argparse.ArgumentParser(prog="arena-white", description="Run a reference white agent (A2A server).")
    parser.add_argument("--kind", choices=AGENT_KINDS, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9004)
    parser.add_argument("--card-url", default=None, help="URL announced in the agent card (default http://HOST:PORT/)")
    parser.add_argument("--seed", type=int, default=0, help="flaky: seed of the fault draw")
    parser.add_argument(
        "--fault-rate",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=RATE",
        help=f"flaky: probability per attempt of a fault ({', '.join(FAULTS)}); rates must sum to <= 1",
    )
    parser.add_argument("--model", default="gpt-4.1-mini", help="llm: model name")
    parser.add_argument("--base-url", default=None, help="llm: OpenAI-compatible base URL")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="llm: environment variable holding the key")
    parser.add_argument("--temperature", type=float, default=0.0, help="llm: sampling temperature")
    parser.add_argument(
        "--max-tool-calls-per-turn",
        type=int,
        default=40,
        help="llm, tool mode mcp: tool calls allowed before the agent must answer the user",
    )
    parser.add_argument(
        "--max-contexts",
        type=int,
        default=DEFAULT_MAX_CONTEXTS,
        help="live conversations held at most; a new one beyond is refused (default %(default)s)",
    )
    parser.add_argument(
        "--context-idle-s",
        type=float,
        default=DEFAULT_IDLE_S,
        help="a conversation unused this long may be forgotten to make room (default %(default)s)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="warning")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m white_agent`` and ``arena-white``; returns the exit code."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    card_host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    card_url = args.card_url or f"http://{card_host}:{args.port}/"
    try:
        llm = None
        if args.kind in ("llm", "finance-llm"):
            from white_agent.llm import LlmAgentSettings  # lazy: the OpenAI client costs ~0.8 s of start-up

            llm = LlmAgentSettings(
                model=args.model,
                base_url=args.base_url,
                api_key_env=args.api_key_env,
                temperature=args.temperature,
                max_contexts=args.max_contexts,
                context_idle_s=args.context_idle_s,
                max_tool_calls_per_turn=args.max_tool_calls_per_turn,
            )
        agent = make_agent(
            args.kind,
            seed=args.seed,
            fault_rates=_parse_fault_rates(args.fault_rate),
            llm=llm,
            max_contexts=args.max_contexts,
            context_idle_s=args.context_idle_s,
        )
    except (WhiteAgentConfigError, ValueError) as error:
        print(f"arena-white: configuration error: {error}", file=sys.stderr)
        return 2
    app = create_white_agent_app(agent, card_url)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.log_level in ("info", "debug"),
        lifespan="on",
        ws="none",  # no websocket routes: spares importing a websocket implementation at start-up
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        log_config=None,
    )
    abandon = agent.abandon_hanging_turns if isinstance(agent, FlakyAgent) else None
    PromptServer(config, before_shutdown=abandon).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
