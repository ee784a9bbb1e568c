"""Event appends on PostgreSQL: per battle, one writer at a time on each replica, the events waiting meanwhile
committed together.

Why: every event of a battle takes its turn on the battle's row lock, whichever replica received it. Measured with
one transaction per event (benchmarks/bench_backend_scaleout.py, 20 posters into one battle): 690 events/s on one
replica and fewer on two, the lock holder mostly waiting for its client's next statement and a crowd of connections
waiting on the lock, with a p99 of 160-250 ms. So:

- an append is one call of the database function ``arena_append_event`` (revision v0002): the lock is held only
  while the database itself checks and writes;
- on each replica one task per battle writes that battle's events (the others wait in memory, not on the lock),
  taking every event that arrived while the previous transaction ran and committing them together: one commit, one
  fsync, one notice (PostgreSQL folds identical notices of one transaction into one) for the whole batch. This is
  the SQLite store's group commit, per battle.

Each caller is still answered only once the transaction holding its event committed, and its own refusal (unknown
battle, token, duplicate key, closed battle) is its own: the function returns refusals instead of raising, so they
never abort the batch. A failure of the transaction itself fails every event of it (WriteFailed, nothing stored,
safe to retry); an unexpected error of one event in a batch makes the batch run again one event per transaction,
so that it fails alone. Transactions are the store's own (``PostgresStore._write``: the same retries and the same
failure mapping as every other write).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from battle_backend.store.protocol import BattleClosed, BattleNotFound, DuplicateEvent, TokenRejected, WriteFailed
from battle_backend.store.records import BattleState, EventRecord
from battle_backend.store.rows import event_record

logger = logging.getLogger(__name__)

MAX_BATCH = 256
"""Events of one battle committed together at most (a bound on one transaction's size, not a pacing)."""
APPEND_SQL = "SELECT * FROM arena_append_event(%s, %s, %s, %s, %s, %s, %s)"

Conn = psycopg.AsyncConnection[dict[str, Any]]
Transact = Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]
"""The store's transaction runner (``PostgresStore._write``: retries deadlocks, turns a database failure into
WriteFailed with the psycopg error as its cause)."""


def token_digest(presented: str | None) -> bytes | None:
    """The SHA-256 of a presented token as the database function compares it (None: no token presented)."""
    if presented is None:
        return None
    return hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()


@dataclass(eq=False)
class PendingAppend:
    """One event waiting for its battle's writer."""

    battle_id: str
    payload: dict[str, Any]
    payload_text: str
    event_id: str | None
    token_sha256: bytes | None
    enforce_token: bool
    future: asyncio.Future[EventRecord]
    trusted: bool = False
    """Stored as verified without a token (an operator's import)."""
    alone: Callable[[], Awaitable[EventRecord]] | None = None
    """Set for an event that needs a transaction of its own (a result, which finishes the battle)."""

    def params(self, origin: str) -> tuple[Any, ...]:
        return (
            self.battle_id,
            self.payload_text,
            self.event_id,
            self.token_sha256,
            self.enforce_token,
            self.trusted,
            origin,
        )

    @property
    def verified(self) -> bool:
        """The event's key space: verified when posted with the token (checked by the database) or trusted."""
        return self.trusted or self.token_sha256 is not None


def outcome(item: PendingAppend, row: dict[str, Any]) -> EventRecord | BaseException:
    """The function's answer for one event, as the store's record or refusal."""
    kind = row["r_outcome"]
    if kind == "stored":
        return EventRecord(
            battle_id=item.battle_id,
            seq=row["r_seq"],
            payload=item.payload,
            received_at=row["r_received_at"],
            verified=item.verified,
        )
    if kind == "not_found":
        return BattleNotFound(item.battle_id)
    if kind == "token_wrong":
        return TokenRejected(item.battle_id, "the presented battle token is not this battle's")
    if kind == "token_missing":
        return TokenRejected(item.battle_id, "no battle token was presented")
    if kind == "duplicate":
        stored = {
            "seq": row["r_seq"],
            "payload": row["r_payload"],
            "received_at": row["r_received_at"],
            "verified": item.verified,
        }
        assert item.event_id is not None
        return DuplicateEvent(event_record(item.battle_id, stored), item.event_id)
    if kind == "closed":
        return BattleClosed(item.battle_id, BattleState(row["r_state"]))
    return WriteFailed(f"arena_append_event answered {kind!r}")


