"""Bounds on what /run and the CSV suites accept, and hostile values in them: every limit is a 4xx JSON answer naming
the field and the limit, lone surrogates never cause a 5xx or a broken event stream, NaN never reaches the page, and
the heavy work runs in worker threads, never on the event loop."""

from __future__ import annotations

import copy
import json
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio

from green_agent.evaluations import (
    CsvLimits,
    EvaluationsSettings,
    LexicalJudge,
    RunLimits,
    component,
    csv_runner,
    fairforge,
)
from green_agent.evaluations.prompts import ANSWER_CORRECTNESS
from tests.green_agent.evaluations.conftest import (
    SEED_GROQ_REQUEST,
    green_server,
    judge_settings,
    operator_client,
    white_agent,
)
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply

pytestmark = pytest.mark.asyncio(loop_scope="module")

HEADER = "test_id,query,expected_tool,expected_args,expected_response_contains\n"
RUN_LIMITS = RunLimits(
    max_conversations=5,
    max_interactions_per_conversation=4,
    max_interactions=8,
    max_tools_per_interaction=3,
    max_text_chars=2_000,
    max_id_chars=40,
)
CSV_LIMITS = CsvLimits(max_rows=20, max_columns=8, max_cell_chars=2_000, max_expected_tools=3)
RUN_BODY_CAP = 64 * 1024


