"""Running a CSV suite live against a white agent over A2A, as a stream of events.

Each test case's query goes to the agent as a new A2A message in a fresh context (no case sees another's history),
at most ``concurrency`` at a time, each within ``case_timeout_s``. The agent reports its tool calls in a data part
``{"tool_calls": [{"name", "arguments", "result"}, ...]}``; a reply without it is scored as having called no tool,
with a note saying the trace was missing. Scores per case are FinAgent's
(:func:`green_agent.statistics.finagent_case_score`):
tool selection, argument match and the judge's faithfulness, overall = their mean, passed when overall >= 0.7.

Outcomes per case: ``passed`` / ``failed``; ``errored`` when the agent could not be reached, timed out or reported a
failure; ``unscored`` when the judge could not score faithfulness (the reason is kept). Every case stays in the totals.

Events, in order per case (cases interleave when concurrency > 1):
    test_case_start   {test_id, index, total, row, query}
    test_case_result  {test_id, index, total, row, status, scores{...}, expected_tools, actual_tool_calls, response,
                       judge_explanation, judge, notes, error, duration_ms}
then once:
    summary           {total, passed, failed, errored, unscored, pass_rate, ..., judge, agent_url, wall_time_s}
or, when the suite cannot run at all (agent card unreachable, harness failure):
    error             {message}
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from green_agent.engine.capped_transport import capped_http_client
from green_agent.engine.white_client import DEFAULT_MAX_REPLY_BYTES, WhiteAgentClient, WhiteAgentError, WhiteReply
from green_agent.evaluations.csv_suite import CsvCase, CsvSuite
from green_agent.evaluations.judge import Judge, JudgeOutcome
from green_agent.evaluations.metrics import (
    FinAgentCaseScore,
    finagent_case_score,
    finagent_errored_case,
    summarize_finagent,
)
from green_agent.evaluations.prompts import RESPONSE_FAITHFULNESS

logger = logging.getLogger(__name__)

MAX_TOOL_CALLS = 256
MISSING_TRACE_NOTE = (
    "trace missing: the reply had no tool_calls data part, so the agent is scored as having called "
    "no tool (tool selection and argument match 0 when tools were expected)"
)


class CsvRunOptions(BaseModel):
    """How a suite runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=4, ge=1, le=32)
    case_timeout_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    pass_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    max_reply_bytes: int = Field(default=DEFAULT_MAX_REPLY_BYTES, ge=1024)
    """Largest reply read from the agent for one case; a larger one errors the case (memory stays bounded)."""
    max_tool_calls: int = Field(default=MAX_TOOL_CALLS, ge=1)
    """Tool calls of one reply that are scored; the rest are dropped with a note (matching is cubic)."""


Event = tuple[str, dict[str, Any]]


def _plain_number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _plain_numbers(value: Any) -> Any:
    """Integral floats back to ints (A2A data parts turn every number into a float). Iterative: the value comes
    from the agent under test, and hostile nesting must not exhaust the recursion limit."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, dict):
            copy: dict[Any, Any] = {}
            parent[key] = copy
            for k, v in item.items():
                copy[k] = None
                stack.append((v, copy, k))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[key] = items
            stack.extend((v, items, i) for i, v in enumerate(item))
        else:
            parent[key] = _plain_number(item)
    return root[0]


def extract_tool_calls(reply: WhiteReply) -> list[dict[str, Any]] | None:
    """The ``tool_calls`` list of the reply's data parts (merged in order), or None when no part carries one."""
    found: list[dict[str, Any]] | None = None
    for part in reply.data_parts:
        calls = part.get("tool_calls") if isinstance(part, Mapping) else None
        if not isinstance(calls, list):
            continue
        found = found or []
        for call in calls:
            if isinstance(call, Mapping) and isinstance(call.get("name"), str) and call.get("name"):
                arguments = call.get("arguments", call.get("args", {}))
                found.append(
                    {
                        "name": call["name"],
                        "arguments": _plain_numbers(arguments if isinstance(arguments, Mapping) else {}),
                        "result": _plain_numbers(call.get("result")),
                    }
                )
    return found


