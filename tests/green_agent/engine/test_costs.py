"""Cost and latency (green_agent/engine/costs.py): hand-computed percentiles, sums and prices; hostile agent reports
ignored and counted; the views (markdown, arena compare, the backend's rows); one real attempt whose agent reports
usage, some of it malformed, with the verdict unchanged. No assertion is about elapsed time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from battle_backend.views.rendering import Renderer
from battle_backend.views.results import build_result_view, usage_rows
from green_agent.engine.config import (
    BattleConfig,
    ConfigError,
    ModelPrice,
    load_battle_config,
    parse_battle_config,
    parse_remote_battle_config,
)
from green_agent.engine.costs import (
    AGENT_USAGE_KEY,
    ReportedUsage,
    UsageMeter,
    attempt_cost_line,
    battle_usage,
    compare_cost_rows,
    cost_markdown,
    latency_summary,
    merge_token_usage,
    provider_usage,
)
from green_agent.engine.report import render_markdown
from green_agent.engine.results import AttemptResult, AttemptUsage, BattleResult, TokenUsage
from green_agent.engine.white_client import WhiteReply
from tests.green_agent.engine.conftest import MOCK, Arena
from tests.green_agent.engine.fakes import OPENING, ScriptedUser, ScriptedWhite, respond, tool
from tests.green_agent.engine.results.builders import battle_result

PRICES = {"user-model": ModelPrice(input_usd_per_million_tokens=2.0, output_usd_per_million_tokens=8.0)}


# --- percentiles and sums ----------------------------------------------------------------------------------------
def test_latency_summary_is_numpy_s_linear_percentiles() -> None:
    summary = latency_summary([0.4, 0.1, 1.0, 0.3, 0.2])
    # sorted 0.1 0.2 0.3 0.4 1.0: p50 = the middle one; p95 at rank 0.95 * 4 = 3.8: 0.4 + 0.8 * (1.0 - 0.4)
    assert (summary.count, summary.p50_s, summary.p95_s, summary.max_s) == (5, 0.3, 0.88, 1.0)
    assert latency_summary([]).model_dump() == {"count": 0, "p50_s": None, "p95_s": None, "max_s": None}
    assert latency_summary([2.5]).model_dump() == {"count": 1, "p50_s": 2.5, "p95_s": 2.5, "max_s": 2.5}


def test_the_price_table_prices_tokens_and_a_reported_cost_wins() -> None:
    meter = UsageMeter()
    meter.record(ReportedUsage(prompt_tokens=100, completion_tokens=20))
    meter.record(ReportedUsage(prompt_tokens=50, completion_tokens=10))
    usage = meter.token_usage(PRICES, "user-model")
    # (150 x $2 + 30 x $8) per million tokens
    assert (usage.calls, usage.reported, usage.prompt_tokens, usage.completion_tokens) == (2, 2, 150, 30)
    assert usage.cost_usd == pytest.approx(0.00054) and usage.cost_source == "price_table"
    meter.record(ReportedUsage(prompt_tokens=1000, completion_tokens=1000, cost_usd=0.5))  # the provider's own cost
    mixed = meter.token_usage(PRICES, "user-model")
    assert (mixed.prompt_tokens, mixed.completion_tokens) == (1150, 1030)
    assert mixed.cost_usd == pytest.approx(0.50054) and mixed.cost_source == "mixed"


def test_a_cost_is_none_unless_known_for_every_call() -> None:
    meter = UsageMeter()
    assert meter.token_usage(PRICES, "user-model").cost_usd is None  # no call: n/a, not $0
    meter.record(ReportedUsage(prompt_tokens=10, completion_tokens=1))
    assert meter.token_usage({}, "user-model").cost_usd is None  # a model the table does not price
    assert meter.token_usage(PRICES, "other-model").cost_usd is None
    meter.record(None)  # a completion without usage
    usage = meter.token_usage(PRICES, "user-model")
    assert (usage.calls, usage.reported, usage.prompt_tokens, usage.cost_usd) == (2, 1, 10, None)


def test_provider_usage_reads_the_openai_fields_and_a_cost_extension() -> None:
    class Usage:
        prompt_tokens, completion_tokens, cost = 120, 7, 0.0021

    assert provider_usage(Usage()) == ReportedUsage(prompt_tokens=120, completion_tokens=7, cost_usd=0.0021)
    Usage.cost = float("nan")  # a broken cost is dropped, the tokens kept
    assert provider_usage(Usage()) == ReportedUsage(prompt_tokens=120, completion_tokens=7)
    Usage.prompt_tokens = -1
    assert provider_usage(Usage()) is None and provider_usage(None) is None


VALID = {"prompt_tokens": 30.0, "completion_tokens": 4.0, "cost_usd": 0.25, "unknown": "ignored"}
MALFORMED: list[Any] = [
    "not an object",
    [30, 4],
    {"prompt_tokens": -5, "completion_tokens": 1},
    {"prompt_tokens": "12", "completion_tokens": 1},
    {"prompt_tokens": 1.5, "completion_tokens": 1},
    {"prompt_tokens": True, "completion_tokens": 1},
    {"prompt_tokens": 10**12, "completion_tokens": 1},
    {"prompt_tokens": 1e300, "completion_tokens": 1},
    {"prompt_tokens": float("inf"), "completion_tokens": 1},
    {"prompt_tokens": 10},
    {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 1e6},
    {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": -0.1},
    {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": float("nan")},
    {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 10**400},
    {"prompt_tokens": 10, "completion_tokens": 2, "model": 7},
    {"prompt_tokens": 10, "completion_tokens": 2, "model": "m" * 201},
]


@pytest.mark.parametrize("value", MALFORMED, ids=lambda v: repr(v)[:40])
def test_a_malformed_agent_report_is_ignored_and_counted(value: Any) -> None:
    meter = UsageMeter()
    meter.record_reported(VALID)
    meter.record_reported(value)
    meter.record_reported(None)  # the key was absent: not reported, not malformed
    usage = meter.token_usage({})
    assert (usage.calls, usage.reported, usage.malformed) == (3, 1, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (30, 4)  # the whole numbers sent as doubles were read
    assert usage.cost_usd is None  # two replies of three reported nothing usable


def test_an_agent_s_tokens_are_priced_at_the_model_it_names() -> None:
    meter = UsageMeter()
    meter.record_reported({"prompt_tokens": 1000, "completion_tokens": 100, "model": "user-model"})
    meter.record_reported({"prompt_tokens": 10, "completion_tokens": 1, "cost_usd": 0.5})
    usage = meter.token_usage(PRICES)
    assert usage.cost_usd == pytest.approx((1000 * 2 + 100 * 8) / 1e6 + 0.5) and usage.cost_source == "mixed"
    assert UsageMeter(calls=0).token_usage(PRICES).cost_usd is None


def attempt(number: int, latencies: list[float], agent: TokenUsage, user: TokenUsage | None, **times: float) -> Any:
    """An attempt of the builders' battle with hand-made usage."""
    usage = AttemptUsage(
        agent_turn_latencies_s=latencies,
        agent_latency=latency_summary(latencies),
        agent=agent,
        user=user,
        **times,
    )
    return AttemptResult(
        battle_id="b",
        domain="mock",
        split=None,
        task_index=0,
        task_id="t",
        attempt=number,
        context_id=f"c{number}",
        outcome="success",
        termination_reason="user_stop",
        usage=usage,
    )


