"""Group commit for the SQLite store: one writer thread commits the writes that arrive together in one transaction.

Why: SQLite allows one writer at a time, and a commit has a fixed cost (taking the write lock, appending the changed
pages to the WAL, the checkpoint those pages lead to) that dwarfs inserting one small event row. With 20 agents
posting into one battle, one transaction per event spends most of its time committing. Here every write is a
*unit* (a function of the connection); the writer thread takes every unit waiting in its queue (up to
:data:`MAX_BATCH`), runs them in arrival order inside one ``BEGIN IMMEDIATE`` transaction, each inside its own
``SAVEPOINT``, commits once, and only then answers each caller. So:

- durability per write is unchanged: no caller hears "done" before the transaction holding its write committed;
- a unit that raises (a refused event: duplicate key, closed battle, wrong token; or any error) is rolled back to its
  savepoint and fails alone: the units before and after it in the batch are unaffected;
- when the transaction itself fails (BEGIN, COMMIT, or an error that made SQLite abandon the transaction), every unit
  of the batch fails with that error and nothing of the batch is stored, so no caller is told "done" for a write
  that is not there;
- order is arrival order: units run (and see each other's writes) in the order they were queued, so a battle's
  sequence numbers follow commit order.

Batching needs no timer: while one batch commits, the next one gathers in the queue, so a lone write is committed
at once and a burst is committed in few transactions. Callers wait on an asyncio future, answered from the writer
thread with one ``call_soon_threadsafe`` per batch (not per write).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from battle_backend.store.protocol import WriteFailed

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BATCH = 256
"""At most this many units per transaction, so one huge burst does not make its first callers wait for the last."""


class WriterClosed(RuntimeError):
    """The store was closed: no more writes are taken."""


@dataclass
class _Unit:
    """One caller's write: ``fn`` runs on the writer thread; the outcome goes to ``future`` on ``loop``."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    transactional: bool = True
    """False: ``fn`` manages its own transactions (schema migration) and runs alone, outside any batch."""


_STOP = object()
Outcome = tuple[_Unit, bool, Any]
"""(unit, succeeded, result or exception)."""


class GroupCommitWriter:
    """The store's single writing thread and its queue; ``connect`` opens the thread's one connection."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, name: str = "arena-db-writer") -> None:
        self._connect = connect
        self._name = name
        self._queue: queue.SimpleQueue[_Unit | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.batches = 0
        """Transactions committed or attempted (for tests and benchmarks: units / batches = the batching)."""
        self.units = 0

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the next group transaction; returns its result once that transaction committed."""
        return await self._submit(fn, transactional=True)

    async def run_alone(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the writer thread outside any transaction (it opens its own), between two batches."""
        return await self._submit(fn, transactional=False)

    async def _submit(self, fn: Callable[[sqlite3.Connection], T], *, transactional: bool) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise WriterClosed("the battle store is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(_Unit(fn, future, loop, transactional))
        # The write goes on even if this caller is cancelled (as a request whose client went away): it was asked for.
        return await future

    def close(self) -> None:
        """Blocking: commit what is queued, then stop the thread (call it from a worker thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None:
            thread.join()

    # --- the writer thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                return
            assert isinstance(first, _Unit)
            batch = [first]
            while len(batch) < MAX_BATCH and batch[-1].transactional:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                assert isinstance(item, _Unit)
                batch.append(item)
            try:
                if conn is None:
                    conn = self._connect()
                self._run_units(conn, batch)
            except Exception as exc:  # cannot open the file, or a bug here: fail the callers rather than hang them
                logger.exception("battle store: the writer failed")
                self._deliver([(unit, False, WriteFailed(str(exc))) for unit in batch])

    def _run_units(self, conn: sqlite3.Connection, batch: list[_Unit]) -> None:
        """The transactional units in one group transaction; a unit that manages its own transaction (it can only
        come last, see _run) alone after them."""
        alone = batch.pop() if not batch[-1].transactional else None
        if batch:
            self._run_batch(conn, batch)
        if alone is not None:
            self._deliver([self._run_alone(conn, alone)])

    @staticmethod
    def _run_alone(conn: sqlite3.Connection, unit: _Unit) -> Outcome:
        try:
            return unit, True, unit.fn(conn)
        except Exception as exc:
            return unit, False, exc

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Unit]) -> None:
        self.batches += 1
        self.units += len(batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            logger.error("battle store: could not begin a transaction: %s", exc)
            self._deliver([(unit, False, WriteFailed(str(exc))) for unit in batch])
            return
        outcomes: list[Outcome] = []
        try:
            for unit in batch:
                outcomes.append(self._run_unit(conn, unit))
            self.commit(conn)
        except Exception as exc:
            # The transaction as a whole failed: nothing of it is stored, so nobody may hear "done".
            logger.error("battle store: a transaction of %d writes failed, none stored: %s", len(batch), exc)
            self._rollback(conn)
            self._deliver([(unit, False, WriteFailed(str(exc))) for unit in batch])
            return
        self._deliver(outcomes)

    @staticmethod
    def _run_unit(conn: sqlite3.Connection, unit: _Unit) -> Outcome:
        """One unit inside its savepoint; its own failure is rolled back and returned, a broken transaction raised."""
        conn.execute("SAVEPOINT unit")
        try:
            result = unit.fn(conn)
        except Exception as exc:
            if not conn.in_transaction:  # SQLite abandoned the whole transaction (e.g. disk full, I/O error)
                raise
            conn.execute("ROLLBACK TO unit")
            conn.execute("RELEASE unit")
            return unit, False, exc
        conn.execute("RELEASE unit")
        return unit, True, result

    def commit(self, conn: sqlite3.Connection) -> None:
        """COMMIT the batch's transaction (a seam of its own so that tests can make it fail)."""
        conn.execute("COMMIT")

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as exc:  # the connection is unusable; the next BEGIN will say so
                logger.error("battle store: rollback failed: %s", exc)

    @staticmethod
    def _deliver(outcomes: list[Outcome]) -> None:
        """Answer the callers: one callback per event loop for the whole batch."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for outcome in outcomes:
            by_loop.setdefault(outcome[0].loop, []).append(outcome)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                logger.debug("battle store: %d answers for a closed event loop dropped", len(items))


def _settle(outcomes: list[Outcome]) -> None:
    """On the callers' loop: resolve each future (a cancelled caller's is left alone)."""
    for unit, succeeded, value in outcomes:
        if unit.future.done():
            continue
        if succeeded:
            unit.future.set_result(value)
        else:
            unit.future.set_exception(value)