def _strict_json(text: str) -> Any:
    """JSON.parse's rules: NaN / Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


class HostileFinanceAgent:
    """Reports far too many tool calls, nested results and markup. (Lone surrogates cannot travel in an A2A reply
    built by the SDK: protobuf strings are UTF-8; the white client cleans them should a raw agent send some.)"""

    card_name = card_description = "hostile finance"

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        nested: Any = {"price": 195.2}
        for _ in range(5):  # protobuf (upb) refuses deeper Struct values
            nested = {"inner": [nested]}
        calls = [{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}, "result": nested} for _ in range(300)]
        return AgentReply("AAPL trades at $195.20 <script>alert(1)</script>", data={"tool_calls": calls})

    async def aclose(self) -> None:
        return None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    tmp = tmp_path_factory.mktemp("input-bounds")
    # An LLM judge is allowed (so connector fields are parsed), but points at a closed port: nothing is judged.
    judge = judge_settings(tmp, base_url_overrides={"groq": "http://127.0.0.1:9/v1", "openai": "http://127.0.0.1:9/v1"})
    settings = EvaluationsSettings(
        judge=judge, run_limits=RUN_LIMITS, csv_limits=CSV_LIMITS, max_run_body_bytes=RUN_BODY_CAP
    )
    async with green_server(tmp, settings) as base:
        yield base


def _lexical(request: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(request)
    body.setdefault("config", {})["judge"] = "lexical"
    return body


def _conversation(session: str, turns: int, **fields: Any) -> dict[str, Any]:
    interactions = [
        {
            "qa_id": f"{session}-{i}",
            "query": "What is 5 + 3?",
            "assistant": "8",
            "ground_truth_assistant": "5 + 3 equals 8",
        }
        for i in range(turns)
    ]
    for key, value in fields.items():
        interactions[0][key] = value
    return {"session_id": session, "conversation": interactions}


def _run_body(datasets: list[dict[str, Any]]) -> dict[str, Any]:
    return _lexical({**SEED_GROQ_REQUEST, "datasets": datasets})


def _tools(n: int) -> list[dict[str, Any]]:
    return [{"tool_name": "calculator", "parameters": {"a": i}} for i in range(n)]


OVER_LIMIT: list[tuple[str, dict[str, Any], str, str]] = [
    ("conversations", _run_body([_conversation(f"s{i}", 1) for i in range(6)]), "datasets", "max_conversations"),
    (
        "interactions-per-conversation",
        _run_body([_conversation("s", 5)]),
        "datasets[0].conversation",
        "max_interactions_per_conversation",
    ),
    ("interactions-in-total", _run_body([_conversation(f"s{i}", 3) for i in range(3)]), "datasets", "max_interactions"),
    (
        "query-length",
        _run_body([_conversation("s", 1, query="x" * 2_001)]),
        "datasets[0].conversation[0].query",
        "max_text_chars",
    ),
    (
        "answer-length",
        _run_body([_conversation("s", 2), _conversation("t", 1, assistant="8 " * 1_001)]),
        "datasets[1].conversation[0].assistant",
        "max_text_chars",
    ),
    (
        "context-length",
        _run_body([{**_conversation("s", 1), "context": "c" * 2_001}]),
        "datasets[0].context",
        "max_text_chars",
    ),
    ("session-id-length", _run_body([_conversation("s" * 41, 1)]), "datasets[0].session_id", "max_id_chars"),
    (
        "qa-id-length",
        _run_body([_conversation("s", 1, qa_id="q" * 41)]),
        "datasets[0].conversation[0].qa_id",
        "max_id_chars",
    ),
    (
        "tools-used",
        _run_body([_conversation("s", 1, agentic={"tools_used": _tools(4)})]),
        "datasets[0].conversation[0].agentic.tools_used",
        "max_tools_per_interaction",
    ),
    (
        "expected-tools",
        _run_body([_conversation("s", 1, ground_truth_agentic={"expected_tools": _tools(4)})]),
        "datasets[0].conversation[0].ground_truth_agentic.expected_tools",
        "max_tools_per_interaction",
    ),
    (
        "tool-name-length",
        _run_body([_conversation("s", 1, agentic={"tools_used": [{"tool_name": "t" * 41}]})]),
        "datasets[0].conversation[0].agentic.tools_used[0].tool_name",
        "max_id_chars",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "limit"), [case[1:] for case in OVER_LIMIT], ids=[case[0] for case in OVER_LIMIT]
)
async def test_run_limits_answer_413_naming_the_field_and_the_limit(
    url: str, body: dict[str, Any], field: str, limit: str
) -> None:
    async with operator_client(url) as client:
        response = await client.post("/run", json=body)
    assert response.status_code == 413, response.text
    answer = response.json()
    assert answer["success"] is False
    assert (answer["field"], answer["limit"]) == (field, limit)
    assert field in answer["error"] and "request too large" in answer["error"]


async def test_run_at_the_limits_is_accepted(url: str) -> None:
    body = _run_body(
        [
            _conversation(
                f"s{i}",
                2 if i < 3 else 1,
                query="q " * 999,
                agentic={"tools_used": _tools(3)},
                ground_truth_agentic={"expected_tools": _tools(3)},
            )
            for i in range(5)
        ]
    )
    body["datasets"][0]["session_id"] = "s" * 40
    async with operator_client(url) as client:
        response = await client.post("/run", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["aggregated_metrics"]["total_conversations"] == 5


async def test_run_body_caps_count_chunked_bytes_too(url: str) -> None:
    big = json.dumps(_run_body([_conversation("s", 1, context="c" * (RUN_BODY_CAP + 10))])).encode()

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    async with operator_client(url) as client:
        declared = await client.post("/run", content=big, headers={"content-type": "application/json"})
        streamed = await client.post("/run", content=chunked(), headers={"content-type": "application/json"})
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["success"] is False and str(RUN_BODY_CAP) in response.json()["error"]
    assert "content-length" not in streamed.request.headers


async def test_run_junk_values_are_4xx_naming_the_field(url: str) -> None:
    huge_int = _run_body(
        [
            _conversation(
                "s",
                1,
                ground_truth_agentic={
                    "expected_tools": [{"tool_name": "calculator", "parameters": {"a": int("9" * 400)}}]
                },
            )
        ]
    )
    nan_temperature = _run_body([_conversation("s", 1)])
    nan_temperature["connector"]["params"]["temperature"] = math.nan
    huge_temperature = json.dumps(_run_body([_conversation("s", 1)])).replace(
        '"temperature": 0.0', '"temperature": ' + "9" * 999
    )
    cases: list[tuple[bytes, str]] = [
        (
            json.dumps(huge_int).encode(),
            "datasets[0].conversation[0].ground_truth_agentic.expected_tools[0].parameters",
        ),
        (json.dumps(nan_temperature).encode(), "connector.params.temperature must be a finite number"),
        (huge_temperature.encode(), "connector.params.temperature must be a finite number"),
    ]
    for key in ("\u00e9t\u00e9", "key with spaces", "line\nbreak", "\ud800"):
        body = copy.deepcopy(SEED_GROQ_REQUEST)  # LLM judge: the key would go into a header
        body["connector"]["params"]["api_key"] = key
        cases.append((json.dumps(body).encode(), "connector.params.api_key must be printable ASCII"))
    async with operator_client(url) as client:
        for raw, expected in cases:
            response = await client.post("/run", content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 400, (expected, response.text)
            assert expected in response.json()["error"] or response.json().get("field") == expected, response.text


async def test_run_lone_surrogates_are_replaced_not_fatal(url: str) -> None:
    body = _run_body(
        [
            {
                "session_id": "s\ud800",
                "assistant_id": "\udfff",
                "conversation": [
                    {
                        "qa_id": "q\ud83d",
                        "query": "What is 5 + 3?\udc00",
                        "assistant": "8 \ud800",
                        "ground_truth_assistant": "\ud800 5 + 3 equals 8",
                        "agentic": {"tools_used": [{"tool_name": "calc\ud800", "parameters": {"\ud800": "\udc00"}}]},
                        "ground_truth_agentic": {"expected_tools": [{"tool_name": "calc\ud800"}]},
                    }
                ],
            }
        ]
    )
    raw = json.dumps(body).encode()  # ASCII with \ud800 escapes: what a hostile client sends
    assert b"\\ud800" in raw
    async with operator_client(url) as client:
        response = await client.post("/run", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    text = response.content.decode("utf-8")  # strict: the answer is valid UTF-8
    answer = json.loads(text)
    conversation = answer["per_conversation_metrics"][0]
    assert conversation["session_id"] == "s\ufffd" and conversation["assistant_id"] == "\ufffd"
    assert conversation["interactions"][0]["qa_id"] == "q\ufffd"
    assert conversation["correctness_scores"] == [1.0]
    assert conversation["tool_correctness_scores"][0]["tool_selection_correct"] == 1.0
    # rendered a conversation at a time, the body is still exactly json.dumps of the answer
    assert response.content == json.dumps(answer, ensure_ascii=False).encode("utf-8")


async def _post_csv(client: httpx.AsyncClient, csv: bytes, **fields: str) -> httpx.Response:
    fields.setdefault("agent_url", "http://127.0.0.1:9")
    return await client.post("/evaluations/run", files={"file": ("suite.csv", csv, "text/csv")}, data=fields)


def _problems(response: httpx.Response) -> list[tuple[int | None, str | None, str]]:
    assert response.status_code == 422, response.text
    return [(p["row"], p["column"], p["message"]) for p in response.json()["problems"]]


async def test_csv_limits_name_row_column_and_limit(url: str) -> None:
    good = 't1,Price of AAPL?,get_stock_price,"{""ticker"": ""AAPL""}",AAPL\n'
    deep = '"' + "[" * 70 + "]" * 70 + '"'
    async with operator_client(url) as client:
        columns = _problems(await _post_csv(client, (HEADER.strip() + ",a,b,c,d\n" + good).encode()))
        assert columns == [(1, None, "the header has 9 columns; at most 8 are accepted (max_columns)")]

        rows = _problems(await _post_csv(client, (HEADER + good + "\n" * 25).encode()))
        assert rows == [(22, None, "more than 20 rows after the header (max_rows, blank rows included)")]

        cell = _problems(await _post_csv(client, (HEADER + good + "t2," + "q" * 2_001 + ",,,\n").encode()))
        assert cell == [(3, "query", "query has 2001 characters; at most 2000 are accepted (max_cell_chars)")]

        tools = _problems(await _post_csv(client, (HEADER + 't1,q,"[""a"",""b"",""c"",""d""]",,\n').encode()))
        assert tools == [
            (2, "expected_tool", "expected_tool names 4 tools; at most 3 are accepted (max_expected_tools)")
        ]

        json_cells = (
            HEADER
            + f"t1,q,a,{deep},\n"
            + 't2,q,a,"{""n"": '
            + "1" * 1_001
            + '}",\n'
            + 't3,q,a,"{""n"": NaN}",\n'
            + 't4,q,a,"{""n"": '
            + "9" * 400
            + '}",\n'
            + 't5,q,a,"{""n"": 1e999}",\n'
            + 't6,q,"['
            + "[" * 100
            + "]" * 100
            + ']",,\n'
        )
        problems = _problems(await _post_csv(client, json_cells.encode()))
        assert [(row, column) for row, column, _ in problems] == [
            (2, "expected_args"),
            (3, "expected_args"),
            (4, "expected_args"),
            (5, "expected_args"),
            (6, "expected_args"),
            (7, "expected_tool"),
        ]
        messages = [message for _, _, message in problems]
        assert "nested 70 levels deep" in messages[0] and "more than 1000 digits" in messages[1]
        assert "NaN is not a JSON number" in messages[2] and "out of range" in messages[3]
        assert "out of range" in messages[4] and "nested 101 levels deep" in messages[5]

        too_big = await _post_csv(client, HEADER.encode() + b"x" * (6 * 1024 * 1024))
        assert too_big.status_code == 413 and "limit" in too_big.json()["error"]


async def test_csv_form_fields_are_checked(url: str) -> None:
    csv = (HEADER + "t1,q,,,\n").encode()
    deep_connector = "[" * 5_000 + "]" * 5_000
    cases: list[tuple[dict[str, str], str]] = [
        ({"agent_url": "ftp://x"}, "agent_url is required"),
        ({"agent_url": "http://" + "a" * 3_000}, "agent_url is longer than 2048 characters"),
        ({"agent_url": "http://[::1"}, "agent_url is not a valid URL"),
        ({"agent_url": "http://"}, "agent_url"),
        ({"concurrency": "\uff19"}, "concurrency must be an integer"),  # a full-width digit: isdigit() is True
        ({"concurrency": "9" * 5_000}, "concurrency must be an integer"),
        ({"concurrency": "0"}, "concurrency must be between 1 and"),
        ({"judge": "llm", "connector": deep_connector}, "connector is not valid JSON"),
        ({"judge": "llm", "connector": '{"class_path": NaN}'}, "connector is not valid JSON"),
        (
            {
                "judge": "llm",
                "connector": '{"class_path": "langchain_groq.chat_models.ChatGroq", "params": '
                '{"model": "m", "api_key": "\\ud800"}}',
            },
            "connector.params.api_key must be printable ASCII",
        ),
    ]
    async with operator_client(url) as client:
        for fields, expected in cases:
            response = await _post_csv(client, csv, **fields)
            assert response.status_code == 400, (fields.keys(), response.text)
            assert expected in response.json()["error"], response.text


async def test_csv_surrogates_and_a_hostile_agent_never_break_the_stream(url: str) -> None:
    csv = (
        HEADER
        + 't1,Price of AAPL?,get_stock_price,"{""ticker"": ""AAPL\\ud800""}",AAPL\n'
        + 't2,Price again?,"[""get_stock_price""]","[{""ticker"": ""\\udc00""}]",195.20\n'
    ).encode()
    async with (
        white_agent(HostileFinanceAgent()) as white,
        operator_client(url, timeout=60) as client,
        client.stream(
            "POST",
            "/evaluations/run",
            files={"file": ("s.csv", csv, "text/csv")},
            data={"agent_url": white, "concurrency": "2"},
        ) as response,
    ):
        assert response.status_code == 200
        raw = await response.aread()
    events = []
    text = raw.decode("utf-8")  # strict
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), None)
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        if name and data:
            events.append((name, _strict_json("\n".join(data))))
    assert [name for name, _ in events].count("test_case_result") == 2 and events[-1][0] == "summary"
    results = {data["test_id"]: data for name, data in events if name == "test_case_result"}
    assert results["t1"]["expected_tools"][0]["arguments"] == {"ticker": "AAPL\ufffd"}
    assert results["t2"]["expected_tools"][0]["arguments"] == {"ticker": "\ufffd"}
    for result in results.values():
        assert result["status"] in ("passed", "failed"), result
        assert len(result["actual_tool_calls"]) == 256
        assert any("300 tool calls" in note and "max_tool_calls" in note for note in result["notes"])
        json.dumps(result, ensure_ascii=False).encode("utf-8")  # no lone surrogate left in any string


class OversizedReplyAgent:
    """Answers with more than the green agent reads from an agent for one case (1 MiB by default)."""

    card_name = card_description = "oversized"

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        return AgentReply("x" * 1_200_000)

    async def aclose(self) -> None:
        return None


async def test_csv_agent_reply_over_the_byte_cap_errors_the_case(url: str) -> None:
    csv = (HEADER + "t1,Say a lot,,,\n").encode()
    async with white_agent(OversizedReplyAgent()) as white, operator_client(url, timeout=60) as client:
        config = (await client.get("/evaluations/config")).json()
        async with client.stream(
            "POST", "/evaluations/run", files={"file": ("s.csv", csv, "text/csv")}, data={"agent_url": white}
        ) as response:
            raw = (await response.aread()).decode()
    assert (config["max_rows"], config["max_columns"], config["max_cell_chars"]) == (20, 8, 2_000)
    results = [_strict_json(line[5:].strip()) for line in raw.splitlines() if line.startswith("data:")]
    [case] = [r for r in results if r.get("test_id") == "t1" and "status" in r]
    assert case["status"] == "errored" and "larger than" in case["error"], case["error"]
    assert results[-1]["errored"] == 1


async def test_heavy_work_runs_in_worker_threads(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, list[bool]] = {}

    def spy(module: Any, name: str) -> None:
        original: Callable[..., Any] = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen.setdefault(name, []).append(threading.get_ident() == loop_thread)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for module, name in [
        (component, "parse_csv_suite"),
        (component, "_load_run_body"),
        (component, "_render"),
        (fairforge, "parse_request"),
        (fairforge, "_assemble"),
        (fairforge, "_tool_scores"),
        (csv_runner, "_reply_calls"),
        (csv_runner, "finagent_case_score"),
    ]:
        spy(module, name)
    csv = (HEADER + 't1,Price of AAPL?,get_stock_price,"{""ticker"": ""AAPL""}",AAPL\n').encode()
    async with white_agent(HostileFinanceAgent()) as white, operator_client(url, timeout=60) as client:
        run = await client.post("/run", json=_run_body([_conversation("s", 2)]))
        assert run.status_code == 200, run.text
        async with client.stream(
            "POST", "/evaluations/run", files={"file": ("s.csv", csv, "text/csv")}, data={"agent_url": white}
        ) as stream:
            assert b"summary" in await stream.aread()
    assert set(seen) == {
        "parse_csv_suite",
        "_load_run_body",
        "_render",
        "parse_request",
        "_assemble",
        "_tool_scores",
        "_reply_calls",
        "finagent_case_score",
    }, seen
    on_loop = {name for name, flags in seen.items() if any(flags)}
    assert on_loop == set(), f"ran on the event loop: {sorted(on_loop)}"


async def test_lexical_judge_scores_large_items_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    threads: list[bool] = []
    judge = LexicalJudge()
    original = judge._evaluate_sync

    def spy(*args: Any) -> Any:
        threads.append(threading.get_ident() == loop_thread)
        return original(*args)

    monkeypatch.setattr(judge, "_evaluate_sync", spy)
    small = {"query": "What is 5 + 3?", "answer": "8", "ground_truth": "8"}
    large = {**small, "answer": "8 " * 20_000}
    await judge.evaluate_many(ANSWER_CORRECTNESS, [small])
    await judge.evaluate_many(ANSWER_CORRECTNESS, [large])
    await judge.evaluate_many(ANSWER_CORRECTNESS, [small] * 9)
    assert threads == [True, False, False]
