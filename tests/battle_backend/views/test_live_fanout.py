"""Live fan-out off the write path: posts never wait for viewers, and a slow or stuck viewer slows nobody else.

Nothing here is timed: a stuck viewer either blocks the posts or the other viewers (the test then hangs into its
``asyncio.timeout`` and fails) or it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from websockets.asyncio.client import connect

from battle_backend.live.hub import BattleChange, LiveHub
from battle_backend.views import live_feeds
from battle_backend.views.live_feeds import LiveMessage, Viewer
from tests.battle_backend.conftest import WAIT_LIMIT_S, Arena, progress, result
from tests.battle_backend.views.test_live_updates import Sse, read_sse

BIG_TEXT = "lorem ipsum dolor sit amet " * 300
"""About 8 KB per event, so that a viewer that does not read fills every buffer between it and the backend."""


async def test_publish_only_marks_and_a_subscriber_that_never_reads_holds_one_entry_per_battle() -> None:
    hub = LiveHub()
    with hub.subscribe("b1") as one, hub.subscribe(None) as every:
        for index in range(10_000):
            hub.publish(BattleChange("b1" if index % 2 else "b2"))
        assert one.dirty == set() and every.dirty == set()  # publish itself fans out nothing
        await asyncio.sleep(0)  # the dispatcher's pass
        await asyncio.sleep(0)
        assert one.dirty == {"b1"} and every.dirty == {"b1", "b2"}
        assert await every.wait() == {"b1", "b2"}
    await hub.aclose()


async def test_a_viewer_queue_is_bounded_and_an_overflow_drops_the_backlog() -> None:
    viewer = Viewer(limit=3)
    viewer.offer([LiveMessage("battle_event", "{}", seq=1), LiveMessage("battle_event", "{}", seq=2)])
    assert [m.seq for m in await viewer.take() or []] == [1, 2]
    for seq in range(3, 10):
        viewer.offer([LiveMessage("battle_event", "{}", seq=seq)])
    assert viewer.overflowed and viewer.dropped == 1
    assert await viewer.take() is None  # catch up from the store first
    viewer.overflowed = False
    viewer.offer([LiveMessage("battle_event", "{}", seq=10)])
    assert [m.seq for m in await viewer.take() or []] == [10]


@contextlib.asynccontextmanager
async def stuck_sse(url: str, battle_id: str) -> AsyncIterator[None]:
    """An SSE viewer that connects and never reads (a frozen tab), with a small receive buffer."""
    host, _, port = url.removeprefix("http://").partition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    request = f"GET /battles/{battle_id}/events HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    await asyncio.get_running_loop().sock_sendall(sock, request.encode())
    try:
        yield
    finally:
        sock.close()


async def _read_to_end(arena: Arena, battle_id: str) -> list[Sse]:
    collected: list[Sse] = []
    async with arena.client.stream("GET", f"/battles/{battle_id}/events", params={"since": 0}) as response:
        async for sse in read_sse(response):
            collected.append(sse)
            if sse.event == "end":
                break
    return collected


def _assert_complete(collected: list[Sse], event_count: int, posted: set[str]) -> None:
    seqs = [int(s.id or 0) for s in collected if s.event == "battle_event"]
    assert seqs == list(range(1, event_count + 1))
    messages = {json.loads(s.data)["event"].get("message") for s in collected if s.event == "battle_event"}
    assert posted <= messages
    assert collected[-1].event == "end"
    assert json.loads([s for s in collected if s.event == "battle_state"][-1].data)["state"] == "finished"


async def _post_many(arena: Arena, battle_id: str, posters: int, each: int) -> set[str]:
    async def poster(number: int) -> list[int]:
        async with httpx.AsyncClient(base_url=arena.backend.url, trust_env=False, timeout=30) as client:
            return [
                (
                    await client.post(
                        f"/battles/{battle_id}", json=progress(f"p{number}-{i}", markdown_content=BIG_TEXT)
                    )
                ).status_code
                for i in range(each)
            ]

    statuses = await asyncio.gather(*(poster(n) for n in range(posters)))
    assert all(status == 204 for batch in statuses for status in batch)
    return {f"p{n}-{i}" for n in range(posters) for i in range(each)}


async def test_stuck_viewers_block_neither_posts_nor_other_viewers(arena: Arena) -> None:
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    ws_url = arena.backend.url.replace("http://", "ws://") + "/ws/battles"
    async with (
        asyncio.timeout(WAIT_LIMIT_S * 2),
        stuck_sse(arena.backend.url, battle_id),
        stuck_sse(arena.backend.url, battle_id),
        connect(ws_url, max_queue=1, close_timeout=0.5) as stuck_ws,  # stops reading after one message
    ):
        reader = asyncio.create_task(_read_to_end(arena, battle_id))
        posted = await _post_many(arena, battle_id, posters=8, each=25)
        assert (await arena.post(battle_id, result("draw"))).status_code == 204
        collected = await reader
        assert stuck_ws is not None
    _assert_complete(collected, (await arena.get(battle_id))["event_count"], posted)


async def test_a_viewer_whose_backlog_is_dropped_catches_up_from_the_store(
    arena: Arena, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no room at all in a viewer's queue, every message the feed offers overflows it: the stream then only
    ever catches up from the store, and must still deliver every event once, in order, then the end."""
    monkeypatch.setattr(live_feeds, "SUBSCRIBER_QUEUE", 0)
    green, white = await arena.pair()
    battle_id = await arena.battle(green, ("white_agent", white))
    await arena.started(green, battle_id)
    async with asyncio.timeout(WAIT_LIMIT_S * 2):
        reader = asyncio.create_task(_read_to_end(arena, battle_id))
        posted = await _post_many(arena, battle_id, posters=5, each=10)
        assert (await arena.post(battle_id, result("draw"))).status_code == 204
        collected = await reader
    _assert_complete(collected, (await arena.get(battle_id))["event_count"], posted)
