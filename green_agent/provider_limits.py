"""Per-provider concurrency caps, adaptive on HTTP 429 / Retry-After (issue 27): what keeps hundreds of attempts in
flight from turning a provider's rate limit into failures.

A provider is a (base URL, model) pair. :class:`ProviderLimits` holds one :class:`ProviderLimiter` per provider for
one green agent: it is owned by the service context and injected into the battles (the LLM user simulator) and the
evaluations (the LLM judge); nothing here is process-wide. Every model call goes through
:meth:`ProviderLimiter.run` (green_agent/llm_retry.py's :class:`~green_agent.llm_retry.RetryBudget` does it for
each try), which

* waits for a slot: at most :attr:`ProviderLimiter.allowed` calls of all attempts and battles in flight at once;
* after a 429, multiplies the allowed concurrency by :data:`DECREASE` (0.7, as TCP CUBIC does: with 0.5 a
  concurrency-limited provider got 0.80 of its limit in benchmarks/bench_provider_limits.py, with 0.7 0.84), once
  per "generation" (the 429s of calls that were started before the last decrease do not decrease it again) and, when
  the answer carries a Retry-After, pauses every new call to that provider until then (a shared pause, at most
  ``max_pause_s``);
* after each answered call, raises the allowed concurrency by ``1 / allowed`` (additive increase: about one more
  slot per round of ``allowed`` answers), never above the operator's cap.

A 429 is not anybody's failure: the caller's retry budget retries it (after the pause). Only when that budget runs
out does the caller fail, as the provider's failure (the user simulator's: an infrastructure error, never the
agent's). Each caller counts its 429s and retries (the summary's ``usage.user.rate_limited`` / ``retries``).

Shares (docs/design/providers.md, "Shares"): the operator's cap holds for the whole green agent. The service's
:class:`ProviderLimits` is also the ledger of that cap: every battle that runs over worker processes holds shares of
it for its workers (:meth:`ProviderLimits.hold_workers`: each live worker of every battle gets ``max(1, part // W)``,
W the live workers of all battles, told to each worker as it changes) and the serving process keeps the rest (at
least one slot) for its in-process battles, evaluations and pooled attempts. In a pool of green agents the part is
``max(1, cap // members)`` (:meth:`ProviderLimits.set_divisor`, kept up to date by
green_agent/service/pool_presence.py). A worker process's own :class:`ProviderLimits` takes its share with
:meth:`ProviderLimits.set_share`. A smaller share lets the calls in flight finish and starts no new call until they
are below it; a larger one hands free slots to the waiters at once. No shared state across processes, no IPC on the
call path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from green_agent.llm_retry import retry_after_s

if TYPE_CHECKING:
    from green_agent.engine.config import BattleConfig

T = TypeVar("T")

log = logging.getLogger(__name__)

DEFAULT_PROVIDER_MAX_CONCURRENCY = 32
"""Calls in flight per provider unless the operator says otherwise (``arena-green --provider-max-concurrency``)."""
MAX_PROVIDER_CONCURRENCY = 4096
"""Largest cap an operator may set."""
DECREASE = 0.7
"""What a 429 multiplies the allowed concurrency by (once per generation)."""
MAX_PAUSE_S = 60.0
"""Longest shared pause one Retry-After may impose (a provider's header is input: bounded)."""
MAX_PROVIDERS = 256
"""Providers tracked at once; beyond, the least recently used idle one is forgotten (it starts afresh)."""
DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""The openai client's base URL when none is configured."""


def status_of(error: BaseException) -> int | None:
    """The HTTP status an OpenAI-compatible client's error carries (``openai.APIStatusError.status_code``)."""
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) else None