def _reply_calls(reply: WhiteReply, max_calls: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The reply's tool calls (at most ``max_calls``) and the notes about them."""
    calls = extract_tool_calls(reply)
    if calls is None:
        return [], [MISSING_TRACE_NOTE]
    if len(calls) > max_calls:
        note = f"the reply reported {len(calls)} tool calls; only the first {max_calls} are scored (max_tool_calls)"
        return calls[:max_calls], [note]
    return calls, []


def _scores(case: FinAgentCaseScore) -> dict[str, float | None]:
    return {
        "tool_selection": case.tool_selection,
        "argument_match": case.argument_match,
        "faithfulness": case.faithfulness,
        "overall": case.overall,
    }


async def _run_case(
    case: CsvCase, index: int, total: int, client: WhiteAgentClient, judge: Judge, options: CsvRunOptions
) -> tuple[dict[str, Any], FinAgentCaseScore, bool]:
    """One case: ask, score. Returns (result event data, the case score for the summary, unscored?)."""
    started = time.perf_counter()
    expected = [{"name": e.name, "arguments": e.arguments} for e in case.expected_tools]
    base: dict[str, Any] = {
        "test_id": case.test_id,
        "index": index,
        "total": total,
        "row": case.row,
        "query": case.query,
        "expected_tools": expected,
        "expected_keywords": case.expected_keywords,
        "pass_threshold": options.pass_threshold,
    }
    try:
        reply = await client.send(context_id=f"csv-{uuid.uuid4().hex}", text=case.query)
    except WhiteAgentError as error:
        score = finagent_errored_case(error.detail, case_id=case.test_id, pass_threshold=options.pass_threshold)
        return (
            {
                **base,
                "status": "errored",
                "scores": _scores(score),
                "actual_tool_calls": [],
                "response": None,
                "judge_explanation": None,
                "judge": None,
                "notes": [],
                "error": error.detail,
                "duration_ms": round(1000 * (time.perf_counter() - started), 1),
            },
            score,
            False,
        )
    # The reply is up to max_reply_bytes of the agent's data: walking and scoring it is CPU work, off the loop.
    calls, notes = await asyncio.to_thread(_reply_calls, reply, options.max_tool_calls)
    outcomes = await judge.evaluate_many(
        RESPONSE_FAITHFULNESS,
        [
            {
                "query": case.query,
                "response": reply.text,
                "expected_keywords": case.expected_keywords,
                "tool_calls": calls,
            }
        ],
    )
    outcome: JudgeOutcome = outcomes[0]
    common = {
        **base,
        "actual_tool_calls": calls,
        "response": reply.text,
        "notes": notes,
        "judge": outcome.judge.model_dump(),
        "judge_cached": outcome.cached,
    }
    if outcome.status != "scored" or outcome.answer is None:
        partial = await asyncio.to_thread(
            finagent_case_score,
            expected,
            calls,
            faithfulness=0.0,
            case_id=case.test_id,
            pass_threshold=options.pass_threshold,
        )
        reason = outcome.reason or "the judge could not score faithfulness"
        score = finagent_errored_case(
            f"unscored: {reason}", case_id=case.test_id, pass_threshold=options.pass_threshold
        )
        return (
            {
                **common,
                "status": "unscored",
                "scores": {
                    "tool_selection": partial.tool_selection,
                    "argument_match": partial.argument_match,
                    "faithfulness": None,
                    "overall": None,
                },
                "judge_explanation": None,
                "error": reason,
                "duration_ms": round(1000 * (time.perf_counter() - started), 1),
            },
            score,
            True,
        )
    faithfulness = float(outcome.answer["score"])
    score = await asyncio.to_thread(
        finagent_case_score,
        expected,
        calls,
        faithfulness=faithfulness,
        case_id=case.test_id,
        pass_threshold=options.pass_threshold,
    )
    return (
        {
            **common,
            "status": score.status,
            "scores": _scores(score),
            "judge_explanation": outcome.answer.get("explanation"),
            "error": None,
            "argument_pairs": [p.model_dump() for p in score.match.pairs] if score.match else [],
            "duration_ms": round(1000 * (time.perf_counter() - started), 1),
        },
        score,
        False,
    )


def summarize(
    scores: list[FinAgentCaseScore], unscored: int, *, judge: Judge, agent_url: str, wall_time_s: float
) -> dict[str, Any]:
    """The summary event: FinAgent totals with unscored cases counted apart from agent errors."""
    summary = summarize_finagent(scores)
    return {
        "total": summary.total,
        "passed": summary.passed,
        "failed": summary.failed,
        "errored": summary.errored - unscored,
        "unscored": unscored,
        "pass_rate": summary.pass_rate,
        "pass_rate_ci_low": summary.pass_rate_ci_low,
        "pass_rate_ci_high": summary.pass_rate_ci_high,
        "mean_tool_selection": summary.mean_tool_selection,
        "mean_argument_match": summary.mean_argument_match,
        "mean_faithfulness": summary.mean_faithfulness,
        "mean_overall": summary.mean_overall,
        "note": "pass_rate = passed / total: errored and unscored cases stay in the denominator",
        "judge": judge.describe(),
        "agent_url": agent_url,
        "wall_time_s": round(wall_time_s, 3),
        "cases_per_s": round(summary.total / wall_time_s, 2) if wall_time_s > 0 else None,
    }


async def run_csv_suite(
    suite: CsvSuite,
    agent_url: str,
    judge: Judge,
    *,
    options: CsvRunOptions | None = None,
    httpx_client: httpx.AsyncClient | None = None,
) -> AsyncIterator[Event]:
    """Yield the run's events (see the module docstring). Closing the generator cancels the cases in flight."""
    options = options or CsvRunOptions()
    started = time.perf_counter()
    total = len(suite.cases)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    results: list[tuple[FinAgentCaseScore, bool] | None] = [None] * total
    own_http = httpx_client is None
    http = httpx_client or capped_http_client(
        max_bytes=options.max_reply_bytes,
        max_connections=max(10, 2 * options.concurrency),
        timeout_s=options.case_timeout_s,
    )
    semaphore = asyncio.Semaphore(options.concurrency)
    try:
        async with WhiteAgentClient(agent_url, httpx_client=http, turn_timeout_s=options.case_timeout_s) as client:
            try:
                await client.connect()
            except WhiteAgentError as error:
                yield "error", {"message": f"cannot run the suite: {error.detail}", "agent_url": agent_url}
                return

            async def worker(index: int, case: CsvCase) -> None:
                async with semaphore:
                    await queue.put(
                        (
                            "test_case_start",
                            {
                                "test_id": case.test_id,
                                "index": index,
                                "total": total,
                                "row": case.row,
                                "query": case.query,
                            },
                        )
                    )
                    data, score, unscored = await _run_case(case, index, total, client, judge, options)
                    results[index] = (score, unscored)
                    await queue.put(("test_case_result", data))

            async def drive() -> None:
                try:
                    async with asyncio.TaskGroup() as group:
                        for index, case in enumerate(suite.cases):
                            group.create_task(worker(index, case))
                finally:
                    await queue.put(None)

            driver = asyncio.create_task(drive())
            try:
                while (event := await queue.get()) is not None:
                    yield event
                await driver  # re-raise a harness failure from the workers
            except BaseException:
                driver.cancel()
                await asyncio.wait([driver])
                raise
    except Exception as error:
        logger.exception("CSV suite run failed")
        yield "error", {"message": f"the suite run failed in the harness: {type(error).__name__}: {error}"}
        return
    finally:
        if own_http:
            await http.aclose()
    done = [r for r in results if r is not None]
    yield (
        "summary",
        summarize(
            [s for s, _u in done],
            sum(1 for _s, u in done if u),
            judge=judge,
            agent_url=agent_url,
            wall_time_s=time.perf_counter() - started,
        ),
    )
