"""The /run evaluation logic: a conversation is a trial, unscored conversations are counted but never failures, pass@k
and pass^k are the unbiased estimators (null when n < k), the verdict comes from the metrics library."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from green_agent.evaluations import JudgeSettings, RunError, run_agentic
from green_agent.evaluations.fairforge import aggregate
from tests.green_agent.evaluations.conftest import SEED_GROQ_REQUEST

OFFLINE = JudgeSettings(offline=True, cache_path=None, environ={})


def _conversation(session: str, answers: list[tuple[str, str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "assistant_id": "agent",
        "conversation": [
            {"qa_id": f"q{i}", "query": q, "assistant": a, "ground_truth_assistant": t, **extra}
            for i, (q, a, t) in enumerate(answers)
        ],
    }


RIGHT = ("What is 2 + 2?", "It is 4.", "4")
WRONG = ("What is 2 + 2?", "It is 5.", "4")


def _request(*datasets: dict[str, Any], **config: Any) -> dict[str, Any]:
    return {"connector": copy.deepcopy(SEED_GROQ_REQUEST["connector"]), "datasets": list(datasets), "config": config}


async def test_conversation_is_correct_only_when_every_interaction_is() -> None:
    body = await run_agentic(
        _request(_conversation("a", [RIGHT, RIGHT]), _conversation("b", [RIGHT, WRONG]), k=1), OFFLINE
    )
    a, b = body["per_conversation_metrics"]
    assert (a["status"], a["correct_interactions"], a["is_fully_correct"]) == ("correct", 2, True)
    assert (b["status"], b["correct_interactions"], b["correct_indices"]) == ("incorrect", 1, [0])
    assert body["aggregated_metrics"]["pass_at_k"] == 0.5


async def test_unbiased_pass_k_verdict_and_projections() -> None:
    # 5 conversations, 4 correct, k = 3: pass@3 = 1 - C(1,3)/C(5,3) = 1; pass^3 = C(4,3)/C(5,3) = 0.4
    datasets = [_conversation(f"s{i}", [RIGHT]) for i in range(4)] + [_conversation("s4", [WRONG])]
    agg = (await run_agentic(_request(*datasets, k=3), OFFLINE))["aggregated_metrics"]
    assert agg["pass_at_k"] == 1.0 and agg["pass_pow_k"] == pytest.approx(0.4)
    assert agg["interpretation"] == "inconsistent"  # pass@3 >= 0.9, pass^3 < 0.7
    assert agg["projections"]["pass_pow_k"] == pytest.approx(0.8**3)  # the seed's plug-in, labelled
    assert agg["conversation_success_rate"] == 0.8
    assert agg["success_rate_ci"]["method"] == "wilson"
    assert agg["warnings"] == []


def test_unscored_conversations_leave_n_but_stay_in_the_totals() -> None:
    conv: dict[str, Any] = {"tool_correctness_scores": []}
    conversations = [{**conv, "status": s} for s in ("correct", "correct", "unscored", "incorrect")]
    agg = aggregate(conversations, k=2)
    assert (agg["total_conversations"], agg["scored_conversations"], agg["unscored_conversations"]) == (4, 3, 1)
    assert agg["fully_correct_conversations"] == 2
    assert agg["pass_pow_k"] == pytest.approx(1 / 3)  # C(2,2)/C(3,2), the unscored one is not a failure
    assert any("UNSCORED" in w for w in agg["warnings"])


async def test_expected_tools_but_none_used_scores_zero_not_null() -> None:
    interaction = {
        "agentic": {"tools_used": [], "final_answer_uses_tools": False},
        "ground_truth_agentic": {"expected_tools": [{"tool_name": "calc", "parameters": {"a": 1}}]},
    }
    body = await run_agentic(_request(_conversation("a", [RIGHT], **interaction)), OFFLINE)
    [tool] = body["per_conversation_metrics"][0]["tool_correctness_scores"]
    assert tool["overall_correctness"] == 0.0 and tool["is_correct"] is False
    assert body["aggregated_metrics"]["tool_scored_interactions"] == 1


async def test_lexical_by_config_needs_no_key_and_empty_conversations_are_unscored() -> None:
    request = _request(_conversation("a", [RIGHT]), {"session_id": "empty", "conversation": []}, judge="lexical")
    del request["connector"]["params"]["api_key"]
    body = await run_agentic(request, JudgeSettings(cache_path=None, environ={}))
    empty = body["per_conversation_metrics"][1]
    assert empty["status"] == "unscored" and empty["unscored_reason"] == "conversation has no interactions"
    assert body["judge"]["kind"] == "lexical"


async def test_missing_key_without_fallback_is_a_connector_error() -> None:
    request = _request(_conversation("a", [RIGHT]))
    del request["connector"]["params"]["api_key"]
    with pytest.raises(RunError) as caught:
        await run_agentic(request, JudgeSettings(cache_path=None, environ={}))
    assert caught.value.message.startswith("Failed to create LLM connector: no API key for groq")