@dataclass
class _Queue:
    items: deque[PendingAppend] = field(default_factory=deque)
    writer: asyncio.Task[None] | None = None


class BattleAppends:
    """The per-battle writers of one store (one replica)."""

    def __init__(self, transact: Transact, origin: str) -> None:
        self._transact = transact
        self._origin = origin
        self._queues: dict[str, _Queue] = {}
        self.batches = 0
        """Transactions committed by the writers (``appended / batches`` is the batching factor)."""
        self.appended = 0

    async def submit(self, item: PendingAppend) -> EventRecord:
        """Queue ``item`` behind its battle's earlier events and wait until its transaction committed."""
        queue = self._queues.get(item.battle_id)
        if queue is None:
            queue = self._queues[item.battle_id] = _Queue()
        queue.items.append(item)
        if queue.writer is None or queue.writer.done():  # (a writer cancelled before its first step never ran)
            queue.writer = asyncio.create_task(self._write(item.battle_id, queue), name="arena-battle-appends")
        return await item.future

    async def aclose(self) -> None:
        """Let the writers finish what they hold (they end by themselves once their queue is empty)."""
        writers = [q.writer for q in self._queues.values() if q.writer is not None]
        await asyncio.gather(*writers, return_exceptions=True)

    async def _write(self, battle_id: str, queue: _Queue) -> None:
        try:
            while queue.items:
                first = queue.items.popleft()
                if first.alone is not None:
                    await self._settle_alone(first)
                    continue
                batch = [first]
                while queue.items and len(batch) < MAX_BATCH and queue.items[0].alone is None:
                    batch.append(queue.items.popleft())
                await self._settle(batch)
        finally:
            # no await between the last emptiness check and here: an item queued now finds no writer and starts one
            if self._queues.get(battle_id) is queue:
                del self._queues[battle_id]
            while queue.items:  # only when the writer itself was cancelled (the store is closing): answer the rest
                item = queue.items.popleft()
                if not item.future.done():
                    item.future.set_exception(WriteFailed("the store stopped before this event was written"))

    async def _settle_alone(self, item: PendingAppend) -> None:
        assert item.alone is not None
        try:
            result = await item.alone()
        except Exception as exc:
            if not item.future.done():
                item.future.set_exception(exc)
            return
        except BaseException as exc:  # the writer was cancelled (the store is closing): the caller was not
            if not item.future.done():
                item.future.set_exception(WriteFailed(f"the store stopped: {type(exc).__name__}"))
            raise
        if not item.future.done():
            item.future.set_result(result)

    async def _settle(self, batch: list[PendingAppend]) -> None:
        try:
            answers = await self._transact(lambda conn: self._call(conn, batch))
        except WriteFailed as exc:
            if len(batch) > 1 and not isinstance(exc.__cause__, psycopg.OperationalError):
                # one event made the database raise (not the connection, not the server): each alone, so that it
                # fails alone
                logger.warning("battle store: a batch of %d events failed (%s); retried one by one", len(batch), exc)
                for item in batch:
                    await self._settle([item])
                return
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(WriteFailed(str(exc)))
            return
        except BaseException as exc:  # cancelled (the store is closing): nobody must wait for ever
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(WriteFailed(f"the store stopped: {type(exc).__name__}"))
            raise
        self.batches += 1
        for item, answer in zip(batch, answers, strict=True):
            if isinstance(answer, EventRecord):
                self.appended += 1
            if item.future.done():
                continue
            if isinstance(answer, BaseException):
                item.future.set_exception(answer)
            else:
                item.future.set_result(answer)

    async def _call(self, conn: Conn, batch: list[PendingAppend]) -> list[EventRecord | BaseException]:
        """The batch's calls, pipelined inside the caller's transaction (one round trip for the calls, one for the
        commit)."""
        async with conn.pipeline():
            cursors = [await conn.execute(APPEND_SQL, item.params(self._origin)) for item in batch]
        rows = [await cursor.fetchone() for cursor in cursors]
        return [
            outcome(item, row) if row is not None else WriteFailed("no answer")
            for item, row in zip(batch, rows, strict=True)
        ]
