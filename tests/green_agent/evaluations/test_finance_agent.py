"""The finance white agent: deterministic tools, the scripted router, the llm mode with native tool calling, and the
tool_calls data part over A2A."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from green_agent.engine.white_client import WhiteAgentClient
from green_agent.evaluations import extract_tool_calls
from tests.green_agent.evaluations.conftest import finance_agent, white_agent
from tests.support.fake_openai import fake_state, make_fake_openai, text_reply, tool_call_reply
from white_agent.app import make_agent
from white_agent.errors import WhiteAgentConfigError
from white_agent.finance.agent import route
from white_agent.finance.tools import execute_tool
from white_agent.llm import LlmAgentSettings


def test_tools_are_deterministic_and_report_bad_input() -> None:
    assert execute_tool("get_stock_price", {"ticker": "aapl"})["price"] == 195.20
    assert (
        execute_tool("calculate_investment_returns", {"principal": 10000, "annual_rate": 7, "years": 10})["final_value"]
        == 19671.51
    )
    monthly = execute_tool(
        "calculate_investment_returns", {"principal": 5000, "annual_rate": 5, "years": 20, "compounding": "monthly"}
    )
    assert monthly["final_value"] == 13563.2
    assert execute_tool("calculate_financial_ratios", {"ticker": "TSLA"})["pe_ratio"] == 113.14
    assert "unknown ticker 'ZZZZ'" in execute_tool("get_company_info", {"ticker": "zzzz"})["error"]
    assert "bad arguments" in execute_tool("get_stock_price", {"symbol": "AAPL"})["error"]
    assert (
        "principal must be > 0"
        in execute_tool("calculate_investment_returns", {"principal": -1, "annual_rate": 1, "years": 1})["error"]
    )
    assert "unknown tool" in execute_tool("buy_stock", {})["error"]


@pytest.mark.parametrize(
    "question, calls",
    [
        ("What is Microsoft's share price?", [("get_stock_price", {"ticker": "MSFT"})]),
        (
            "Compare the stock prices of AAPL and MSFT",
            [("get_stock_price", {"ticker": "AAPL"}), ("get_stock_price", {"ticker": "MSFT"})],
        ),
        (
            "What sector is Amazon in and what is its stock price?",
            [("get_company_info", {"ticker": "AMZN"}), ("get_stock_price", {"ticker": "AMZN"})],
        ),
        (
            "If I invest $2.5k at 4.5% for 3 years compounded quarterly, what is it worth?",
            [
                (
                    "calculate_investment_returns",
                    {"principal": 2500, "annual_rate": 4.5, "years": 3, "compounding": "quarterly"},
                )
            ],
        ),
        ("What's the weather?", []),
    ],
)
def test_scripted_router(question: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    assert route(question) == calls


async def test_scripted_agent_sends_the_tool_calls_data_part_over_a2a() -> None:
    async with finance_agent() as url, WhiteAgentClient(url, turn_timeout_s=10) as client:
        reply = await client.send(context_id="c1", text="Compare the stock prices of AAPL and MSFT")
        help_reply = await client.send(context_id="c2", text="Hello there")
    assert "$195.20" in reply.text and "$425.50" in reply.text
    calls = extract_tool_calls(reply)
    assert calls == [
        {
            "name": "get_stock_price",
            "arguments": {"ticker": "AAPL"},
            "result": {"ticker": "AAPL", "price": 195.2, "currency": "USD", "change_pct": 0.84, "as_of": "2026-01-02"},
        },
        {
            "name": "get_stock_price",
            "arguments": {"ticker": "MSFT"},
            "result": {"ticker": "MSFT", "price": 425.5, "currency": "USD", "change_pct": -0.32, "as_of": "2026-01-02"},
        },
    ]
    assert extract_tool_calls(help_reply) == []  # an empty trace is still a trace


async def test_llm_mode_executes_the_tools_itself() -> None:
    fake = make_fake_openai(
        [
            tool_call_reply("get_stock_price", {"ticker": "AAPL"}, call_id="call_1"),
            text_reply("AAPL trades at $195.20."),
        ]
    )
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake), base_url="http://fake")
    agent = make_agent(
        "finance-llm", llm=LlmAgentSettings(model="m", base_url="http://fake/v1"), api_key="sk-x", http_client=http
    )
    async with white_agent(agent, "finance llm") as url, WhiteAgentClient(url, turn_timeout_s=10) as client:
        reply = await client.send(context_id="c1", text="Price of AAPL?")
    assert reply.text == "AAPL trades at $195.20."
    [call] = extract_tool_calls(reply) or []
    assert call["name"] == "get_stock_price" and call["result"]["price"] == 195.2
    first, second = fake_state(fake).completion_requests
    assert {t["function"]["name"] for t in first["tools"]} == {
        "get_stock_price",
        "get_company_info",
        "calculate_financial_ratios",
        "calculate_investment_returns",
    }
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert '"price": 195.2' in tool_message["content"]
    await http.aclose()


def test_llm_mode_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINANCE_TEST_KEY", raising=False)
    with pytest.raises(WhiteAgentConfigError, match="FINANCE_TEST_KEY"):
        make_agent("finance-llm", llm=LlmAgentSettings(api_key_env="FINANCE_TEST_KEY"))
