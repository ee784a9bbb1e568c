"""Cost and latency: where an attempt's time went and what its model calls cost, summed over a battle.

Why a module of its own: the attempt loop only starts and stops clocks and hands over what the parties reported
(:class:`AttemptMeter`); everything that turns that into numbers (percentiles, sums, prices) is pure and lives
here, so it is tested with hand-computed values and shared by the markdown summary and ``arena compare``.

Sources, and how far each is trusted:

* **times** come from the green agent's own clock: each A2A round trip to the white agent (its turn latency), each
  call of the simulated user, and the rest of the attempt (the harness: environment, parsing, the agent's text-mode
  tool calls, scoring);
* **user-simulator tokens** come from the ``usage`` of every chat completion the LLM user received (the provider
  the operator chose); a provider that also sends ``usage.cost`` (OpenRouter does) is taken at its word, otherwise
  the cost is tokens x the battle's price table (``config.prices``, keyed by model name);
* **agent tokens** are what the white agent reports about itself in its reply message's metadata under
  :data:`AGENT_USAGE_KEY` (docs/results.md, "Cost and latency"). That is hostile input: it is validated by
  :class:`ReportedUsage` (bounded, non-negative, whole token counts), anything malformed is ignored and counted as
  not reported, and nothing of it ever reaches a verdict.

A cost is ``None`` (shown "n/a") unless it is known for every call it covers; it is never a guess and never a 0
that stands for "unknown". Costs cover the calls that were answered: a request that failed or timed out returned
no usage (providers do not bill those; an agent whose turn failed reported nothing). A party with no answered call
in an attempt has no cost there (n/a, not $0) and adds nothing to the battle's.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, ValidationError

from green_agent.engine.config import MAX_MODEL_NAME_CHARS, BattleConfig, ModelPrice
from green_agent.engine.results import (
    AttemptResult,
    AttemptUsage,
    BattleResult,
    BattleUsage,
    CostSource,
    LatencySummary,
    TokenUsage,
)

AGENT_USAGE_KEY: Final = "arena/usage"
"""The A2A message metadata key under which a white agent may report what its reply cost:
``{"prompt_tokens": int, "completion_tokens": int, "cost_usd": float (optional), "model": str (optional)}``."""
MAX_TOKENS: Final = 10**12
"""Token counts must be below this (one reply, one completion)."""
MAX_COST_USD: Final = 10.0**6
"""Reported costs must be below this (US dollars, one reply, one completion)."""


def _whole(value: Any) -> int:
    """A whole number, also one that travelled as a double (A2A metadata is a protobuf Struct: 12 arrives as 12.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a whole number")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError("expected a whole number")
        return int(value)
    return value


def _amount(value: Any) -> float:
    """A finite number (bools and strings refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a number")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("number too large") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


Tokens = Annotated[int, BeforeValidator(_whole), Field(ge=0, lt=MAX_TOKENS)]
Dollars = Annotated[float, BeforeValidator(_amount), Field(ge=0, lt=MAX_COST_USD)]


class ReportedUsage(BaseModel):
    """What one model call (or one agent reply) cost, as reported: validated, bounded, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    prompt_tokens: Tokens
    completion_tokens: Tokens
    cost_usd: Dollars | None = None
    """When given, the cost itself (else the price table prices the tokens)."""
    model: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    """Agents only: the model the tokens are priced at (the price table's key)."""


def provider_usage(usage: Any) -> ReportedUsage | None:
    """The ``usage`` of an OpenAI-compatible chat completion (``response.usage``), or None when it has none usable.

    ``usage.cost`` (a provider extension, in US dollars) is kept when valid; an invalid one is dropped, the tokens
    kept."""
    if usage is None:
        return None
    fields = {name: getattr(usage, name, None) for name in ("prompt_tokens", "completion_tokens")}
    cost = getattr(usage, "cost", None)
    for attempt in ({**fields, "cost_usd": cost}, fields) if cost is not None else (fields,):
        with contextlib.suppress(ValidationError):
            return ReportedUsage.model_validate(attempt)
    return None


@dataclass
class UsageMeter:
    """One party's model usage over one attempt: a running sum, summarised by :meth:`token_usage`."""

    calls: int = 0
    reported: int = 0
    malformed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported_cost_usd: float = 0.0
    reported_cost_calls: int = 0
    unpriced: dict[str | None, list[int]] = field(default_factory=dict)
    """Model (None: the party's own) -> [prompt, completion] tokens of the calls that reported no cost."""
    rate_limited: int = 0
    """HTTP 429 answers (the LLM user's provider; retried, never billed)."""
    retries: int = 0
    """Failed calls retried."""

    def record(self, usage: ReportedUsage | None, *, malformed: bool = False) -> None:
        """One answered call and what it reported (None: nothing usable)."""
        self.calls += 1
        if usage is None:
            self.malformed += int(malformed)
            return
        self.reported += 1
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        if usage.cost_usd is not None:
            self.reported_cost_usd += usage.cost_usd
            self.reported_cost_calls += 1
        else:
            tokens = self.unpriced.setdefault(usage.model, [0, 0])
            tokens[0] += usage.prompt_tokens
            tokens[1] += usage.completion_tokens

    def record_reported(self, value: Any) -> None:
        """One agent reply and the value it had under :data:`AGENT_USAGE_KEY` (None: the key was absent)."""
        if value is None:
            self.record(None)
            return
        try:
            usage = ReportedUsage.model_validate(value)
        except ValidationError:
            self.record(None, malformed=True)
            return
        self.record(usage)

    def token_usage(self, prices: Mapping[str, ModelPrice], model: str | None = None) -> TokenUsage:
        """The sums, priced: ``model`` is the party's own model (the user simulator's), used for calls naming none.
        No call, no cost: None (not 0), so that an attempt that never got a reply shows n/a."""
        priced, known = 0.0, 0 < self.calls == self.reported
        for name, (prompt, completion) in self.unpriced.items():
            price = prices.get(name if name is not None else model or "")
            if price is None:
                known = False
            else:
                priced += price.cost_usd(prompt, completion)
        sources: set[CostSource] = set()
        if self.reported_cost_calls:
            sources.add("reported")
        if self.unpriced:
            sources.add("price_table")
        return TokenUsage(
            calls=self.calls,
            reported=self.reported,
            malformed=self.malformed,
            prompt_tokens=self.prompt_tokens if self.reported else None,
            completion_tokens=self.completion_tokens if self.reported else None,
            cost_usd=round(self.reported_cost_usd + priced, 9) if known else None,
            cost_source=_source(sources),
            rate_limited=self.rate_limited,
            retries=self.retries,
        )


def _source(sources: set[CostSource]) -> CostSource | None:
    if not sources:
        return None
    return next(iter(sources)) if len(sources) == 1 else "mixed"


class AttemptMeter:
    """The clocks and counters of one attempt, kept by the attempt loop (green_agent/engine/attempt.py)."""

    def __init__(self) -> None:
        self.agent_s = 0.0
        self.user_s = 0.0
        self.latencies: list[float] = []
        self.agent = UsageMeter()
        self._last_round_trip_s = 0.0

    @contextlib.contextmanager
    def waiting_on_agent(self) -> Iterator[None]:
        """Times one round trip to the white agent (counted in ``agent_s`` also when it fails)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._last_round_trip_s = time.perf_counter() - start
            self.agent_s += self._last_round_trip_s

    def agent_replied(self, reported_usage: Any) -> None:
        """The round trip just timed returned a reply: its latency counts, and what it reported about its cost."""
        self.latencies.append(round(self._last_round_trip_s, 4))
        self.agent.record_reported(reported_usage)

    @contextlib.contextmanager
    def waiting_on_user(self) -> Iterator[None]:
        """Times one turn of the simulated user."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.user_s += time.perf_counter() - start

    def usage(self, config: BattleConfig, user_meter: UsageMeter | None, *, duration_s: float) -> AttemptUsage:
        """The attempt's :class:`AttemptUsage`: the harness had what the agent and the user did not of
        ``duration_s``; the user's model usage is ``user_meter`` (None: a user that calls no model)."""
        return AttemptUsage(
            agent_turn_latencies_s=list(self.latencies),
            agent_latency=latency_summary(self.latencies),
            agent_s=round(self.agent_s, 4),
            user_s=round(self.user_s, 4),
            harness_s=round(max(0.0, duration_s - self.agent_s - self.user_s), 4),
            agent=self.agent.token_usage(config.prices),
            user=user_meter.token_usage(config.prices, config.user_simulator.model) if user_meter else None,
        )


def latency_summary(latencies: Sequence[float]) -> LatencySummary:
    """Count, median, 95th percentile (numpy's linear interpolation) and maximum, in seconds."""
    if not latencies:
        return LatencySummary()
    p50, p95 = np.percentile(np.asarray(latencies, dtype=float), [50, 95])
    return LatencySummary(
        count=len(latencies), p50_s=round(float(p50), 4), p95_s=round(float(p95), 4), max_s=round(max(latencies), 4)
    )


def merge_token_usage(parts: Sequence[TokenUsage]) -> TokenUsage:
    """Several attempts' usage of one party as one: counts and tokens summed; the cost only if it is known for every
    part that had a call (a part without any, e.g. an attempt whose first turn timed out, adds nothing)."""
    reported = sum(p.reported for p in parts)
    costs = [p.cost_usd for p in parts if p.calls > 0]
    return TokenUsage(
        calls=sum(p.calls for p in parts),
        reported=reported,
        malformed=sum(p.malformed for p in parts),
        prompt_tokens=sum(p.prompt_tokens or 0 for p in parts) if reported else None,
        completion_tokens=sum(p.completion_tokens or 0 for p in parts) if reported else None,
        cost_usd=None if not costs or any(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 9),
        cost_source=_source({p.cost_source for p in parts if p.cost_source is not None}),
        rate_limited=sum(p.rate_limited for p in parts),
        retries=sum(p.retries for p in parts),
    )


def battle_usage(attempts: Sequence[AttemptResult]) -> BattleUsage | None:
    """The battle's cost and latency from its attempts (None when no attempt carries usage: older results)."""
    usages = [a.usage for a in attempts if a.usage is not None]
    if not usages:
        return None
    agent = merge_token_usage([u.agent for u in usages])
    users = [u.user for u in usages if u.user is not None]
    user = merge_token_usage(users) if users else None
    parts = [agent.cost_usd] + ([user.cost_usd] if user is not None else [])
    return BattleUsage(
        attempts=len(usages),
        agent_latency=latency_summary([s for u in usages for s in u.agent_turn_latencies_s]),
        agent_s=round(sum(u.agent_s for u in usages), 4),
        user_s=round(sum(u.user_s for u in usages), 4),
        harness_s=round(sum(u.harness_s for u in usages), 4),
        agent=agent,
        user=user,
        total_cost_usd=None if any(c is None for c in parts) else round(sum(c or 0.0 for c in parts), 9),
    )


# --- views: the markdown section, the per-attempt line, arena compare --------------------------------------------
def format_usd(value: float | None) -> str:
    """``$0.0123``; small amounts keep their digits (``$0.000042``); ``n/a`` when unknown."""
    if value is None:
        return "n/a"
    return f"${value:,.4f}" if value >= 0.01 or value == 0 else f"${value:.6f}"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def format_tokens(usage: TokenUsage | None, *, what: str) -> str:
    """``1,234 prompt + 56 completion (12/12 replies reported)``; says so when nothing was reported."""
    if usage is None:
        return "none (scripted user: no model)"
    if usage.prompt_tokens is None or usage.completion_tokens is None:
        detail = f", {usage.malformed} malformed" if usage.malformed else ""
        return f"not reported (0/{usage.calls} {what}{detail})"
    detail = f", {usage.malformed} malformed" if usage.malformed else ""
    return (
        f"{usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} completion "
        f"({usage.reported}/{usage.calls} {what} reported{detail})"
    )


def format_cost(usage: TokenUsage | None) -> str:
    """The cost and where it comes from."""
    if usage is None:
        return "none (scripted user: no model)"
    source = {"reported": "reported", "price_table": "price table", "mixed": "reported + price table"}
    suffix = f" ({source[usage.cost_source]})" if usage.cost_source and usage.cost_usd is not None else ""
    return format_usd(usage.cost_usd) + suffix


def cost_rows(usage: BattleUsage | None) -> list[tuple[str, str]]:
    """(label, value) rows of a battle's cost and latency: the markdown table's and ``arena compare``'s."""
    latency = usage.agent_latency if usage is not None else LatencySummary()
    rows = [
        (
            "white agent turn latency p50 / p95 / max",
            f"{_seconds(latency.p50_s)} / {_seconds(latency.p95_s)} / {_seconds(latency.max_s)} "
            f"({latency.count} turns)",
        )
    ]
    if usage is None:
        return [
            *rows,
            ("time in white agent / user simulator / harness", "n/a"),
            ("white agent tokens", "n/a"),
            ("white agent cost", "n/a"),
            ("user simulator tokens", "n/a"),
            ("user simulator cost", "n/a"),
            ("total cost", "n/a"),
        ]
    return [
        *rows,
        (
            "time in white agent / user simulator / harness",
            f"{_seconds(usage.agent_s)} / {_seconds(usage.user_s)} / {_seconds(usage.harness_s)}",
        ),
        ("white agent tokens", format_tokens(usage.agent, what="replies")),
        ("white agent cost", format_cost(usage.agent)),
        ("user simulator tokens", format_tokens(usage.user, what="calls")),
        ("user simulator cost", format_cost(usage.user)),
        ("total cost", format_usd(usage.total_cost_usd)),
    ]


def cost_markdown(result: BattleResult) -> list[str]:
    """The summary's "Cost and latency" section (no lines for results written before usage existed)."""
    if result.usage is None:
        return []
    lines = [
        "## Cost and latency",
        "",
        f"Over {result.usage.attempts} attempt(s). Times are summed over attempts (they may run concurrently); "
        "agent tokens are what the agent reported in `arena/usage` (unverified); a cost is n/a unless known for "
        "every call (provider-reported, agent-reported, or tokens x `config.prices`).",
        "",
        "| measure | value |",
        "|---|---|",
    ]
    lines += [f"| {label} | {value} |" for label, value in cost_rows(result.usage)]
    user = result.usage.user
    if user is not None and (user.rate_limited or user.retries):
        lines += [
            "",
            f"The user simulator's provider answered HTTP 429 (rate limited) {user.rate_limited} time(s); "
            f"{user.retries} failed call(s) were retried (green_agent/provider_limits.py). None of it is the agent's.",
        ]
    return [*lines, ""]


def attempt_cost_line(attempt: AttemptResult) -> str | None:
    """One attempt's time and cost, for its line in the per-task section (None without usage)."""
    usage = attempt.usage
    if usage is None:
        return None
    latency = usage.agent_latency
    turns = f"{latency.count} turn" + ("" if latency.count == 1 else "s")
    if latency.max_s is not None:
        turns += f", max {latency.max_s:.3f} s"
    cost = (
        format_usd(usage.agent.cost_usd)
        if usage.user is None
        else f"agent {format_usd(usage.agent.cost_usd)}, user {format_usd(usage.user.cost_usd)}"
    )
    return (
        f"time: agent {usage.agent_s:.3f} s ({turns}), user {usage.user_s:.3f} s, harness {usage.harness_s:.3f} s; "
        f"cost: {cost}"
    )


def compare_cost_rows(a: BattleResult, b: BattleResult) -> list[tuple[str, str, str]]:
    """Cost and latency of two battles side by side, ``(label, value of a, value of b)`` (for ``arena compare``)."""
    left, right = cost_rows(a.usage), cost_rows(b.usage)
    return [(label, value_a, value_b) for (label, value_a), (_label, value_b) in zip(left, right, strict=True)]
