"""The bodies a green agent posts to a backend for a battle: one progress body per event, one result body.

Why one module: the live reporting (:func:`green_agent.service.running_battles.backend_sink` and the result post)
and ``arena view`` (which rebuilds a battle's page from its run directory) must produce the same bodies, so the
imported page equals the live one. Everything here is a pure function of the event or the result, except the
trajectory read of :func:`progress_post_for` (in a worker thread) and :func:`progress_post_from_run` (blocking).

Sizes: a progress event is refused by our backend above ``max_event_bytes`` (256 KiB by default, compact UTF-8
JSON of the whole body) and a refusal is permanent (4xx): the attempt's event would be lost with its trajectory. So
the trajectory gets what the rest of the body leaves of :data:`MAX_PROGRESS_EVENT_BYTES` (at most
:data:`~green_agent.wire.trajectory.MAX_TRAJECTORY_BYTES`), or is left out when that is too little.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from green_agent.engine.events import AttemptFinished, BattleEvent
from green_agent.engine.report import render_markdown, winner_for
from green_agent.engine.results import BattleResult
from green_agent.wire.trajectory import (
    MAX_TRAJECTORY_BYTES,
    MIN_TRAJECTORY_BYTES,
    compact_records,
    trajectory_for_event,
)

log = logging.getLogger(__name__)

MAX_PROGRESS_EVENT_BYTES: Final = 256 * 1024
"""The battle backend's default ``max_event_bytes`` (cap of one progress event, compact UTF-8 JSON)."""
REPORTER_OVERHEAD_BYTES: Final = 1024
"""Room for what the reporter adds to a body: ``is_result``, ``reported_by``, ``timestamp``, ``event_id``."""
MARKDOWN_EVENTS: Final = frozenset({"battle_started", "battle_finished"})
"""Events whose text is markdown for the page (the others are one line)."""
REPORTED_BY: Final = "green_agent"


@dataclass(frozen=True)
class ProgressPost:
    """One progress event as posted: what :meth:`BackendReporter.progress` is given."""

    message: str
    detail: dict[str, Any]
    markdown_content: str | None = None

    def body(self, timestamp: str, *, reported_by: str = REPORTED_BY) -> dict[str, Any]:
        """The posted JSON body (without the reporter's idempotency key)."""
        body: dict[str, Any] = {
            "is_result": False,
            "message": self.message,
            "reported_by": reported_by,
            "timestamp": timestamp,
            "detail": self.detail,
        }
        if self.markdown_content is not None:
            body["markdown_content"] = self.markdown_content
        return body


@dataclass(frozen=True)
class ResultPost:
    """The result event as posted: what :meth:`BackendReporter.result` is given."""

    message: str
    winner: str
    detail: dict[str, Any]
    markdown_content: str | None = None

    def body(self, timestamp: str, *, reported_by: str = REPORTED_BY) -> dict[str, Any]:
        """The posted JSON body (without the reporter's idempotency key)."""
        body: dict[str, Any] = {
            "is_result": True,
            "message": self.message,
            "winner": self.winner,
            "detail": self.detail,
            "timestamp": timestamp,
            "reported_by": reported_by,
        }
        if self.markdown_content is not None:
            body["markdown_content"] = self.markdown_content
        return body


def progress_post(event: BattleEvent) -> ProgressPost:
    """An event's progress post without a trajectory: its first line as the message, markdown for the start and
    the end, the structured data (``event.wire()``) as the detail."""
    markdown = event.text if event.type in MARKDOWN_EVENTS else None
    first_line = event.text.splitlines()[0] if event.text else event.type
    return ProgressPost(first_line, event.wire(), markdown)


