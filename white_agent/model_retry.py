"""Retries of the reference agents' model calls (the ``llm`` agent and the ``finance-llm`` mode), with tenacity.

Why not the openai SDK's own ``max_retries``: the agents' settings choose the delays (``retry_base_delay_s``, and
``retry_max_delay_s`` for the llm agent; tests set them to 0), where the SDK's are fixed at 0.5-8 s with jitter, and
the SDK also retries 408 and 409. Why not the green agent's loop: the white agents are standalone examples and import
nothing from ``green_agent``.

Retried: HTTP 429, 5xx, connection errors and timeouts, up to ``max_retries`` times; any other error, and the last
one, is raised unchanged (the agent turns it into its own failure report).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base

T = TypeVar("T")


def is_retryable(error: BaseException) -> bool:
    """HTTP 429, 5xx, connection errors and timeouts."""
    if isinstance(error, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return False


def retry_after_s(error: BaseException | None) -> float | None:
    """The server's Retry-After hint in seconds (``retry-after-ms`` first), when it sent a usable one."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue
    return None


class _Backoff(wait_base):
    """``base_s * 2**n`` before retry ``n`` (0-based), capped at ``max_s``; at least a Retry-After hint, also capped."""

    def __init__(self, base_s: float, max_s: float, honour_retry_after: bool) -> None:
        self._base_s = base_s
        self._max_s = max_s
        self._honour_retry_after = honour_retry_after

    def __call__(self, retry_state: RetryCallState) -> float:
        delay = min(self._max_s, self._base_s * 2 ** (retry_state.attempt_number - 1))
        if self._honour_retry_after and retry_state.outcome is not None:
            hint = retry_after_s(retry_state.outcome.exception())
            if hint is not None:
                delay = min(self._max_s, max(delay, hint))
        return float(delay)


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    base_delay_s: float,
    max_delay_s: float = math.inf,
    honour_retry_after: bool = True,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
) -> T:
    """``await call()``, retried as the module docstring says; ``on_retry(error, retry_number, delay_s)`` is called
    before each pause (retry numbers start at 1)."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and error is not None:
            on_retry(error, state.attempt_number, state.upcoming_sleep)

    retrying = AsyncRetrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(max_retries + 1),
        wait=_Backoff(base_delay_s, max_delay_s, honour_retry_after),
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retrying(call)
