"""LISTEN/NOTIFY between backend replicas: each replica hears the changes the others commit.

Why: a browser connected to replica A must see an event posted to replica B within a second, and A's scheduler must
learn that a battle B finished freed its agents. Every write transaction of the PostgreSQL store sends
``pg_notify('arena_changes', payload)``; PostgreSQL delivers it to every listening session when, and only when, the
transaction commits, in commit order. The payload is small JSON: origin replica, kind, key, new state.

This module owns one dedicated connection per replica (a pooled connection cannot LISTEN: it is handed to others
between queries). A replica ignores its own notices (it already published the change locally when the write
returned). When the connection drops, notices sent meanwhile are lost: the listener reconnects with backoff and then
emits a ``resync`` notice, on which every live view re-reads the store (nothing is lost there: events carry their
sequence numbers and the store is the source of truth) and the scheduler looks at the queue again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from battle_backend.store.protocol import NoticeHandler, StoreNotice

logger = logging.getLogger(__name__)

CHANNEL = "arena_changes"
"""The NOTIFY channel of every replica of one database."""
ATTEMPTS_CHANNEL = "arena_attempts"
"""Publishes and requeues of the attempt queue (payload: the pool's name), for idle lease waiters."""
RECONNECT_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between reconnection attempts (the last one repeats)."""
KINDS = frozenset({"battle", "agent_ready"})


def notice_payload(origin: str, kind: str, key: str, state: str | None) -> str:
    """The NOTIFY payload (well under PostgreSQL's 8000-byte limit: ids are short)."""
    return json.dumps({"o": origin, "k": kind, "id": key, "s": state}, separators=(",", ":"))


def parse_payload(payload: str) -> tuple[str, StoreNotice] | None:
    """(origin, notice) from a payload, or None for anything that is not one of ours (another program may NOTIFY
    on the same channel name: it must not crash the listener)."""
    try:
        data: Any = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    origin, kind, key, state = data.get("o"), data.get("k"), data.get("id"), data.get("s")
    if not isinstance(origin, str) or not isinstance(kind, str) or kind not in KINDS or not isinstance(key, str):
        return None
    if state is not None and not isinstance(state, str):
        return None
    return origin, StoreNotice(kind="battle" if kind == "battle" else "agent_ready", key=key, state=state)


class NoticeListener:
    """One replica's LISTEN connection, reconnecting, delivering other replicas' notices to ``handler``."""

    def __init__(self, conninfo: str, replica_id: str) -> None:
        self._conninfo = conninfo
        self._replica_id = replica_id
        self.handler: NoticeHandler | None = None
        self.attempt_handler: Callable[[str | None], None] | None = None
        """Called with a pool's name on ``arena_attempts`` (None after a lost connection: every pool)."""
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._listening = asyncio.Event()
        self.received = 0
        """Notices from other replicas delivered so far."""
        self.reconnects = 0

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up right now."""
        return self._listening.is_set()

    async def start(self) -> None:
        """Start listening; returns once the first LISTEN is in place (or raises if it cannot be)."""
        conn = await self._connect()
        self._task = asyncio.create_task(self._run(conn), name="arena-notice-listener")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # it died of something unforeseen: already logged, nothing to stop any more
                logger.warning("battle store: the LISTEN task had failed", exc_info=True)
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
            self._conn = None
        self._listening.clear()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
            await conn.execute(f"LISTEN {ATTEMPTS_CHANNEL}")
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
            raise
        self._conn = conn
        self._listening.set()
        return conn

    def _deliver(self, notice: StoreNotice) -> None:
        handler = self.handler
        if handler is None:
            return
        try:
            handler(notice)
        except Exception:
            logger.exception("battle store: a notice handler failed on %s", notice)

    def _wake(self, pool: str | None) -> None:
        handler = self.attempt_handler
        if handler is not None:
            try:
                handler(pool)
            except Exception:
                logger.exception("battle store: an attempt wake-up failed")

    async def _run(self, conn: psycopg.AsyncConnection[Any]) -> None:
        attempt = 0
        while True:
            try:
                async for notify in conn.notifies():
                    if notify.channel == ATTEMPTS_CHANNEL:
                        self._wake(notify.payload)
                        continue
                    try:  # anyone who can connect can NOTIFY on this channel: nothing it sends may stop us
                        parsed = parse_payload(notify.payload)
                    except Exception:
                        logger.warning("battle store: a notice could not be read; ignored", exc_info=True)
                        continue
                    if parsed is None or parsed[0] == self._replica_id:
                        continue
                    self.received += 1
                    self._deliver(parsed[1])
                raise psycopg.OperationalError("the notification stream ended")
            except psycopg.Error as exc:
                self._listening.clear()
                logger.warning("battle store: LISTEN connection lost (%s); reconnecting", exc)
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
            while True:
                await asyncio.sleep(RECONNECT_DELAYS_S[min(attempt, len(RECONNECT_DELAYS_S) - 1)])
                attempt += 1
                try:
                    conn = await self._connect()
                except psycopg.Error as exc:
                    logger.warning("battle store: LISTEN reconnect failed (%s)", exc)
                    continue
                attempt = 0
                self.reconnects += 1
                logger.info("battle store: LISTEN connection back; views re-read the store")
                self._deliver(StoreNotice(kind="resync", key=""))
                self._wake(None)
                break