def trajectory_budget(post: ProgressPost, max_event_bytes: int = MAX_PROGRESS_EVENT_BYTES) -> int:
    """Bytes a trajectory may take in ``post`` so the whole event stays within ``max_event_bytes``."""
    try:
        text = json.dumps(post.body(""), ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: the reporter posts a note instead
        return 0
    rest = len(text.encode("utf-8", "replace")) + len(',"trajectory":') + REPORTER_OVERHEAD_BYTES
    return min(MAX_TRAJECTORY_BYTES, max_event_bytes - rest)


def with_trajectory(post: ProgressPost, trajectory: dict[str, Any] | None) -> ProgressPost:
    """``post`` with ``detail["trajectory"]`` (unchanged when there is none)."""
    if trajectory is None:
        return post
    return replace(post, detail={**post.detail, "trajectory": trajectory})


def progress_post_from_run(
    event: BattleEvent,
    run_dir: Path | None,
    *,
    max_event_bytes: int = MAX_PROGRESS_EVENT_BYTES,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> ProgressPost:
    """The progress post of ``event``, with the attempt's trajectory for ``attempt_finished``: from ``records`` (its
    messages, handed over from memory by the battle) or else read from ``run_dir`` (``arena view``, a re-emitted
    event); blocking. A trajectory that cannot be read or does not fit is left out, never raised."""
    post = progress_post(event)
    if event.type != "attempt_finished" or (run_dir is None and records is None):
        return post
    try:
        budget = trajectory_budget(post, max_event_bytes)
        if budget < MIN_TRAJECTORY_BYTES:
            log.debug("no trajectory for %s: the event leaves %d bytes", event.data.get("task_key"), budget)
            return post
        if records is not None:
            return with_trajectory(post, compact_records(records, max_bytes=budget))
        assert run_dir is not None
        return with_trajectory(post, trajectory_for_event(run_dir, event.data, max_bytes=budget))
    except Exception:  # a bug in the compaction must not cost the attempt's event
        log.warning("the trajectory of %s is not posted", event.data.get("task_key"), exc_info=True)
        return post


async def progress_post_for(
    event: BattleEvent, run_dir: Path | None, *, max_event_bytes: int = MAX_PROGRESS_EVENT_BYTES
) -> ProgressPost:
    """:func:`progress_post_from_run` in a worker thread (the event loop never waits on the disk nor on the
    compaction): the trajectory the event carries from memory (:attr:`BattleEvent.trajectory`), else its file."""
    records = event.trajectory
    if event.type != "attempt_finished" or (run_dir is None and records is None):
        return progress_post(event)
    return await asyncio.to_thread(
        progress_post_from_run, event, run_dir, max_event_bytes=max_event_bytes, records=records
    )


MAX_OUTBOX_LINE_BYTES: Final = 4 * MAX_PROGRESS_EVENT_BYTES
"""Longest outbox line read back for :func:`attempts_in_outbox` (a longer one is skipped, not loaded whole)."""


def attempts_in_outbox(path: Path) -> set[tuple[str, int]]:
    """(task key, attempt) of every ``attempt_finished`` event the outbox at ``path`` holds, delivered or not
    (blocking; streamed line by line; lines that are not events, are torn or are too long are skipped)."""
    reported: set[tuple[str, int]] = set()
    try:
        with path.open("rb") as handle:
            while line := handle.readline(MAX_OUTBOX_LINE_BYTES + 1):
                if len(line) > MAX_OUTBOX_LINE_BYTES:
                    while line and not line.endswith(b"\n"):  # skip the rest of an overlong line
                        line = handle.readline(MAX_OUTBOX_LINE_BYTES)
                    continue
                try:
                    record = json.loads(line)
                    detail = record["body"]["detail"] if record.get("type") == "event" else None
                except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                    continue
                if isinstance(detail, dict) and detail.get("type") == "attempt_finished":
                    key, attempt = detail.get("task_key"), detail.get("attempt")
                    if isinstance(key, str) and isinstance(attempt, int):
                        reported.add((key, attempt))
    except FileNotFoundError:
        return reported
    return reported


class ResumeBackfill:
    """The backend side of a resumed battle's re-emitted attempts (``Battle(journal_sinks=...)``): an attempt
    journaled by the earlier run but whose ``attempt_finished`` event never reached its outbox (the green agent
    stopped between the two) is posted now; those the outbox already holds are dropped, so none is posted twice.

    One per battle: the outbox is read once (in a worker thread), at the first re-emitted event."""

    def __init__(self, run_dir: Path, outbox: Path) -> None:
        self._run_dir = run_dir
        self._outbox = outbox
        self._reported: set[tuple[str, int]] | None = None

    async def missing(self, event: BattleEvent) -> ProgressPost | None:
        """The progress post of ``event`` when its attempt is not in the outbox yet (then counted as in it)."""
        typed = event.typed()
        if not isinstance(typed, AttemptFinished):
            return None
        if self._reported is None:
            self._reported = await asyncio.to_thread(attempts_in_outbox, self._outbox)
        key = (typed.task_key, typed.attempt)
        if key in self._reported:
            return None
        self._reported.add(key)
        log.info("attempt %s/%s: its event is posted again (the earlier run stopped before posting it)", *key)
        return await progress_post_for(event, self._run_dir)


def result_message(result: BattleResult) -> str:
    """The one line of the result event."""
    return f"pass^k evaluation finished: {len(result.attempts)} attempts"


def result_post(result: BattleResult, markdown: str | None, white_name: str) -> ResultPost:
    """The result post of a finished (or cancelled) battle: the winner by the rule of :func:`winner_for`, the
    BattleResult JSON as the detail, the battle's markdown summary (rendered when the battle has none)."""
    return ResultPost(
        result_message(result),
        winner_for(result, white_name),
        result.model_dump(mode="json"),
        markdown or render_markdown(result),
    )