def test_battle_usage_sums_attempts_and_pools_their_turns() -> None:
    a = attempt(
        1,
        [0.1, 0.3],
        TokenUsage(calls=2, reported=2, prompt_tokens=100, completion_tokens=10, cost_usd=0.01, cost_source="reported"),
        TokenUsage(calls=3, reported=3, prompt_tokens=300, completion_tokens=30, cost_usd=0.002),
        agent_s=0.4,
        user_s=1.0,
        harness_s=2.0,
    )
    b = attempt(
        2,
        [0.2, 0.4, 0.5],
        TokenUsage(calls=3, reported=3, prompt_tokens=50, completion_tokens=5, cost_usd=0.02, cost_source="reported"),
        TokenUsage(calls=2, reported=2, prompt_tokens=200, completion_tokens=20, cost_usd=0.003),
        agent_s=1.1,
        user_s=0.5,
        harness_s=0.25,
    )
    timed_out = attempt(3, [], TokenUsage(), None, agent_s=5.0, harness_s=0.1)  # no reply: adds no cost
    usage = battle_usage([a, b, timed_out])
    assert usage is not None
    assert usage.attempts == 3
    # pooled turns 0.1 0.2 0.3 0.4 0.5: p95 at rank 3.8 = 0.4 + 0.8 x 0.1
    assert (usage.agent_latency.count, usage.agent_latency.p50_s, usage.agent_latency.p95_s) == (5, 0.3, 0.48)
    assert usage.agent_latency.max_s == 0.5
    assert (usage.agent_s, usage.user_s, usage.harness_s) == (6.5, 1.5, 2.35)
    assert (usage.agent.calls, usage.agent.prompt_tokens, usage.agent.completion_tokens) == (5, 150, 15)
    assert usage.agent.cost_usd == pytest.approx(0.03) and usage.agent.cost_source == "reported"
    assert usage.user is not None and (usage.user.prompt_tokens, usage.user.completion_tokens) == (500, 50)
    assert usage.user.cost_usd == pytest.approx(0.005)
    assert usage.total_cost_usd == pytest.approx(0.035)
    # One attempt whose agent replied without reporting: the agent's cost, and the total, become unknown.
    silent = attempt(4, [0.2], TokenUsage(calls=1), None, agent_s=0.2)
    unknown = battle_usage([a, b, silent])
    assert unknown is not None and unknown.agent.cost_usd is None and unknown.total_cost_usd is None
    assert unknown.agent.prompt_tokens == 150  # tokens still sum what was reported
    assert battle_usage([]) is None and battle_usage(battle_result().attempts) is None  # older results


