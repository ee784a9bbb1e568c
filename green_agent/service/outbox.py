"""The durable outbox of one battle's backend reporter: ``runs/<battle id>/outbox.jsonl``.

Why it exists: a backend outage used to cost events (each was dropped after ~6 s of retries) and, when the battle
ended during the outage, the result; a green agent restart lost whatever was still queued. Every event the reporter
is given is now appended here first, and every outcome after it, so the delivery survives the process.

Format: one append-only file of JSON lines, written by one writer task per outbox (the file work runs in a worker
thread; lines queued while a write is in progress go out together in the next write, each write flushed and
fsync'd), so reporting an event never waits for the disk:

* ``{"type": "header", "format": "arena.outbox/1", "battle_id", "backend_url", "token": bool, "opened_at"}`` —
  written by each reporter that opens the file (the last one wins). ``token`` only says whether the battle had a
  battle token: the token itself is never written (it is held in memory; see ``BackendReporter``).
* ``{"type": "event", "seq": n, "at": <epoch s when reported>, "result": bool, "body": {...}}`` — ``body`` is
  exactly what is posted, including its idempotency key ``event_id`` (``"<battle id>:<reporter nonce>:<seq>"``).
* ``{"type": "mark", "seq": n, "status": "delivered" | "rejected" | "expired", "code"?: int, "reason"?: str}`` —
  the outcome of event ``n``. Events are settled strictly in ``seq`` order, so the events without a mark are
  exactly the ones still to deliver, in order.

Reading (:func:`load_outbox`) tolerates a torn last line (a crash in the middle of a write): it is ignored, and
:meth:`OutboxWriter.load` cuts it off before anything is appended. A bad line elsewhere is skipped with a warning
(the rest can still be delivered). Nothing here raises to the battle: a disk error is logged once and delivery goes
on from memory.

The module also holds the delivery of one entry over HTTP (:func:`post_entry`: what an answer means, bounded reads,
``Retry-After``) and the backoff (:class:`RetryPolicy`); ``BackendReporter`` drives them in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from green_agent.run_files import MiB, RunFileRefused, read_run_file
from green_agent.wire.process import DEFAULT_RETENTION_S as DEFAULT_RETENTION_S
from green_agent.wire.process import OUTBOX_FILE as OUTBOX_FILE

log = logging.getLogger(__name__)

OUTBOX_FORMAT = "arena.outbox/1"
MAX_OUTBOX_BYTES = 1024 * MiB
"""An outbox holds every undelivered event with its trajectory: large, but a replay never reads more than this."""
MAX_REASON_CHARS = 300
"""Longest reason kept in a mark or a log line."""
MAX_ANSWER_BYTES = 4096
"""The most of a backend's answer body that is read (for the reason of a refusal)."""

MarkStatus = Literal["delivered", "rejected", "expired"]


@dataclass(frozen=True)
class OutboxEntry:
    """One event to deliver: its place in the battle's order, when it was reported, and the JSON text to post."""

    seq: int
    enqueued_at: float
    """Epoch seconds (wall clock: it is compared with the clock of a later process)."""
    is_result: bool
    body: str
    """The JSON text posted, ASCII only (it holds the idempotency key ``event_id``)."""

    def line(self) -> str:
        """The outbox line of this event (``body`` is already JSON: it is embedded, not encoded again)."""
        result = "true" if self.is_result else "false"
        return f'{{"type":"event","seq":{self.seq},"at":{self.enqueued_at!r},"result":{result},"body":{self.body}}}'


@dataclass
class OutboxState:
    """What an outbox file holds."""

    battle_id: str | None = None
    backend_url: str | None = None
    token_used: bool = False
    pending: list[OutboxEntry] = field(default_factory=list)
    """Events without a mark, in order: still to deliver."""
    next_seq: int = 1
    settled: int = 0
    torn_tail: bool = False
    bad_lines: int = 0
    complete_bytes: int = 0
    """Length of the file up to its last complete line."""


def event_json(payload: dict[str, Any]) -> str:
    """``payload`` as JSON text; values that are not JSON become strings, and a detail that cannot be serialised at
    all (a cycle, a key that is not a string) is replaced by a note rather than raised to the battle."""
    try:
        return json.dumps(payload, default=str)
    except (TypeError, ValueError) as error:
        return json.dumps({**payload, "detail": {"error": f"detail not serialisable: {error}"}}, default=str)


def mark_line(seq: int, status: MarkStatus, code: int | None = None, reason: str = "") -> str:
    """The outbox line recording how event ``seq`` was settled."""
    record: dict[str, Any] = {"type": "mark", "seq": seq, "status": status}
    if code is not None:
        record["code"] = code
    if reason:
        record["reason"] = reason[:MAX_REASON_CHARS]
    return json.dumps(record)


