"""POST /evaluations/run on the green agent: the SSE event sequence against the finance white agent, request errors
before streaming, a missing trace, an agent failure, an unreachable agent and an unscored judge verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from green_agent.evaluations import EvaluationsSettings
from tests.green_agent.evaluations.conftest import (
    SAMPLE_CSV,
    finance_agent,
    green_server,
    judge_settings,
    operator_client,
    white_agent,
)
from tests.support.fake_openai import error_reply, make_fake_openai
from tests.support.servers import serve_app
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply

HEADER = "test_id,query,expected_tool,expected_args,expected_response_contains\n"


async def _events(client: httpx.AsyncClient, csv: bytes, **fields: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    async with client.stream(
        "POST", "/evaluations/run", files={"file": ("suite.csv", csv, "text/csv")}, data=fields
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and name:
                events.append((name, json.loads(line.split(":", 1)[1].strip())))
                name = None
    return events


async def test_event_sequence_against_the_finance_agent(tmp_path: Path) -> None:
    settings = EvaluationsSettings(judge=judge_settings(tmp_path))
    csv = SAMPLE_CSV.read_bytes()
    async with (
        finance_agent() as white,
        green_server(tmp_path, settings) as url,
        operator_client(url, timeout=60) as client,
    ):
        events = await _events(client, csv, agent_url=white, concurrency="1")
        concurrent = await _events(client, csv, agent_url=white, concurrency="8")

        # request errors are answered before any stream starts
        invalid = await client.post(
            "/evaluations/run",
            files={"file": ("s.csv", HEADER.encode() + b't1,q,a,"{bad",\n', "text/csv")},
            data={"agent_url": white},
        )
        no_agent = await client.post("/evaluations/run", files={"file": ("s.csv", csv, "text/csv")})
        too_big = await client.post(
            "/evaluations/run", files={"file": ("s.csv", b"x" * (6 * 1024 * 1024))}, data={"agent_url": white}
        )
        no_file = await client.post("/evaluations/run", data={"agent_url": white})
        unreachable = await _events(client, csv, agent_url="http://127.0.0.1:9")

    names = [name for name, _ in events]
    total = len(SAMPLE_CSV.read_text().strip().splitlines()) - 1
    assert names == ["test_case_start", "test_case_result"] * total + ["summary"]
    results = [data for name, data in events if name == "test_case_result"]
    assert [r["index"] for r in results] == list(range(total))
    assert all(r["total"] == total for r in results)
    by_id = {r["test_id"]: r for r in results}
    assert by_id["fin-007"]["actual_tool_calls"][1]["arguments"] == {"ticker": "MSFT"}
    assert by_id["fin-005"]["actual_tool_calls"][0]["arguments"]["principal"] == 10000  # int again, not 10000.0
    assert by_id["fin-001"]["status"] == "passed" and by_id["fin-001"]["scores"]["overall"] == 1.0
    assert by_id["fin-001"]["judge"]["kind"] == "lexical" and by_id["fin-001"]["judge_explanation"]
    assert by_id["fin-011"]["status"] == "failed"  # the demo agent has no dividend-yield tool
    summary = events[-1][1]
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"], summary["unscored"]) == (
        total,
        total - 1,
        1,
        0,
        0,
    )
    assert summary["judge"]["kind"] == "lexical"

    # concurrency: every case starts before its result, the summary comes last and matches
    order = [(n, d["test_id"]) for n, d in concurrent if n != "summary"]
    for test_id in by_id:
        assert order.index(("test_case_start", test_id)) < order.index(("test_case_result", test_id))
    assert concurrent[-1][0] == "summary" and concurrent[-1][1]["passed"] == total - 1

    assert invalid.status_code == 422
    assert invalid.json()["problems"] == [
        {
            "row": 2,
            "column": "expected_args",
            "message": "expected_args is not valid JSON: Expecting property name "
            "enclosed in double quotes at character 2",
        }
    ]
    assert no_agent.status_code == 400 and "agent_url is required" in no_agent.json()["error"]
    assert too_big.status_code == 413
    assert no_file.status_code == 400
    assert [name for name, _ in unreachable] == ["error"]
    assert "cannot run the suite" in unreachable[0][1]["message"]


class NoTraceAgent:
    """Answers in plain text without a tool_calls data part; fails on purpose when asked to."""

    card_name = card_description = "no trace"

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        if "fail" in turn.content:
            return AgentReply("backend unavailable", kind="task_failed")
        return AgentReply("AAPL is trading at $195.20.")

    async def aclose(self) -> None:
        return None


async def test_missing_trace_agent_failure_and_unscored_judge(tmp_path: Path) -> None:
    csv = (
        HEADER + 't1,Price of AAPL?,get_stock_price,"{""ticker"": ""AAPL""}",195.20\n'
        "t2,please fail,get_stock_price,,\n"
        "t3,Say hi,,,\n"
    ).encode()
    fake = make_fake_openai(lambda body: error_reply(500, "judge down"))
    async with serve_app(fake) as fake_url:
        settings = EvaluationsSettings(judge=judge_settings(tmp_path, base_url_overrides={"openai": fake_url + "/v1"}))
        connector = json.dumps(
            {
                "class_path": "langchain_openai.chat_models.ChatOpenAI",
                "params": {"model": "judge", "api_key": "sk-test"},
            }
        )
        async with (
            white_agent(NoTraceAgent()) as white,
            green_server(tmp_path, settings) as url,
            operator_client(url, timeout=60) as client,
        ):
            lexical = await _events(client, csv, agent_url=white, concurrency="1")
            judged = await _events(client, csv, agent_url=white, concurrency="1", judge="llm", connector=connector)

    results = {d["test_id"]: d for n, d in lexical if n == "test_case_result"}
    t1 = results["t1"]
    assert t1["status"] == "failed"  # faithful text, but no trace: selection and arguments 0
    assert t1["scores"] == {"tool_selection": 0.0, "argument_match": 0.0, "faithfulness": 1.0, "overall": 1 / 3}
    assert any("trace missing" in note for note in t1["notes"])
    t2 = results["t2"]
    assert t2["status"] == "errored" and "failed" in t2["error"] and "backend unavailable" in t2["error"]
    summary = lexical[-1][1]
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"]) == (3, 0, 2, 1)

    judged_results = {d["test_id"]: d for n, d in judged if n == "test_case_result"}
    assert judged_results["t1"]["status"] == "unscored"
    assert judged_results["t1"]["scores"]["faithfulness"] is None and judged_results["t1"]["scores"]["overall"] is None
    assert "judge unavailable after 3 attempt(s): HTTP 500" in judged_results["t1"]["error"]
    assert judged_results["t1"]["judge"]["kind"] == "llm"
    judged_summary = judged[-1][1]
    assert (judged_summary["total"], judged_summary["unscored"], judged_summary["errored"]) == (3, 2, 1)
    assert judged_summary["pass_rate"] == 0.0  # unscored cases stay in the denominator, never dropped
