"""POST /run on the green agent: the seed's error messages, the seed's Groq example answered by the lexical judge,
and the API key never echoed or logged."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from green_agent.evaluations import EvaluationsSettings
from tests.green_agent.evaluations.conftest import SEED_GROQ_KEY, green_server, judge_settings, operator_client
from tests.support.fake_openai import error_reply, make_fake_openai, text_reply
from tests.support.servers import serve_app


def _without(request: dict[str, Any], *path: str) -> dict[str, Any]:
    copy_ = copy.deepcopy(request)
    target = copy_
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return copy_


async def test_every_run_error_message(tmp_path: Path, seed_request: dict[str, Any]) -> None:
    settings = EvaluationsSettings(judge=judge_settings(tmp_path, offline=True))
    no_qa = copy.deepcopy(seed_request)
    for dataset in no_qa["datasets"]:
        dataset["conversation"] = []
    bad_interaction = copy.deepcopy(seed_request)
    del bad_interaction["datasets"][1]["conversation"][0]["query"]
    cases: list[tuple[Any, int, str]] = [
        (_without(seed_request, "connector"), 400, "No connector configuration provided"),
        ({**seed_request, "connector": {}}, 400, "No connector configuration provided"),
        (_without(seed_request, "connector", "class_path"), 400, "connector.class_path is required"),
        (
            {**seed_request, "connector": {"class_path": "os.system", "params": {"model": "x"}}},
            400,
            "Failed to create LLM connector: unsupported connector.class_path 'os.system'",
        ),
        (
            {**seed_request, "connector": {"class_path": "langchain_groq.chat_models.ChatGroq", "params": {}}},
            400,
            "Failed to create LLM connector: connector.params.model is required",
        ),
        (_without(seed_request, "datasets"), 400, "No datasets provided"),
        ({**seed_request, "datasets": []}, 400, "No datasets provided"),
        (no_qa, 400, "No qa_ids found in datasets"),
        (
            bad_interaction,
            400,
            "Agentic evaluation failed: invalid request: datasets[1].conversation[0].query: Field required",
        ),
        (
            {**seed_request, "config": {"threshold": 1.5}},
            400,
            "Agentic evaluation failed: invalid request: config.threshold",
        ),
        (
            {**seed_request, "config": {"tool_weights": {"speed": 1.0}}},
            400,
            "Agentic evaluation failed: tool_weights has unknown component",
        ),
    ]
    async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
        for body, status, message in cases:
            response = await client.post("/run", json=body)
            assert response.status_code == status, (message, response.text)
            answer = response.json()
            assert answer["success"] is False
            assert answer["error"].startswith(message), answer["error"]
            assert SEED_GROQ_KEY not in response.text
        invalid = await client.post("/run", content=b"{not json", headers={"content-type": "application/json"})
        assert invalid.status_code == 400
        assert invalid.json() == {"success": False, "error": "Invalid JSON body"}


async def test_seed_groq_example_answered_by_the_lexical_judge(tmp_path: Path, seed_request: dict[str, Any]) -> None:
    settings = EvaluationsSettings(judge=judge_settings(tmp_path, offline=True))
    async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
        response = await client.post("/run", json=seed_request)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    assert body["judge"]["kind"] == "lexical"
    conversations = body["per_conversation_metrics"]
    assert [c["assistant_id"] for c in conversations] == ["agent_response_1", "agent_response_2"]
    for conversation in conversations:
        assert conversation["session_id"] == "eval_session"
        assert conversation["is_fully_correct"] is True
        assert conversation["correctness_scores"] == [1.0]
        assert conversation["correct_indices"] == [0]
        assert conversation["threshold"] == 0.7
        interaction = conversation["interactions"][0]
        assert interaction["judge"]["kind"] == "lexical" and interaction["judge"]["prompt_hash"]
        tool = conversation["tool_correctness_scores"][0]
        assert tool["overall_correctness"] == 1.0 and tool["is_correct"] is True
        assert tool["sequence_correct"] is None  # order does not matter: dropped, not granted
    agg = body["aggregated_metrics"]
    # Two conversations, default k = 3: the unbiased values are undefined, projections are labelled as such.
    assert agg["total_conversations"] == 2 and agg["fully_correct_conversations"] == 2
    assert agg["k"] == 3
    assert agg["pass_at_k"] is None and agg["pass_pow_k"] is None
    assert agg["interpretation"] is None
    assert agg["projections"]["pass_at_k"] == 1.0 and "projection" in agg["projections"]["label"]
    assert any("undefined" in w for w in body["warnings"])
    assert any("lexical judge" in w for w in body["warnings"])
    assert SEED_GROQ_KEY not in response.text


async def test_seed_groq_example_with_k2_gets_a_verdict(tmp_path: Path, seed_request: dict[str, Any]) -> None:
    seed_request["config"]["k"] = 2
    settings = EvaluationsSettings(judge=judge_settings(tmp_path, offline=True))
    async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
        body = (await client.post("/run", json=seed_request)).json()
    agg = body["aggregated_metrics"]
    assert agg["pass_at_k"] == 1.0 and agg["pass_pow_k"] == 1.0
    assert agg["interpretation"] == "reliable"
    assert agg["verdict"]["k"] == 2


async def test_api_key_is_never_echoed_or_logged(
    tmp_path: Path, seed_request: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # The judge endpoint rejects the key and, like some real providers, echoes it in its error message.
    fake = make_fake_openai(lambda body: error_reply(401, f"Incorrect API key provided: {SEED_GROQ_KEY}"))
    async with serve_app(fake) as fake_url:
        settings = EvaluationsSettings(judge=judge_settings(tmp_path, base_url_overrides={"groq": fake_url + "/v1"}))
        async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
            judged = await client.post("/run", json=seed_request)
            bad_connector = copy.deepcopy(seed_request)
            bad_connector["connector"]["class_path"] = "langchain_groq.chat_models.NotAModel"
            refused = await client.post("/run", json=bad_connector)
            bad_type = copy.deepcopy(seed_request)
            bad_type["connector"]["params"]["temperature"] = SEED_GROQ_KEY
            refused_type = await client.post("/run", json=bad_type)
            broken = copy.deepcopy(seed_request)
            broken["datasets"][0]["conversation"][0]["assistant"] = {"key": SEED_GROQ_KEY}
            refused_data = await client.post("/run", json=broken)
    assert judged.status_code == 200
    body = judged.json()
    interaction = body["per_conversation_metrics"][0]["interactions"][0]
    assert interaction["status"] == "unscored"
    assert "HTTP 401" in interaction["reason"] and "***" in interaction["reason"]
    assert refused.status_code == refused_type.status_code == refused_data.status_code == 400
    for response in (judged, refused, refused_type, refused_data):
        assert SEED_GROQ_KEY not in response.text
    assert all(SEED_GROQ_KEY not in record.getMessage() for record in caplog.records)
    assert SEED_GROQ_KEY not in caplog.text
    # and the key did reach the judge endpoint, only there
    assert any(r.headers.get("authorization") == f"Bearer {SEED_GROQ_KEY}" for r in fake.state.fake.requests)


async def test_judge_failing_forever_leaves_conversations_unscored_not_failed(
    tmp_path: Path, seed_request: dict[str, Any]
) -> None:
    fake = make_fake_openai(lambda body: error_reply(500, "upstream down"))
    async with serve_app(fake) as fake_url:
        settings = EvaluationsSettings(judge=judge_settings(tmp_path, base_url_overrides={"groq": fake_url + "/v1"}))
        async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
            body = (await client.post("/run", json=seed_request)).json()
    assert body["success"] is True
    for conversation in body["per_conversation_metrics"]:
        assert conversation["status"] == "unscored" and conversation["is_fully_correct"] is None
        assert conversation["correctness_scores"] == [None]
        assert "after 3 attempt(s)" in conversation["interactions"][0]["reason"]
    agg = body["aggregated_metrics"]
    assert agg["total_conversations"] == 2 and agg["unscored_conversations"] == 2 and agg["scored_conversations"] == 0
    assert agg["fully_correct_conversations"] == 0 and agg["conversation_success_rate"] is None
    assert any("UNSCORED" in w for w in body["warnings"])


async def test_llm_judge_scores_through_the_connector(tmp_path: Path, seed_request: dict[str, Any]) -> None:
    answers = iter(
        ['{"correctness_score": 0.95, "reasoning": "same fact"}', '{"correctness_score": 0.2, "reasoning": "wrong"}']
    )
    fake = make_fake_openai(lambda body: text_reply(next(answers)))
    async with serve_app(fake) as fake_url:
        settings = EvaluationsSettings(judge=judge_settings(tmp_path, base_url_overrides={"groq": fake_url + "/v1"}))
        seed_request["config"]["use_structured_output"] = False
        seed_request["config"]["k"] = 1
        async with green_server(tmp_path, settings) as url, operator_client(url, timeout=30) as client:
            body = (await client.post("/run", json=seed_request)).json()
    scores = sorted(c["correctness_scores"][0] for c in body["per_conversation_metrics"])
    assert scores == [0.2, 0.95]
    agg = body["aggregated_metrics"]
    assert agg["fully_correct_conversations"] == 1 and agg["pass_at_k"] == 0.5
    assert agg["interpretation"] == "needs_improvement"
    judge = body["per_conversation_metrics"][0]["interactions"][0]["judge"]
    assert judge["kind"] == "llm" and judge["model"] == "llama-3.3-70b-versatile" and judge["provider"] == "groq"
    assert judge["prompt_hash"] and judge["structured_output"] is False
    requests = fake.state.fake.completion_requests
    assert all(r["temperature"] == 0 and "response_format" not in r for r in requests)
