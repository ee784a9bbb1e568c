"""``python -m green_agent`` / ``arena-green``: serve the green agent (A2A + card + /health) with uvicorn."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import logging
import os
import socket
import sys
from pathlib import Path
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from green_agent.engine.config import ConfigError, load_battle_config
from green_agent.provider_limits import MAX_PROVIDER_CONCURRENCY
from green_agent.service.operator_auth import TOKEN_ENV, TokenError, resolve_operator_token

LOOP_ENV = "ARENA_LOOP"
"""Environment variable naming the event loop (``--loop`` wins): how tests and CI run a green agent on uvloop."""
LOOP_CHOICES = ("auto", "asyncio", "uvloop")


def select_loop(flag: str | None, env: str | None) -> str:
    """The event loop uvicorn serves on: ``--loop``, else ``$ARENA_LOOP``, else ``asyncio`` (uvicorn's own default,
    ``auto``, would pick uvloop whenever some other package installed it). ``uvloop`` must be importable.
    Raises ValueError naming the setting."""
    source, choice = ("--loop", flag) if flag is not None else (LOOP_ENV, env) if env else ("default", "asyncio")
    choice = choice.strip().lower()
    if choice not in LOOP_CHOICES:
        raise ValueError(f"{source}: must be one of {', '.join(LOOP_CHOICES)} (got {choice!r})")
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError(f"{source}: uvloop is not installed (pip install uvloop)")
    return choice


# Keep this module's imports light: every tool sandbox re-imports the main module (multiprocessing's rule), so the
# heavy parts (the server, the registry) are imported inside main().


def main(argv: list[str] | None = None) -> int:
    from green_agent.service.running_battles import ServiceLimits

    parser = argparse.ArgumentParser(prog="arena-green", description="Serve the Arena green agent over A2A.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9006)
    parser.add_argument("--card-url", default=None, help="public URL of this agent (default http://HOST:PORT)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs/<battle id>/ are written")
    parser.add_argument(
        "--scenario",
        type=Path,
        default=None,
        help="scenario TOML whose [pass_k_config] is the default for AgentBeats battles",
    )
    parser.add_argument("--scoring-workers", type=int, default=2, help="processes scoring attempts with tau2")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="attempt worker processes a battle may use, each with its own event loop (default: one per core, "
        "%(default)s here; a battle uses one per 16 attempts of its concurrency; 1: all in this process)",
    )
    parser.add_argument(
        "--mcp-allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT|:*]",
        help="extra Host header accepted by the MCP endpoints (repeatable; e.g. green:* in containers)",
    )
    parser.add_argument(
        "--judge-cache",
        type=Path,
        default=None,
        help="SQLite cache of LLM-judge verdicts (default ~/.cache/arena/judge-cache.sqlite)",
    )
    parser.add_argument("--no-judge-cache", action="store_true", help="never cache LLM-judge verdicts")
    parser.add_argument(
        "--offline-judge",
        action="store_true",
        help="score /run and CSV suites with the lexical judge even when a request names an LLM",
    )
    parser.add_argument(
        "--operator-token",
        default=None,
        help=f"secret for the control surface (default: ${TOKEN_ENV}, else generated and printed)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=ServiceLimits.max_attempts_per_battle,
        help="most attempts (tasks x k) one battle may ask for",
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=ServiceLimits.max_concurrency,
        help="most attempts in flight a remote battle config may ask for",
    )
    parser.add_argument(
        "--max-running-battles",
        type=int,
        default=ServiceLimits.max_running_battles,
        help="battles running at once; more wait in a queue (default %(default)s)",
    )
    parser.add_argument(
        "--max-attempts-in-flight",
        type=int,
        default=None,
        help="attempts in flight across all battles, each holding a sandbox process (default "
        f"{ServiceLimits.max_attempts_in_flight}, or the --scenario's concurrency when larger)",
    )
    parser.add_argument(
        "--provider-max-concurrency",
        type=int,
        default=None,
        help="LLM calls in flight per provider (base URL + model), lowered on 429: shared by every battle and "
        "evaluation of this green agent, worker processes included, and divided by the live members of its --pool "
        "(docs/design/providers.md) "
        f"(default {ServiceLimits.provider_max_concurrency}, or the --scenario's provider_max_concurrency when larger)",
    )
    parser.add_argument(
        "--max-queued-battles",
        type=int,
        default=ServiceLimits.max_queued_battles,
        help="battles waiting for a place; beyond, battle_start is refused as busy (default %(default)s)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=ServiceLimits.max_request_bytes,
        help="largest HTTP request body accepted (A2A, MCP, /run, evaluations)",
    )
    parser.add_argument(
        "--open-assessments",
        action="store_true",
        help="accept A2A assessment requests without the operator token (AgentBeats scenario "
        "runners); reading, cancelling and the other control endpoints still need it",
    )
    parser.add_argument(
        "--outbox-retention",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long an event a battle backend has not accepted yet is retried, counted from when it was reported "
        "(kept in runs/<battle id>/outbox.jsonl, replayed on the next start; default 3600)",
    )
    parser.add_argument(
        "--loop",
        default=None,
        choices=LOOP_CHOICES,
        help=f"event loop to serve on (default: ${LOOP_ENV}, else asyncio; auto is uvloop when it is installed)",
    )
    parser.add_argument("--log-level", default="warning")
    from green_agent.service.pool_flags import add_pool_flags, pool_settings_from

    add_pool_flags(parser)  # --pool NAME --pool-backend URL --pool-key-file PATH --pool-capacity N --pool-worker-id
    args = parser.parse_args(argv)

    try:
        loop = select_loop(args.loop, os.environ.get(LOOP_ENV))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    if not args.outbox_retention > 0:  # also refuses nan
        print("error: --outbox-retention: must be a positive number of seconds", file=sys.stderr)
        return 2
    for flag, value, least in (
        ("--max-running-battles", args.max_running_battles, 1),
        ("--max-attempts-in-flight", args.max_attempts_in_flight, 1),
        ("--max-queued-battles", args.max_queued_battles, 0),
        ("--workers", args.workers, 1),
        ("--scoring-workers", args.scoring_workers, 1),
        ("--provider-max-concurrency", args.provider_max_concurrency, 1),
    ):
        if value is not None and value < least:
            print(f"error: {flag}: must be at least {least}", file=sys.stderr)
            return 2
    if (args.provider_max_concurrency or 0) > MAX_PROVIDER_CONCURRENCY:
        print(f"error: --provider-max-concurrency: at most {MAX_PROVIDER_CONCURRENCY}", file=sys.stderr)
        return 2
    try:
        pool = pool_settings_from(args, os.environ)  # reads the pool key file once; the key is never printed
    except ValueError as error:  # names the flag
        print(f"error: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # tau2 environments allocate many small objects; fewer GC passes cut environment builds ~3x (see notes/tau2.md).
    gc.set_threshold(100_000, 50, 100)
    from green_agent.service.descriptors import raise_descriptor_limit

    raise_descriptor_limit()  # many attempts in flight hold many descriptors (battles that cannot fit are refused)
    try:
        default_config = load_battle_config(args.scenario) if args.scenario else None
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    try:
        token = resolve_operator_token(args.operator_token)
    except TokenError as error:
        print(f"error: --operator-token: {error}", file=sys.stderr)
        return 2
    if token.generated:
        # Printed once, as Jupyter does: the operator needs it; it is never logged.
        print(
            f"Arena green agent operator token (Authorization: Bearer <token>): {token.value}",
            file=sys.stderr,
            flush=True,
        )
    in_flight = args.max_attempts_in_flight
    if in_flight is None:  # the operator's own scenario may ask for more than the default
        in_flight = max(ServiceLimits.max_attempts_in_flight, default_config.concurrency if default_config else 0)
    limits = ServiceLimits(
        max_running_battles=args.max_running_battles,
        max_attempts_in_flight=in_flight,
        max_queued_battles=args.max_queued_battles,
        max_attempts_per_battle=args.max_attempts,
        max_concurrency=args.max_concurrency,
        max_request_bytes=args.max_request_bytes,
        open_assessments=args.open_assessments,
        workers=args.workers,
        scoring_workers=args.scoring_workers,
        provider_max_concurrency=args.provider_max_concurrency
        or max(
            ServiceLimits.provider_max_concurrency, (default_config and default_config.provider_max_concurrency) or 0
        ),
    )

    from green_agent.evaluations import EvaluationsComponent, EvaluationsSettings, JudgeSettings
    from green_agent.service.a2a_server import Component, create_app
    from green_agent.service.mcp import McpComponent

    card_url = args.card_url or f"http://{args.host}:{args.port}"
    judge = JudgeSettings(offline=args.offline_judge)
    if args.no_judge_cache:
        judge = dataclasses.replace(judge, cache_path=None)
    elif args.judge_cache is not None:
        judge = dataclasses.replace(judge, cache_path=args.judge_cache)
    components: list[Component] = [
        McpComponent(allowed_hosts=args.mcp_allowed_host, public_url=card_url),
        EvaluationsComponent(EvaluationsSettings(judge=judge)),
    ]
    if pool is not None:  # a member of a pool: leases its battles' attempts beside the A2A server
        from green_agent.service.pool_service import PoolComponent

        components.append(PoolComponent(pool))
    app = create_app(
        card_url,
        runs_dir=args.runs_dir,
        default_config=default_config,
        scoring_workers=args.scoring_workers,
        components=components,
        operator_token=token,
        limits=limits,
        outbox_retention_s=args.outbox_retention,
        pool=pool,
    )
    # SIGTERM must end the process within seconds even while battles stream: open streams get 1 s, then close.
    server = _GreenServer(
        app,
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=1,
            loop=loop,
        ),
    )
    server.run()
    return 0


class _GreenServer(uvicorn.Server):
    """uvicorn, plus: on SIGTERM / SIGINT, running battles are interrupted at once (before uvicorn's graceful
    shutdown), so attempts cut off by the stop are abandoned instead of scored: when ``arena run`` is stopped, the
    white agent goes down at the same moment, and its refused connections must not count as the agent's failures.
    The battles end ``interrupted`` with a partial summary; ``--resume`` continues them."""

    def __init__(self, app: Starlette, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._app = app

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, then one ready line with the URL on standard error (once it listens)."""
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            print(f"arena-green ready: http://{self.config.host}:{port}", file=sys.stderr, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        interrupt = getattr(self._app.state, "interrupt_battles", None)
        if callable(interrupt):
            interrupt()
        super().handle_exit(sig, frame)


if __name__ == "__main__":
    sys.exit(main())
