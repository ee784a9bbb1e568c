"""The reference ``llm`` agent's provider cap, adaptive on HTTP 429 (issue 27): one per agent, shared by all its
conversations (they all call one model at one base URL).

The same rules as the green agent's limiter (green_agent/provider_limits.py, docs/design/providers.md), kept as a
small copy because the white agents import nothing from ``green_agent``: at most ``allowed`` calls in flight; a 429
multiplies ``allowed`` by 0.7 once per generation and its Retry-After pauses every new call (at most
``max_pause_s``); each answered call adds ``1 / allowed``, up to the cap. The retries themselves stay in
:mod:`white_agent.model_retry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from white_agent.model_retry import retry_after_s

T = TypeVar("T")

DEFAULT_PROVIDER_MAX_CONCURRENCY = 32
"""Model calls in flight at most, before any 429 lowers it."""


class ProviderLimiter:
    """AIMD concurrency for one provider, on one event loop."""

    def __init__(self, max_concurrency: int = DEFAULT_PROVIDER_MAX_CONCURRENCY, *, max_pause_s: float = 60.0) -> None:
        self.cap = max(1, max_concurrency)
        self.limit = float(self.cap)
        self.max_pause_s = max_pause_s
        self.in_flight = 0
        self.paused_until = 0.0
        self.rate_limited = 0
        self.decreases = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def allowed(self) -> int:
        return max(1, int(self.limit))

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` under the limit; a 429 it raises slows every caller down (and is raised as it is)."""
        generation = await self._acquire()
        answered = False
        try:
            result = await fn()
            answered = True
            return result
        except Exception as error:
            if getattr(error, "status_code", None) == 429:
                self.rate_limited += 1
                if generation == self.decreases:
                    self.limit = max(1.0, self.limit * 0.7)
                    self.decreases += 1
                hint = retry_after_s(error)
                if hint is not None:
                    self.paused_until = max(self.paused_until, time.monotonic() + min(hint, self.max_pause_s))
            raise
        finally:
            if answered:
                self.limit = min(float(self.cap), self.limit + 1.0 / max(1.0, self.limit))
            self._hand_back()

    async def _acquire(self) -> int:
        if self.in_flight < self.allowed and not self._waiters:
            self.in_flight += 1
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._hand_back()
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
        try:
            while (pause := self.paused_until - time.monotonic()) > 0:
                await asyncio.sleep(pause)
        except BaseException:
            self._hand_back()
            raise
        return self.decreases

    def _hand_back(self) -> None:
        self.in_flight -= 1
        while self._waiters and self.in_flight < self.allowed:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.in_flight += 1
            waiter.set_result(None)
