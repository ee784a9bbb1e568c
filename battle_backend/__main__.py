"""``python -m battle_backend``: serve the backend with uvicorn.

python -m battle_backend --host 127.0.0.1 --port 9000 --db arena_backend.sqlite3
python -m battle_backend --db postgresql://arena@db.internal:5432/arena   # one of several replicas (PGPASSWORD)
python -m battle_backend --port 9100 --db /tmp/view.sqlite3 --import battle.json   # view a run offline
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from battle_backend.app import create_app
from battle_backend.battles.imports import ImportFileError, ImportReport, describe, import_files
from battle_backend.settings import DEFAULT_DB_PATH, BackendSettings
from battle_backend.store.factory import make_store, parse_db
from battle_backend.store.protocol import BattleStore

DB_ENV = "ARENA_BACKEND_DB"
"""The environment variable that gives ``--db`` its default (containers set it; a password stays in PGPASSWORD)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (the lead's `arena backend` can reuse the same options)."""
    parser = argparse.ArgumentParser(
        prog="python -m battle_backend",
        description="AgentBeats-compatible battle backend with a live web page (SQLite, no other service; or "
        "PostgreSQL, shared by several replicas).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9000, help="port (default 9000, as AgentBeats)")
    parser.add_argument(
        "--db",
        default=os.environ.get(DB_ENV) or str(DEFAULT_DB_PATH),
        help=f"a SQLite file (or sqlite:///PATH), or a PostgreSQL URL postgresql://USER@HOST:PORT/DBNAME that several "
        f"replicas may share (put the password in PGPASSWORD, not in the URL); default ${DB_ENV}, else "
        f"./{DEFAULT_DB_PATH}",
    )
    parser.add_argument(
        "--db-pool-size",
        type=int,
        default=10,
        help="PostgreSQL: connections this replica holds at most (default 10, plus one for LISTEN)",
    )
    parser.add_argument(
        "--db-wait",
        type=float,
        default=5.0,
        help="PostgreSQL: seconds a request waits for a database connection before it is answered 503 with "
        "Retry-After (default 5; 0.5 while the database is known to be down)",
    )
    parser.add_argument(
        "--replica-lease",
        type=float,
        default=15.0,
        help="PostgreSQL: seconds after which a replica that stopped renewing its lease has its running battles "
        "taken over by another (default 15)",
    )
    parser.add_argument(
        "--public-url",
        default=None,
        help="URL agents use to reach this backend (default: the URL the battle was created through)",
    )
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["normal", "full"],
        default="normal",
        help="fsync policy of the SQLite file: normal (default) keeps every accepted event through a crash of this "
        "process; full also through an OS crash or power cut (one fsync per group commit)",
    )
    parser.add_argument("--max-concurrent-battles", type=int, default=4, help="battles running at once (default 4)")
    parser.add_argument(
        "--ready-timeout", type=float, default=120.0, help="seconds to wait for agents to report ready (default 120)"
    )
    parser.add_argument(
        "--ready-poll-interval", type=float, default=5.0, help="fallback poll of the ready flags in seconds (default 5)"
    )
    parser.add_argument(
        "--battle-timeout-default",
        type=float,
        default=300.0,
        help="battle timeout when the green agent registered none (default 300)",
    )
    parser.add_argument(
        "--start-delay",
        type=float,
        default=0.0,
        help="seconds between battle_info and battle_start (AgentBeats: 5; default 0)",
    )
    parser.add_argument(
        "--green-ack-timeout",
        type=float,
        default=5.0,
        help="seconds before a silent green agent is logged as late (never errored)",
    )
    parser.add_argument(
        "--require-token",
        action="store_true",
        help="refuse battle events without the per-battle token, which only the green agent receives (off: "
        "AgentBeats agents send none; a wrong token is refused either way)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=1024 * 1024,
        help="byte cap of request bodies other than battle events (registration, battle creation, forms; "
        "default 1 MiB)",
    )
    parser.add_argument(
        "--max-event-bytes", type=int, default=256 * 1024, help="byte cap of one progress event (default 256 KiB)"
    )
    parser.add_argument(
        "--max-result-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="byte cap of one result event, which carries the whole battle (default 8 MiB)",
    )
    parser.add_argument(
        "--max-json-depth", type=int, default=64, help="deepest JSON nesting accepted in a body (default 64)"
    )
    parser.add_argument(
        "--mcp-allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="Host header value the MCP endpoints (/mcp/, /sse) accept besides loopback and the --public-url host, "
        "e.g. backend:9000 or backend:* (repeatable; DNS-rebinding protection stays on)",
    )
    parser.add_argument(
        "--import",
        dest="import_files",
        action="append",
        default=[],
        type=Path,
        metavar="FILE.json",
        help="load a battle from an arena.battle-import/1 file (e.g. written by `arena view RUN_DIR`) into --db "
        "before serving; never scheduled (repeatable; a battle already in the store is skipped)",
    )
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    return parser


async def import_into_store(settings: BackendSettings, paths: list[Path]) -> list[ImportReport]:
    """Open the store, import the files (all checked before any is written), close it again."""
    store = make_store(settings)
    await store.open()
    renewing = asyncio.create_task(_renew_lease(store, settings.replica_lease_s / 3)) if store.shared else None
    try:
        return await import_files(store, paths, settings)
    finally:
        if renewing is not None:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        await store.close()


async def _renew_lease(store: BattleStore, interval_s: float) -> None:
    """An import into a shared database owns the battle it writes: keep the lease while it runs, or a live replica
    would take the half-written battle over and fail it."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await store.heartbeat()
        except Exception:
            logging.getLogger(__name__).warning("import: renewing the lease failed", exc_info=True)


def settings_from_args(args: argparse.Namespace) -> BackendSettings:
    """Validated settings from parsed arguments."""
    db_path, db_url = parse_db(str(args.db))
    return BackendSettings(
        db_path=db_path or DEFAULT_DB_PATH,
        db_url=db_url,
        db_pool_size=args.db_pool_size,
        replica_lease_s=args.replica_lease,
        db_wait_s=args.db_wait,
        sqlite_synchronous=args.sqlite_synchronous.upper(),
        public_url=args.public_url,
        max_concurrent_battles=args.max_concurrent_battles,
        ready_timeout_s=args.ready_timeout,
        ready_poll_interval_s=args.ready_poll_interval,
        battle_timeout_default_s=args.battle_timeout_default,
        start_delay_s=args.start_delay,
        green_ack_timeout_s=args.green_ack_timeout,
        require_token=args.require_token,
        max_request_bytes=args.max_request_bytes,
        max_event_bytes=args.max_event_bytes,
        max_result_bytes=args.max_result_bytes,
        max_json_depth=args.max_json_depth,
        mcp_allowed_hosts=tuple(args.mcp_allowed_host),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, serve until interrupted, return the exit code."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    runs_home = None
    if args.import_files:
        try:
            reports = asyncio.run(import_into_store(settings, args.import_files))
        except ImportFileError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        for report in reports:
            print(describe(report), file=sys.stderr)
        runs_home = next((report.runs_home for report in reports if report.runs_home is not None), None)
    app = create_app(settings, runs_home=runs_home)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    _ReadyServer(config).run()
    return 0


class _ReadyServer(uvicorn.Server):
    """uvicorn, saying once it listens: ``arena backend ready: URL`` (the battle pages are at /ui/)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up, then one ready line with the URL on standard error (once it listens)."""
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            url = f"http://{self.config.host}:{port}"
            print(f"arena backend ready: {url} (battle pages: {url}/ui/battles)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
