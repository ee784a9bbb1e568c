"""Shared live feeds: the battle page's SSE stream and the battle list's WebSocket, built once and fanned out.

Why: every open page used to do its own work for every change: read the new events from the store, render each
timeline entry, re-render the status and the progress box, and (for the list) read and serialise the whole battle.
Ten open pages meant ten times that work on the backend's one core, competing with event ingestion. Now one feed task
per watched battle (and one for the list) reads the store and renders once per change, in a worker thread for the
HTML, and hands the finished messages to each viewer's bounded queue. The write path is not involved at all: a post
only marks the battle changed (`live.LiveHub.publish`).

A viewer that falls behind (a slow link, a stuck tab) cannot slow the feed or the other viewers: its queue holds at
most ``SUBSCRIBER_QUEUE`` messages; on overflow the backlog is dropped and the viewer catches up from the store on
its own time (the store, by sequence number, is the source of truth, so nothing is lost), and a send that does not
complete within ``live_send_timeout_s`` closes its connection (the browser reconnects and resumes). Feeds pace
themselves (at most one pass per ``min_interval``), so a burst of a thousand events costs a few passes, not a
thousand.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sse_starlette import ServerSentEvent

from battle_backend.live.hub import LiveHub
from battle_backend.store.protocol import BattleStore
from battle_backend.store.records import AgentRecord, BattleRecord, BattleState, EventRecord
from battle_backend.views.progress import LiveProgress, ProgressTracker
from battle_backend.views.rendering import Renderer, timeline_payload

logger = logging.getLogger(__name__)

SUBSCRIBER_QUEUE = 1024
"""Messages a viewer may have waiting before its backlog is dropped (it then catches up from the store)."""
EVENT_BATCH = 200
"""Events read from the store (and rendered) per step."""
BATTLE_MIN_INTERVAL_S = 0.1
"""A battle feed makes at most one pass per this interval: events arriving meanwhile go out together."""
LIST_MIN_INTERVAL_S = 0.25
"""The list feed re-reads a changed battle (all its events) at most this often."""


@dataclass(frozen=True)
class LiveMessage:
    """One message as it goes out: an SSE event (``event``, ``data``, ``id``) or a WebSocket text (``data``)."""

    event: str
    data: str
    id: str | None = None
    seq: int = 0
    """For a ``battle_event``: its sequence number (a viewer skips what it already sent)."""

    @functools.cached_property
    def sse_bytes(self) -> bytes:
        """The message in SSE wire format, encoded once for every viewer (they send batches of these as one
        chunk)."""
        return ServerSentEvent(data=self.data, event=self.event, id=self.id).encode()


class Viewer:
    """One open page's bounded queue of messages; the feed offers, the page's own task takes."""

    def __init__(self, limit: int | None = None) -> None:
        self._items: deque[LiveMessage] = deque()
        self._limit = SUBSCRIBER_QUEUE if limit is None else limit
        self._wake = asyncio.Event()
        self.overflowed = False
        """The backlog was dropped: the viewer must catch up from the store before taking from the queue again."""
        self.dropped = 0
        """How many times that happened (for tests and logs)."""

    def offer(self, messages: list[LiveMessage]) -> None:
        """Queue ``messages``, never blocking: over the limit the whole backlog is dropped instead."""
        if self.overflowed or not messages:
            return
        if len(self._items) + len(messages) > self._limit:
            self._items.clear()
            self.overflowed = True
            self.dropped += 1
            logger.info(
                "a live view fell %d messages behind: backlog dropped, it catches up from the store", self._limit
            )
        else:
            self._items.extend(messages)
        self._wake.set()

    async def take(self) -> list[LiveMessage] | None:
        """Every queued message, waiting for one; None when the backlog was dropped (catch up, then call again)."""
        while not self._items and not self.overflowed:
            self._wake.clear()
            await self._wake.wait()
        if self.overflowed:
            return None
        items = list(self._items)
        self._items.clear()
        return items


def _event_data(renderer: Renderer, event: EventRecord) -> LiveMessage:
    """A ``battle_event`` message (CPU: rendering and serialising; call it in a worker thread)."""
    data = {"seq": event.seq, "html": renderer.event_html(event), "event": timeline_payload(event.public_payload())}
    return LiveMessage("battle_event", json.dumps(data), id=str(event.seq), seq=event.seq)


async def event_messages(renderer: Renderer, events: list[EventRecord]) -> list[LiveMessage]:
    """``battle_event`` messages for ``events``, rendered in a worker thread (never on the event loop)."""
    if not events:
        return []
    return await asyncio.to_thread(lambda: [_event_data(renderer, event) for event in events])


def progress_data(progress: LiveProgress, html: str) -> dict[str, Any]:
    """The ``battle_progress`` data: the rendered box plus its counters as text (for the page's live region)."""
    return {
        "html": html,
        "done": progress.done,
        "total": progress.total,
        "done_text": progress.done_text,
        "pass1_text": progress.pass1_text,
        "eta_text": progress.eta_text,
    }


@dataclass(frozen=True)
class FeedSnapshot:
    """What a viewer joining (or catching up) needs: where the feed is and its latest state and progress."""

    position: int
    state: LiveMessage | None
    progress: LiveMessage | None
    ended: bool
    gone: bool


async def participant_agents(store: BattleStore, battle: BattleRecord) -> dict[str, AgentRecord]:
    """The battle's agents by id (deleted ones are simply absent)."""
    agents: dict[str, AgentRecord] = {}
    for agent_id in battle.participant_ids:
        agent = await store.get_agent(agent_id)
        if agent is not None:
            agents[agent_id] = agent
    return agents


class BattleFeed:
    """The SSE feed of one battle: its task follows the battle's changes and offers each message to every viewer."""

    def __init__(self, battle_id: str, store: BattleStore, hub: LiveHub, renderer: Renderer) -> None:
        self.battle_id = battle_id
        self._store = store
        self._hub = hub
        self._renderer = renderer
        self.viewers: set[Viewer] = set()
        self.position = 0
        """Every event up to this sequence number was offered to the viewers (and folded into the progress)."""
        self._tracker = ProgressTracker()
        self._state_key: tuple[Any, ...] | None = None
        self._state: LiveMessage | None = None
        self._progress_html: str | None = None
        self._progress: LiveMessage | None = None
        self.ended = False
        self.gone = False
        self.failed = False
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def snapshot(self, viewer: Viewer) -> FeedSnapshot:
        """Where the feed is, taken in one step with clearing the viewer's overflow: every message offered after
        this is newer than the snapshot."""
        viewer.overflowed = False
        return FeedSnapshot(self.position, self._state, self._progress, self.ended, self.gone or self.failed)

    def _offer(self, messages: list[LiveMessage]) -> None:
        for viewer in list(self.viewers):
            viewer.offer(messages)

    async def run(self) -> None:
        """Fold what is stored, then follow the battle until it is over (or gone). Should reading or rendering
        fail, the viewers' streams are closed (their browsers reconnect to a new feed) rather than left waiting."""
        try:
            with self._hub.subscribe(self.battle_id) as sub:  # before reading: no change can slip through
                await self._fold_stored()
                await self._pass(render_events=False)
                self.ready.set()
                while not (self.ended or self.gone):
                    await sub.wait()
                    await self._pass(render_events=True)
                    await asyncio.sleep(BATTLE_MIN_INTERVAL_S)
        except Exception:
            logger.exception("live feed of battle %s failed; its viewers are disconnected", self.battle_id)
            self.failed = True
            self._offer([LiveMessage("gone", "{}")])
        finally:
            self.ready.set()

    async def _fold_stored(self) -> None:
        """The progress of the events already stored (viewers read those themselves, from where they resume)."""
        while True:
            batch = await self._store.list_events(self.battle_id, after_seq=self.position, limit=EVENT_BATCH)
            for event in batch:
                self._tracker.add(event)
            if batch:
                self.position = batch[-1].seq
            if len(batch) < EVENT_BATCH:
                return

    async def _pass(self, *, render_events: bool) -> None:
        """New events, then the state and the progress box when they changed, then ``end`` once the battle is over
        and drained."""
        if render_events:
            while True:
                batch = await self._store.list_events(self.battle_id, after_seq=self.position, limit=EVENT_BATCH)
                messages = await event_messages(self._renderer, batch)
                for event in batch:
                    self._tracker.add(event)
                if batch:
                    self.position = batch[-1].seq
                    self._offer(messages)
                if len(batch) < EVENT_BATCH:
                    break
        battle = await self._store.get_battle(self.battle_id, include_events=False)
        if battle is None:
            self.gone = True
            self._offer([LiveMessage("gone", "{}")])
            return
        progress = self._tracker.snapshot(now=datetime.now(UTC), running=battle.state is BattleState.RUNNING)
        key = (
            battle.state,
            battle.error,
            battle.started_at,
            battle.finished_at,
            battle.battle_timeout,
            battle.result is None,
            progress.calibration,
        )
        if key != self._state_key:
            agents = await participant_agents(self._store, battle)
            calibration = progress.calibration
            data = await asyncio.to_thread(
                lambda: {
                    "state": battle.state.value,
                    "status_html": self._renderer.status_html(battle, agents, started_calibration=calibration),
                    "result_html": self._renderer.result_html(battle, started_calibration=calibration),
                }
            )
            self._state_key = key
            self._state = LiveMessage("battle_state", json.dumps(data))
            self._offer([self._state])
        # In a worker thread: a big battle's strip is thousands of cells.
        html = await asyncio.to_thread(self._renderer.progress_html, battle, progress)
        if html != self._progress_html:
            self._progress_html = html
            self._progress = LiveMessage("battle_progress", json.dumps(progress_data(progress, html)))
            self._offer([self._progress])
        if battle.state.is_terminal and self.position >= battle.last_seq:
            self.ended = True
            self._offer([LiveMessage("end", "{}")])


class ListFeed:
    """The battle list's WebSocket feed: one ``battle_update`` text per changed battle, built once for every tab."""

    def __init__(self, hub: LiveHub, build: Callable[[str], Awaitable[str | None]]) -> None:
        self._hub = hub
        self._build = build
        self.viewers: set[Viewer] = set()
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Follow every battle; a changed one is read, serialised and offered once per pass (a battle that cannot
        be read this time is logged and skipped: its next change brings it again)."""
        with self._hub.subscribe(None) as sub:
            self.ready.set()
            while True:
                changed = await sub.wait()
                for battle_id in sorted(changed):
                    try:
                        text = await self._build(battle_id)
                    except Exception:
                        logger.exception("battle list feed: battle %s could not be sent", battle_id)
                        continue
                    if text is not None:
                        for viewer in list(self.viewers):
                            viewer.offer([LiveMessage("battle_update", text)])
                await asyncio.sleep(LIST_MIN_INTERVAL_S)


class LiveFeeds:
    """The app's feeds: one per battle with viewers, one for the list; each stops when its last viewer leaves."""

    def __init__(self, store: BattleStore, hub: LiveHub, renderer: Renderer) -> None:
        self._store = store
        self._hub = hub
        self._renderer = renderer
        self._battles: dict[str, BattleFeed] = {}
        self._list: ListFeed | None = None

    @contextlib.asynccontextmanager
    async def watch_battle(self, battle_id: str) -> AsyncIterator[tuple[BattleFeed, Viewer]]:
        """Join the battle's feed (started for the first viewer) for the duration of the block."""
        feed = self._battles.get(battle_id)
        if feed is None or feed.failed:
            feed = BattleFeed(battle_id, self._store, self._hub, self._renderer)
            feed.task = asyncio.create_task(feed.run(), name=f"live-feed-{battle_id}")
            self._battles[battle_id] = feed
        viewer = Viewer()
        feed.viewers.add(viewer)
        try:
            await feed.ready.wait()
            yield feed, viewer
        finally:
            feed.viewers.discard(viewer)
            if not feed.viewers and self._battles.get(battle_id) is feed:
                del self._battles[battle_id]
                if feed.task is not None:
                    feed.task.cancel()

    @contextlib.asynccontextmanager
    async def watch_list(self, build: Callable[[str], Awaitable[str | None]]) -> AsyncIterator[Viewer]:
        """Join the list feed (started for the first viewer, with ``build`` making one battle's update text)."""
        if self._list is None:
            self._list = ListFeed(self._hub, build)
            self._list.task = asyncio.create_task(self._list.run(), name="live-feed-list")
        feed = self._list
        viewer = Viewer()
        feed.viewers.add(viewer)
        try:
            await feed.ready.wait()  # the feed follows every change from here on
            yield viewer
        finally:
            feed.viewers.discard(viewer)
            if not feed.viewers and self._list is feed:
                self._list = None
                if feed.task is not None:
                    feed.task.cancel()

    async def aclose(self) -> None:
        """Stop every feed (the app's shutdown)."""
        tasks = [feed.task for feed in self._battles.values() if feed.task is not None]
        if self._list is not None and self._list.task is not None:
            tasks.append(self._list.task)
        self._battles.clear()
        self._list = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