def test_merge_keeps_tokens_none_when_nobody_reported() -> None:
    merged = merge_token_usage([TokenUsage(calls=2), TokenUsage(calls=0)])
    assert (merged.calls, merged.reported, merged.prompt_tokens, merged.cost_usd) == (2, 0, None, None)


# --- configuration -----------------------------------------------------------------------------------------------
def test_prices_come_from_the_scenario_and_are_bounded(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[pass_k_config]\nk = 2\n[pass_k_config.prices."gpt-4.1-mini"]\n'
        "input_usd_per_million_tokens = 0.4\noutput_usd_per_million_tokens = 1.6\n",
        encoding="utf-8",
    )
    config = load_battle_config(scenario)
    assert config.prices["gpt-4.1-mini"].cost_usd(1_000_000, 500_000) == pytest.approx(1.2)
    assert "prices" not in BattleConfig().model_dump(mode="json")  # older configs read and write as before
    remote = parse_remote_battle_config(
        {"prices": {"m": {"input_usd_per_million_tokens": 1, "output_usd_per_million_tokens": 3}}}, config
    )
    assert remote.prices["m"].cost_usd(10, 10) == pytest.approx(40 / 1e6) and "gpt-4.1-mini" not in remote.prices
    price = {"input_usd_per_million_tokens": 1, "output_usd_per_million_tokens": 1}
    for bad in ({"m": {**price, "input_usd_per_million_tokens": -1}}, {"": price}, {f"m{i}": price for i in range(65)}):
        with pytest.raises(ConfigError, match="prices"):
            parse_battle_config({"prices": bad})


# --- views ---------------------------------------------------------------------------------------------------------
def with_usage() -> BattleResult:
    result = battle_result()
    result.attempts[0].usage = AttemptUsage(
        agent_turn_latencies_s=[0.5, 1.5],
        agent_latency=latency_summary([0.5, 1.5]),
        agent_s=2.0,
        user_s=0.75,
        harness_s=0.25,
        agent=TokenUsage(calls=2, reported=2, prompt_tokens=1234, completion_tokens=56, cost_usd=0.0123),
        user=TokenUsage(calls=3, reported=3, prompt_tokens=900, completion_tokens=90, cost_usd=0.00252),
    )
    result.usage = battle_usage(result.attempts)
    return result


def test_the_markdown_has_a_cost_and_latency_section() -> None:
    result = with_usage()
    markdown = render_markdown(result)
    assert "## Cost and latency" in markdown
    assert "| white agent turn latency p50 / p95 / max | 1.000 s / 1.450 s / 1.500 s (2 turns) |" in markdown
    assert "| time in white agent / user simulator / harness | 2.000 s / 0.750 s / 0.250 s |" in markdown
    assert "| white agent tokens | 1,234 prompt + 56 completion (2/2 replies reported) |" in markdown
    assert "| user simulator cost | $0.002520 |" in markdown
    assert "| total cost | $0.0148 |" in markdown
    line = attempt_cost_line(result.attempts[0])
    assert line == (
        "time: agent 2.000 s (2 turns, max 1.500 s), user 0.750 s, harness 0.250 s; cost: agent $0.0123, user $0.002520"
    )
    assert f"    - {line}" in markdown
    assert cost_markdown(battle_result()) == [] and "Cost and latency" not in render_markdown(battle_result())


def test_compare_rows_put_two_battles_side_by_side() -> None:
    rows = compare_cost_rows(with_usage(), battle_result())
    assert rows[0] == (
        "white agent turn latency p50 / p95 / max",
        "1.000 s / 1.450 s / 1.500 s (2 turns)",
        "n/a / n/a / n/a (0 turns)",
    )
    assert ("total cost", "$0.0148", "n/a") in rows
    assert [label for label, _, _ in rows][-1] == "total cost" and len(rows) == 7