def header_line(battle_id: str, backend_url: str, *, token_used: bool) -> str:
    """The header a reporter writes when it opens the outbox (the token is never written, only whether one exists)."""
    record = {
        "type": "header",
        "format": OUTBOX_FORMAT,
        "battle_id": battle_id,
        "backend_url": backend_url,
        "token": token_used,
        "opened_at": time.time(),
    }
    return json.dumps(record)


def parse_outbox(data: bytes, *, source: str = "outbox") -> OutboxState:
    """The state held by the bytes of an outbox file (a torn last line ignored, bad lines skipped)."""
    state = OutboxState()
    cut = data.rfind(b"\n") + 1
    state.complete_bytes = cut
    state.torn_tail = cut < len(data)
    events: dict[int, OutboxEntry] = {}
    settled: set[int] = set()
    for number, raw in enumerate(data[:cut].splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            kind = record["type"]
            if kind == "header":
                state.battle_id = str(record["battle_id"])
                state.backend_url = str(record["backend_url"])
                state.token_used = bool(record.get("token"))
            elif kind == "event":
                seq = int(record["seq"])
                body = json.dumps(record["body"])
                events[seq] = OutboxEntry(seq, float(record["at"]), bool(record["result"]), body)
            elif kind == "mark":
                settled.add(int(record["seq"]))
        except (ValueError, KeyError, TypeError):
            state.bad_lines += 1
            log.warning("%s: line %d is not an outbox record; skipped", source, number)
    state.pending = [events[seq] for seq in sorted(events) if seq not in settled]
    state.settled = len(events) - len(state.pending)
    state.next_seq = max(events, default=0) + 1
    return state


def load_outbox(path: Path) -> OutboxState:
    """Read an outbox file (blocking: call it in a worker thread); an empty state when there is none."""
    try:
        data = read_run_file(path.parent, path.name, max_bytes=MAX_OUTBOX_BYTES)
    except FileNotFoundError:
        return OutboxState()
    except RunFileRefused as refused:  # a link out of the run, a FIFO, a device, too large: the run dir is input
        log.warning("%s: %s; not replayed", path, refused)
        return OutboxState()
    return parse_outbox(data, source=str(path))


def recent_outboxes(runs_dir: Path, retention_s: float) -> list[Path]:
    """Outbox files under ``runs_dir/*/`` written to within the retention (older ones hold only expired events).
    Blocking: call it in a worker thread."""
    horizon = time.time() - retention_s
    found: list[Path] = []
    try:
        candidates = list(runs_dir.glob(f"*/{OUTBOX_FILE}"))
    except OSError:
        return []
    for path in sorted(candidates):
        try:
            if path.is_file() and path.stat().st_mtime >= horizon:
                found.append(path)
        except OSError:
            continue
    return found


class OutboxWriter:
    """Appends lines to one outbox file from a writer task: in order, batched, each batch flushed and fsync'd.

    :meth:`write` only queues (safe to call from the event loop at any rate); the file work runs in a worker thread.
    One writer per file per process: the registry makes sure a replayed outbox is closed before a resumed battle
    opens it again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[str] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._handle: Any = None
        self._truncate_to: int | None = None
        self._closing = False
        self._failed = False

    @property
    def failed(self) -> bool:
        """True once a write failed (the outbox is then no longer complete; delivery goes on from memory)."""
        return self._failed

    async def load(self) -> OutboxState:
        """Read what the file holds. A torn last line is ignored, and cut off before this writer's first write (not
        now: a caller may still decide not to use the file), so every appended line starts on a line of its own."""
        state = await asyncio.to_thread(load_outbox, self.path)
        if state.torn_tail:
            log.warning("%s: the last line was cut short (a crash while writing); it is ignored", self.path)
            self._truncate_to = state.complete_bytes
        return state

    def write(self, line: str) -> None:
        """Queue one line (a JSON record without its newline)."""
        if self._closing:
            return
        self._lines.append(line)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"outbox-writer-{self.path}")

    async def aclose(self) -> None:
        """Write what is queued, then release the file (a cancelled caller still gets its lines written)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await asyncio.shield(self._task)
        elif self._handle is not None:
            await asyncio.to_thread(self._close_handle)

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._lines:
                    batch, self._lines = self._lines, []
                    await asyncio.to_thread(self._append, batch)
                if self._closing and not self._lines:
                    return
        finally:
            if self._handle is not None:
                await asyncio.to_thread(self._close_handle)

    def _append(self, batch: list[str]) -> None:
        if self._failed:
            return
        try:
            if self._handle is None:
                created = not self.path.exists()
                self.path.parent.mkdir(parents=True, exist_ok=True)
                if self._truncate_to is not None and not created:
                    with self.path.open("r+b") as torn:
                        torn.truncate(self._truncate_to)
                self._truncate_to = None
                self._handle = self.path.open("ab")
                if created:
                    _fsync_dir(self.path.parent)
            self._handle.write(("\n".join(batch) + "\n").encode("utf-8", "replace"))
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except (OSError, ValueError) as error:
            self._failed = True
            log.warning("%s: cannot write the outbox (%s); delivery goes on from memory only", self.path, error)

    def _close_handle(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError as error:
                log.warning("%s: closing the outbox failed: %s", self.path, error)


def _fsync_dir(directory: Path) -> None:
    """Make a new file's directory entry durable too (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- delivery of one outbox entry over HTTP ----------------------------------------------------------------------


class UndeliveredEvent(BaseModel):
    """An event the backend did not accept, and why."""

    model_config = ConfigDict(frozen=True)

    event: dict[str, Any]
    reason: str
    status_code: int | None = None
    attempts: int = 0


def utc_timestamp() -> str:
    """ISO 8601 UTC with a ``Z`` suffix, the form AgentBeats agents use."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RetryPolicy(BaseModel):
    """Backoff between posts of one event: ``initial_delay_s * multiplier**(n-1)`` capped at ``max_delay_s``.

    There is no attempt limit: an event is retried until it is delivered, refused, or past its retention."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    initial_delay_s: float = Field(default=0.2, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    max_delay_s: float = Field(default=5.0, ge=0)

    def delay_after(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        return min(self.initial_delay_s * self.multiplier ** min(attempt - 1, 64), self.max_delay_s)


@dataclass(frozen=True)
class Answer:
    """What one POST came to: delivered (2xx), refused for good (other 4xx), or worth another try."""

    kind: Literal["delivered", "refused", "retry"]
    reason: str = ""
    status_code: int | None = None
    retry_after_s: float | None = None


def clean_text(text: str, secret: str | None) -> str:
    """Untrusted text fit for a log line: the secret blanked out, one line, bounded."""
    if secret:
        text = text.replace(secret, "[battle_token]")
    text = "".join(ch if ch.isprintable() else " " for ch in text[: MAX_REASON_CHARS * 2])
    return text[:MAX_REASON_CHARS]


async def post_entry(
    client: httpx.AsyncClient,
    endpoint: str,
    entry: OutboxEntry,
    *,
    headers: dict[str, str],
    timeout_s: float,
    attempt: int,
    secret: str | None,
) -> Answer:
    """One POST of ``entry``: 2xx delivered; 5xx, 408, 429, transport errors and timeouts worth another try; any
    other 4xx refused (400 on a result: the battle is already finished). At most :data:`MAX_ANSWER_BYTES` of the
    answer are read, whatever the backend sends, and the whole exchange is bounded by ``2 * timeout_s``."""
    try:
        async with (
            asyncio.timeout(timeout_s * 2),
            client.stream(
                "POST", endpoint, content=entry.body.encode("utf-8"), headers=headers, timeout=timeout_s
            ) as response,
        ):
            answer = await _read_bounded(response, MAX_ANSWER_BYTES)
    except TimeoutError:
        return Answer("retry", f"no answer within {timeout_s * 2:g} s")
    except httpx.HTTPError as error:
        return Answer("retry", clean_text(f"{type(error).__name__}: {error}".rstrip(": "), secret))
    status = response.status_code
    if 200 <= status < 300:
        return Answer("delivered", status_code=status)
    text = clean_text(answer.decode("utf-8", "replace"), secret)
    if status >= 500 or status in (408, 429):
        return Answer("retry", f"HTTP {status}: {text}", status, _retry_after_s(response))
    if status == 400 and entry.is_result:
        earlier = " (an earlier attempt may have got through)" if attempt > 1 else ""
        return Answer("refused", f"battle already finished: HTTP 400{earlier}: {text}", status)
    return Answer("refused", f"HTTP {status}: {text}", status)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip()[:32])
    except ValueError:
        return None  # an HTTP date: the policy's own delay applies
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


async def _read_bounded(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the body as sent (not decompressed: a small answer cannot expand in memory)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_raw():
            chunks.append(chunk[: limit - size])
            size += len(chunk)
            if size >= limit:
                break
    except httpx.StreamConsumed:  # a transport that answered with the body already in memory (e.g. a mock)
        return response.content[:limit]
    return b"".join(chunks)
