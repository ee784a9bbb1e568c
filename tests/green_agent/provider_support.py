"""Helpers of the provider-limit tests (test_provider_limits.py, test_provider_shares.py): calls held until released,
and a few event-loop turns so every waiter runs as far as it can. Orders and counts only, never durations."""

from __future__ import annotations

import asyncio


class Probe:
    """Calls that wait until released, recording how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.release = asyncio.Event()

    async def call(self) -> str:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.release.wait()
            return "ok"
        finally:
            self.running -= 1


async def settle() -> None:
    """Let every ready task run until it waits on something that has not happened yet."""
    for _ in range(20):
        await asyncio.sleep(0)