def test_the_backend_reads_the_same_numbers_and_refuses_hostile_ones() -> None:
    data = json.loads(with_usage().model_dump_json())
    rows = dict(build_result_view(data).usage_rows)
    assert rows["white agent turn latency p50 / p95 / max"] == "1.000 s / 1.450 s / 1.500 s (2 turns)"
    assert rows["white agent tokens"] == "1,234 prompt + 56 completion (2/2 replies reported)"
    assert rows["total cost"] == "$0.0148"
    hostile = {"usage": {"agent_s": "<script>", "total_cost_usd": float("nan"), "agent": {"cost_usd": -1}, "user": 7}}
    text = json.dumps(usage_rows(hostile))
    assert "<script>" not in text and "n/a" in text
    assert usage_rows({"usage": None}) == []
    assert build_result_view(json.loads(battle_result().model_dump_json())).usage_rows == []


def test_the_backend_page_shows_the_table_escaped() -> None:
    data = json.loads(with_usage().model_dump_json())
    battle = {"battle_id": "b1", "result": {"winner": "green_agent"}}
    page = Renderer().render("_result.html", battle=battle, view=build_result_view(data))
    assert 'id="usage-table"' in page
    assert '<th scope="row">total cost</th><td>$0.0148</td>' in page
    data["usage"]["agent"]["cost_source"] = "<script>alert(1)</script>"  # not a known source: not shown at all
    page = Renderer().render("_result.html", battle=battle, view=build_result_view(data))
    assert "<script>" not in page and "alert(1)" not in page
    older = Renderer().render(
        "_result.html", battle=battle, view=build_result_view(json.loads(battle_result().model_dump_json()))
    )
    assert "usage-table" not in older


def test_the_white_client_reads_the_key_from_a_message_and_from_a_task() -> None:
    from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState, TaskStatus

    from green_agent.engine.white_client import _reply_from_message, _reply_from_task

    message = Message(role=Role.ROLE_AGENT, message_id="m", parts=[Part(text="hi")])
    message.metadata.update({AGENT_USAGE_KEY: {"prompt_tokens": 12, "completion_tokens": 3}, "other": 1})
    assert _reply_from_message(message).reported_usage == {"prompt_tokens": 12.0, "completion_tokens": 3.0}
    task = Task(id="t", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED, message=message))
    assert _reply_from_task(task).reported_usage == {"prompt_tokens": 12.0, "completion_tokens": 3.0}
    bare = Task(id="t", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    bare.metadata.update({AGENT_USAGE_KEY: "junk"})
    assert _reply_from_task(bare).reported_usage == "junk"  # passed on as is: the attempt's meter refuses it
    assert _reply_from_message(Message(role=Role.ROLE_AGENT, message_id="n")).reported_usage is None


# --- one real attempt: the agent reports usage in its reply metadata ---------------------------------------------
async def test_an_attempt_counts_reported_usage_and_ignores_the_malformed(arena: Arena) -> None:
    def reply(text: str, usage: Any) -> WhiteReply:
        return WhiteReply(text=text, kind="message", reported_usage=usage)

    call = tool("create_task", user_id="user_1", title="Important Meeting")
    white = ScriptedWhite(
        reply(call, {"prompt_tokens": 300, "completion_tokens": 20, "model": "user-model"}),
        reply(respond("Your task 'Important Meeting' is created."), {"prompt_tokens": -1, "completion_tokens": 5}),
    )
    result = await arena.play(white, ScriptedUser(OPENING, "Thanks! ###STOP###"), prices=PRICES)
    plain = await arena.play(
        ScriptedWhite(call, respond("Your task 'Important Meeting' is created.")),
        ScriptedUser(OPENING, "Thanks! ###STOP###"),
        ref=MOCK,
    )
    assert (result.outcome, result.reward) == (plain.outcome, plain.reward) == ("success", 1.0)
    usage = result.usage
    assert usage is not None and usage.user is None  # the scripted party calls no model
    assert (usage.agent.calls, usage.agent.reported, usage.agent.malformed) == (2, 1, 1)
    assert (usage.agent.prompt_tokens, usage.agent.completion_tokens, usage.agent.cost_usd) == (300, 20, None)
    assert len(usage.agent_turn_latencies_s) == usage.agent_latency.count == result.steps == 2
    latency = usage.agent_latency
    assert latency.p50_s is not None and latency.p95_s is not None and latency.max_s is not None
    assert 0 <= min(usage.agent_turn_latencies_s) <= latency.p50_s <= latency.p95_s <= latency.max_s
    assert latency.max_s == max(usage.agent_turn_latencies_s)
    assert sum(usage.agent_turn_latencies_s) <= usage.agent_s + 0.001
    assert usage.agent_s + usage.user_s + usage.harness_s == pytest.approx(result.duration_s, abs=0.002)
    assert AGENT_USAGE_KEY == "arena/usage"