class ProviderLimiter:
    """The adaptive concurrency of one provider (AIMD), shared by every call to it in this process."""

    def __init__(
        self,
        name: str,
        *,
        max_concurrency: int,
        max_pause_s: float = MAX_PAUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency: at least 1 (got {max_concurrency})")
        self.name = name
        self.cap = max_concurrency
        self.limit = float(max_concurrency)
        """The allowed concurrency, adapted (1 <= limit <= cap)."""
        self.max_pause_s = max_pause_s
        self._clock = clock
        self.in_flight = 0
        self.peak_in_flight = 0
        self.paused_until = 0.0
        self.calls = 0
        self.rate_limited = 0
        """429 answers seen."""
        self.decreases = 0
        """Times the limit was lowered (also the generation a call started in)."""
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def allowed(self) -> int:
        """Calls that may be in flight now."""
        return max(1, int(self.limit))

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` under the limit; a 429 it raises slows the provider down (and is raised as it is)."""
        generation = await self._acquire()
        answered = False
        try:
            result = await fn()
            answered = True
            return result
        except Exception as error:
            if status_of(error) == 429:
                self._on_rate_limited(generation, retry_after_s(error))
            raise
        finally:
            if answered:
                self.limit = min(float(self.cap), self.limit + 1.0 / max(1.0, self.limit))
            self._hand_back()

    def _on_rate_limited(self, generation: int, retry_after: float | None) -> None:
        self.rate_limited += 1
        if generation == self.decreases:  # the first 429 of its generation: slow down once
            self.limit = max(1.0, self.limit * DECREASE)
            self.decreases += 1
            log.info("provider %s: HTTP 429, allowed concurrency now %d", self.name, self.allowed)
        if retry_after is not None:
            until = self._clock() + min(retry_after, self.max_pause_s)
            self.paused_until = max(self.paused_until, until)

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
                    self._hand_back()  # a slot was handed over just as we were cancelled: pass it on
                else:
                    self._forget(waiter)
                raise
        try:
            while (pause := self.paused_until - self._clock()) > 0:
                await asyncio.sleep(pause)
        except BaseException:
            self._hand_back()
            raise
        self.calls += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        return self.decreases

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def resize(self, cap: int) -> None:
        """This process's share of the provider changed: ``cap`` (at least 1) calls in flight at most from now on. A
        smaller share lets the calls in flight finish (no new one starts until they are below it); a larger one
        raises the adapted limit by as much (never above ``cap``) and hands the free slots to the waiters at once."""
        cap = max(1, cap)
        grown = cap - self.cap
        self.cap = cap
        self.limit = min(float(cap), self.limit + grown) if grown > 0 else min(self.limit, float(cap))
        self._wake()

    def _hand_back(self) -> None:
        """One slot free again: hand free slots to the waiters, first come first served."""
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.allowed:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.in_flight += 1
            waiter.set_result(None)


class BattleLimiter:
    """A battle's view of a provider: at most ``share()`` of its own calls in flight (its
    ``provider_max_concurrency``, scaled to this process's share of the operator's cap and read on every call, so it
    follows a resized share), then the shared limiter. Waiters are served first come, first served."""

    def __init__(self, shared: ProviderLimiter, cap: int | None, share: Callable[[], int] | None = None) -> None:
        self.shared = shared
        self._share = share if share is not None else (None if cap is None else (lambda: cap))
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def allowed(self) -> int | None:
        """The battle's calls that may be in flight now (None: only the provider's limit applies)."""
        return None if self._share is None else max(1, self._share())

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._share is None:
            return await self.shared.run(fn)
        await self._acquire()
        try:
            return await self.shared.run(fn)
        finally:
            self._release()

    async def _acquire(self) -> None:
        if not self._waiters and self._in_flight < (self.allowed or 1):
            self._in_flight += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot just as we were cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _release(self) -> None:
        self._in_flight -= 1
        while self._waiters and self._in_flight < (self.allowed or 1):
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._in_flight += 1
            waiter.set_result(None)


class WorkerShares:
    """The shares of the operator's cap one battle's worker processes hold (:meth:`ProviderLimits.hold_workers`):
    ``slots`` per worker and provider, told to ``on_share`` whenever it changes; :meth:`release` when the workers
    stop."""

    def __init__(self, owner: ProviderLimits, processes: int, on_share: Callable[[int], None]) -> None:
        self._owner = owner
        self.processes = processes
        self.slots = 0
        self._on_share = on_share

    def _tell(self, slots: int) -> None:
        if slots == self.slots:
            return
        self.slots = slots
        try:
            self._on_share(slots)
        except Exception:  # a worker that cannot be told is stopping: its battle's pool notices the death
            log.exception("could not tell a battle's workers their provider share")

    def release(self) -> None:
        """The workers stopped: their shares go back to the others (idempotent)."""
        self._owner._release(self)


class ProviderLimits:
    """Every provider's limiter of one green agent (or one of its worker processes: ``workers``)."""

    def __init__(
        self,
        *,
        max_concurrency: int = DEFAULT_PROVIDER_MAX_CONCURRENCY,
        workers: int = 1,
        max_pause_s: float = MAX_PAUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= max_concurrency <= MAX_PROVIDER_CONCURRENCY:
            raise ValueError(f"max_concurrency: between 1 and {MAX_PROVIDER_CONCURRENCY} (got {max_concurrency})")
        if workers < 1:
            raise ValueError(f"workers: at least 1 (got {workers})")
        self.max_concurrency = max_concurrency
        """The operator's cap per provider (for the whole green agent, or the whole pool: :meth:`set_divisor`)."""
        self.workers = workers
        self.per_process = max(1, max_concurrency // workers)
        """This process's share of it (:meth:`set_share`)."""
        self._max_pause_s = max_pause_s
        self._clock = clock
        self._limiters: OrderedDict[tuple[str, str], ProviderLimiter] = OrderedDict()
        self.divisor = 1
        """Green agents the operator's cap is divided between (the live members of this agent's pool; 1 alone)."""
        self._held: list[WorkerShares] = []

    @property
    def part(self) -> int:
        """This green agent's part of the operator's cap: ``max(1, cap // divisor)``."""
        return max(1, self.max_concurrency // self.divisor)

    def set_share(self, slots: int) -> None:
        """This process may have ``slots`` calls in flight per provider from now on (at least 1, at most the
        operator's cap), and each battle the same fraction of its own cap; every limiter follows at once (waiters
        are never stranded: a grown share serves them now, a shrunk one after the calls in flight)."""
        self.per_process = max(1, min(slots, self.max_concurrency))
        for limiter in self._limiters.values():
            limiter.resize(self.per_process)

    def set_divisor(self, members: int) -> None:
        """Divide the operator's cap between ``members`` green agents (a pool: each gets ``max(1, cap // members)``,
        shared as :meth:`hold_workers` says by this agent's own processes)."""
        self.divisor = max(1, members)
        self._rebalance()

    def hold_workers(self, processes: int, on_share: Callable[[int], None]) -> WorkerShares:
        """Shares for a battle's ``processes`` worker processes, until :meth:`WorkerShares.release`. Each live worker
        of every battle gets ``max(1, part // W)`` (W: all live workers), the serving process keeps the rest (at
        least 1): the sum never exceeds the part, except that every process keeps at least one slot. The other
        battles' workers are told their new share (``on_share``) before this returns."""
        if processes < 1:
            raise ValueError(f"processes: at least 1 (got {processes})")
        held = WorkerShares(self, processes, on_share)
        self._held.append(held)
        self._rebalance()
        return held

    def _release(self, held: WorkerShares) -> None:
        if held in self._held:
            self._held.remove(held)
            self._rebalance()

    def _rebalance(self) -> None:
        workers = sum(h.processes for h in self._held)
        if not workers:
            self.set_share(self.part)
            return
        each = max(1, self.part // workers)
        self.set_share(max(1, self.part - each * workers))  # shrink here first, then tell the workers
        for held in list(self._held):
            held._tell(each)

    def limiter(self, base_url: str | None, model: str) -> ProviderLimiter:
        """The shared limiter of (``base_url``, ``model``), made on first use."""
        key = ((base_url or DEFAULT_BASE_URL).rstrip("/").lower(), model)
        found = self._limiters.get(key)
        if found is not None:
            self._limiters.move_to_end(key)
            return found
        if len(self._limiters) >= MAX_PROVIDERS:
            for old_key, old in list(self._limiters.items()):
                if old.in_flight == 0 and not old._waiters:
                    del self._limiters[old_key]
                    break
        made = ProviderLimiter(
            f"{model} at {key[0]}", max_concurrency=self.per_process, max_pause_s=self._max_pause_s, clock=self._clock
        )
        self._limiters[key] = made
        return made

    def for_battle(self, base_url: str | None, model: str, cap: int | None) -> BattleLimiter:
        """A battle's limiter for a provider; ``cap`` (the battle's ``provider_max_concurrency``) may lower the
        operator's cap, never raise it (ConfigError naming the field). Shared like the operator's: each process
        lets ``max(1, cap * share // operator cap)`` of the battle's calls in flight, read on every call."""
        from green_agent.engine.config import ConfigError

        if cap is not None and cap > self.max_concurrency:
            raise ConfigError(
                f"provider_max_concurrency: at most {self.max_concurrency} on this green agent (its operator's "
                f"--provider-max-concurrency); a battle may lower it, not raise it (got {cap})"
            )
        if cap is None:
            return BattleLimiter(self.limiter(base_url, model), None)
        return BattleLimiter(self.limiter(base_url, model), cap, lambda: cap * self.per_process // self.max_concurrency)

    def for_user(self, config: BattleConfig) -> BattleLimiter | None:
        """The limiter of a battle's LLM user simulator (None for the scripted user, which calls no model)."""
        user = config.user_simulator
        if user.kind != "llm":
            return None
        return self.for_battle(user.base_url, user.model, config.provider_max_concurrency)
