"""Retries of calls to OpenAI-compatible endpoints: the one retry loop of the LLM judge and the LLM user simulator.

Why not the openai SDK's own ``max_retries``: both callers need what it cannot give. The judge spends one retry
budget on all the calls it makes for an item (a fallback from structured output or a re-ask after an invalid answer
does not reset it) and counts every call for its "unscored after N attempt(s)" reasons; the user simulator also
retries an answer with neither text nor tool calls. Both cap their delays themselves (the SDK's are fixed at
0.5-8 s, and it follows a Retry-After of up to two minutes), and they retry different statuses: which failures are
transient is the caller's choice (:func:`is_transient` with its ``statuses``). When the budget runs out the last
error is raised as it is, and each caller turns it into its own outcome (a ``UserSimulatorError``, an unscored
item), so the loop itself blames nobody.

With a ``limiter`` (a provider's shared :class:`~green_agent.provider_limits.ProviderLimiter`, through a battle's
:class:`~green_agent.provider_limits.BattleLimiter`), every try waits for a slot of the provider and its 429s slow
every caller of that provider down (green_agent/provider_limits.py); :attr:`RetryBudget.rate_limited` counts them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container
from typing import Literal, Protocol, TypeVar

T = TypeVar("T")


class CallLimiter(Protocol):
    """What a retry loop needs: run one call under the limit (green_agent/provider_limits.py implements it; the
    protocol lives with its consumer so that the two modules do not import each other)."""

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` once a slot is free (and any pause is over); the outcome adjusts the limit."""
        ...


def is_transient(error: BaseException, *, statuses: Container[int] = (429,)) -> bool:
    """Worth another try: connection errors and timeouts, 5xx answers, and the 4xx ``statuses`` (429 by default)."""
    import openai  # here, not at the top: only LLM paths call this, and the green agent's start-up skips ~0.7 s

    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code >= 500 or error.status_code in statuses
    return False


def retry_after_s(error: BaseException) -> float | None:
    """The server's Retry-After hint in seconds (``retry-after-ms`` first), when the error's response has one."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue
    return None


class RetryBudget:
    """Transient failures retried with exponential backoff, for every call of one job (one item, one user turn).

    The pause before retry ``n`` (0-based) is ``backoff_base_s * 2**n``, capped at ``backoff_max_s``. A server's
    Retry-After is honoured and capped the same way: ``retry_after="at_least"`` waits at least that long,
    ``"instead"`` waits exactly that long instead of the backoff. ``on_retry(error, retry_number, delay_s)`` is
    called before each pause (to log it). :attr:`calls` counts every call made, :attr:`retries` the retries spent,
    :attr:`rate_limited` the HTTP 429 answers among the failures. ``limiter``: each call runs under it.
    """

    def __init__(
        self,
        *,
        max_retries: int,
        backoff_base_s: float,
        backoff_max_s: float,
        transient: Callable[[BaseException], bool] = is_transient,
        retry_after: Literal["at_least", "instead"] = "at_least",
        on_retry: Callable[[Exception, int, float], None] | None = None,
        limiter: CallLimiter | None = None,
    ) -> None:
        self.max_retries = max_retries
        self._base_s = backoff_base_s
        self._max_s = backoff_max_s
        self._transient = transient
        self._retry_after = retry_after
        self._on_retry = on_retry
        self._limiter = limiter
        self.calls = 0
        self.retries = 0
        self.rate_limited = 0

    def delay_s(self, error: BaseException) -> float:
        """The pause before the next retry after ``error``."""
        backoff = self._base_s * 2**self.retries
        hint = retry_after_s(error)
        if hint is None:
            return float(min(self._max_s, backoff))
        return float(min(self._max_s, hint if self._retry_after == "instead" else max(backoff, hint)))

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()``, again after each transient failure while retries are left; otherwise its error is raised."""
        while True:
            self.calls += 1
            try:
                return await (fn() if self._limiter is None else self._limiter.run(fn))
            except Exception as error:
                if getattr(error, "status_code", None) == 429:
                    self.rate_limited += 1
                if not self._transient(error) or self.retries >= self.max_retries:
                    raise
                delay = self.delay_s(error)
                self.retries += 1
                if self._on_retry is not None:
                    self._on_retry(error, self.retries, delay)
                await asyncio.sleep(delay)
