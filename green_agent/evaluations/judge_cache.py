"""A persistent cache of judge verdicts in SQLite, keyed by (model, prompt hash, inputs).

Why: LLM judging is the slow and paid part of an evaluation, and re-running a suite after changing one row should
only judge that row. Only *scored* verdicts are cached (an UNSCORED failure must be retried next time). The key
covers the endpoint and model, the prompt's version hash and the canonical JSON of the inputs, so a changed prompt or
a different model never reuses an old verdict.

Why a dedicated thread: sqlite3 calls block; all of them run on one worker thread owned by the cache (one connection,
created in that thread), so the event loop never waits on disk and the connection is never shared across threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    answer TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(model_id: str, prompt_hash: str, inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of (model id, prompt hash, inputs)."""
    material = json.dumps(
        [model_id, prompt_hash, inputs], sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":")
    )
    # surrogatepass: a lone surrogate in the inputs (cleaned where requests enter, but keys must never raise)
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


class JudgeCache:
    """Async facade over one SQLite file (use as ``async with JudgeCache(path) as cache``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-cache")
        self._conn: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0
        self.writes = 0

    async def __aenter__(self) -> Self:
        await self._run(self._open)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.commit()
            self._conn = conn
        return self._conn

    def _get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        conn = self._open()
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, answer in conn.execute(f"SELECT key, answer FROM verdicts WHERE key IN ({marks})", chunk):
                try:
                    found[key] = json.loads(answer)
                except ValueError:  # a corrupt row is a miss, and will be overwritten
                    continue
        return found

    def _put_many(self, rows: Sequence[tuple[str, str, str, dict[str, Any]]]) -> None:
        conn = self._open()
        now = time.time()
        conn.executemany(
            "INSERT OR REPLACE INTO verdicts (key, model, prompt_hash, answer, created) VALUES (?, ?, ?, ?, ?)",
            [
                (key, model, prompt_hash, json.dumps(answer, ensure_ascii=False), now)
                for key, model, prompt_hash, answer in rows
            ],
        )
        conn.commit()

    async def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The cached answers among ``keys`` (missing keys are absent from the result)."""
        if not keys:
            return {}
        found: dict[str, dict[str, Any]] = await self._run(self._get_many, list(keys))
        self.hits += len(found)
        self.misses += len(set(keys)) - len(found)
        return found

    async def put_many(self, rows: Sequence[tuple[str, str, str, dict[str, Any]]]) -> None:
        """Store (key, model id, prompt hash, answer) rows."""
        if rows:
            await self._run(self._put_many, list(rows))
            self.writes += len(rows)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread."""
        try:
            await self._run(self._close)
        finally:
            self._executor.shutdown(wait=False)
