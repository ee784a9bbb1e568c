"""Ragas-style agent metrics on hand-computed samples, with the lexical judge and with scripted LLM judges."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from green_agent.evaluations import AgentSample, LexicalJudge, LlmJudge, MetricSpec, RetryPolicy, evaluate_samples
from green_agent.evaluations.connectors import ResolvedConnector
from tests.support.fake_openai import error_reply, make_fake_openai, text_reply


def _sample(messages: list[dict[str, Any]], **extra: Any) -> AgentSample:
    return AgentSample.model_validate({"user_input": messages, **extra})


BOOKING = [
    {"type": "human", "content": "Book a table for 2 at Luigi's at 7pm"},
    {
        "type": "ai",
        "content": "",
        "tool_calls": [{"name": "search", "args": {"q": "Luigi's"}}, {"name": "book", "args": {"id": 1, "seats": 3}}],
    },
    {"type": "tool", "content": '{"confirmation": "LU-77", "time": "19:00"}'},
    {"type": "ai", "content": "Your table at Luigi's is booked for 19:00, confirmation LU-77."},
]
REFERENCE_CALLS = [{"name": "search", "args": {"q": "Luigi's"}}, {"name": "book", "args": {"id": 1, "seats": 2}}]


LlmJudgeFactory = Callable[[Any, str], LlmJudge]


@pytest.fixture
async def llm_judge() -> AsyncIterator[LlmJudgeFactory]:
    """Builds LLM judges named ``openai/<name>`` on in-process transports; closes their HTTP clients afterwards."""
    clients: list[httpx.AsyncClient] = []

    def build(app: Any, name: str) -> LlmJudge:
        connector = ResolvedConnector(
            provider="openai",
            class_path="langchain_openai.chat_models.ChatOpenAI",
            model=name,
            base_url="http://fake/v1",
            api_key=SecretStr("sk-test"),
            requested_temperature=None,
        )
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fake")
        clients.append(client)
        return LlmJudge(
            connector, http_client=client, retry=RetryPolicy(max_retries=1, backoff_base_s=0.0, backoff_max_s=0.0)
        )

    yield build
    for client in clients:
        await client.aclose()


def _by_prompt(answers: dict[str, Any]) -> Any:
    """A fake_openai script answering each judge prompt (told apart by its structured-output schema name)."""

    def script(body: dict[str, Any]) -> Any:
        name = body["response_format"]["json_schema"]["name"]
        answer = answers[name]
        answer = answer(body) if callable(answer) else answer
        return answer if not isinstance(answer, dict) else text_reply(json.dumps(answer))

    return script


# --- tool call accuracy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, threshold, expected",
    [
        ("strict", 0.8, 0.5),  # book(seats=3) vs book(seats=2): not equal -> 1 of 2 calls correct, P = R = 0.5
        ("flexible", 0.8, 0.5),  # argument score 1/2 < 0.8
        ("flexible", 0.5, 1.0),  # argument score 1/2 >= 0.5 -> both calls correct
    ],
)
async def test_tool_call_accuracy(mode: str, threshold: float, expected: float) -> None:
    sample = _sample(BOOKING, reference_tool_calls=REFERENCE_CALLS)
    spec = MetricSpec(name="tool_call_accuracy", mode=mode, argument_match_threshold=threshold)
    [result], [summary] = await evaluate_samples([sample], [spec], [LexicalJudge()])
    assert result.score == pytest.approx(expected)
    assert result.metric == f"tool_call_accuracy[{mode}]"
    assert result.judges[0].judge == "deterministic"
    assert summary.mean == pytest.approx(expected)


async def test_tool_call_accuracy_extra_call_lowers_precision_only() -> None:
    messages = [
        *BOOKING[:1],
        {
            "type": "ai",
            "content": "",
            "tool_calls": [
                {"name": "search", "args": {"q": "Luigi's"}},
                {"name": "book", "args": {"id": 1, "seats": 2}},
                {"name": "search", "args": {"q": "other"}},
            ],
        },
    ]
    sample = _sample(messages, reference_tool_calls=REFERENCE_CALLS)
    [result], _ = await evaluate_samples([sample], [MetricSpec(name="tool_call_accuracy")], [LexicalJudge()])
    details = result.judges[0].details
    assert (details["precision"], details["recall"]) == (pytest.approx(2 / 3), 1.0)
    assert result.score == pytest.approx(0.8)  # F1 = 2 * (2/3 * 1) / (2/3 + 1)


async def test_tool_call_accuracy_without_reference_is_unscored() -> None:
    results, [summary] = await evaluate_samples(
        [_sample(BOOKING)], [MetricSpec(name="tool_call_accuracy")], [LexicalJudge()]
    )
    assert results[0].status == "unscored" and "reference_tool_calls" in (results[0].judges[0].reason or "")
    assert (summary.samples, summary.scored, summary.unscored, summary.mean) == (1, 0, 1, None)


def test_metric_spec_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode of topic_adherence must be one of f1, precision, recall"):
        MetricSpec(name="topic_adherence", mode="accuracy")


# --- agent goal accuracy ---------------------------------------------------------------------------------------------


async def test_goal_accuracy_with_reference_lexical() -> None:
    achieved = _sample(BOOKING, reference="Table at Luigi's booked for 19:00, confirmation LU-77")
    missed = _sample(BOOKING, reference="Table at Roma booked for 20:30 with a window seat")
    results, [summary] = await evaluate_samples(
        [achieved, missed], [MetricSpec(name="agent_goal_accuracy")], [LexicalJudge()]
    )
    assert [r.score for r in results] == [1.0, 0.0]
    assert results[0].judges[0].details["variant"] == "with_reference"
    assert [info["prompt"] for info in results[0].judges[0].judge_info] == ["goal_inference", "goal_comparison"]
    assert summary.mean == 0.5


async def test_goal_accuracy_without_reference_lexical_is_unscored_with_reason() -> None:
    [result], [summary] = await evaluate_samples(
        [_sample(BOOKING)], [MetricSpec(name="agent_goal_accuracy_without_reference")], [LexicalJudge()]
    )
    assert result.status == "unscored" and result.score is None
    assert "cannot infer a goal without a reference" in (result.judges[0].reason or "")
    assert summary.unscored == 1


async def test_goal_accuracy_without_reference_with_two_llm_judges(llm_judge: LlmJudgeFactory) -> None:
    inference = {"user_goal": "book a table for 2 at 7pm", "end_state": "table booked for 3 at 7pm"}
    yes = make_fake_openai(
        _by_prompt({"goal_inference": inference, "goal_comparison": {"achieved": True, "reason": "booked"}})
    )
    no = make_fake_openai(
        _by_prompt({"goal_inference": inference, "goal_comparison": {"achieved": False, "reason": "3 seats, not 2"}})
    )
    judges = [llm_judge(yes, "judge-a"), llm_judge(no, "judge-b")]
    [result], [summary] = await evaluate_samples(
        [_sample(BOOKING)], [MetricSpec(name="agent_goal_accuracy_without_reference")], judges
    )
    assert result.score == 0.5  # mean over the two judges
    assert [(j.judge, j.score) for j in result.judges] == [("openai/judge-a", 1.0), ("openai/judge-b", 0.0)]
    assert result.judges[1].explanation == "3 seats, not 2"
    assert summary.per_judge_mean == {"openai/judge-a": 1.0, "openai/judge-b": 0.0}


async def test_a_failing_judge_is_unscored_and_the_other_still_counts(llm_judge: LlmJudgeFactory) -> None:
    ok = make_fake_openai(
        _by_prompt(
            {
                "goal_inference": {"user_goal": "g", "end_state": "e"},
                "goal_comparison": {"achieved": True, "reason": "done"},
            }
        )
    )
    down = make_fake_openai(lambda body: error_reply(503, "overloaded"))
    judges = [llm_judge(ok, "up"), llm_judge(down, "down")]
    [result], [summary] = await evaluate_samples(
        [_sample(BOOKING, reference="booked")], [MetricSpec(name="agent_goal_accuracy")], judges
    )
    assert result.status == "scored" and result.score == 1.0
    failed = result.judges[1]
    assert failed.status == "unscored" and failed.score is None
    assert "goal inference: judge unavailable after 2 attempt(s): HTTP 503" in (failed.reason or "")
    assert summary.per_judge_mean == {"openai/up": 1.0, "openai/down": None}


# --- topic adherence -------------------------------------------------------------------------------------------------

TOPICS = [
    {"type": "human", "content": "What is the stock price of AAPL?"},  # in reference, answered   -> TP
    {"type": "ai", "content": "AAPL trades at $195.20."},
    {"type": "human", "content": "Tell me a joke about cats"},  # off topic, refused       -> TN
    {"type": "ai", "content": "Sorry, I can only help with finance questions."},
    {"type": "human", "content": "What is the weather in Paris?"},  # off topic, answered      -> FP
    {"type": "ai", "content": "It is sunny in Paris."},
    {"type": "human", "content": "Which sector is Apple in?"},  # in reference, refused    -> FN
    {"type": "ai", "content": "I cannot help with that."},
    {"type": "human", "content": "And the stock price of MSFT?"},  # in reference, answered   -> TP
    {"type": "ai", "content": "", "tool_calls": [{"name": "get_stock_price", "args": {"ticker": "MSFT"}}]},
    {"type": "tool", "content": '{"price": 425.5}'},
    {"type": "ai", "content": "MSFT trades at $425.50."},
    {"type": "human", "content": "How many employees does the company sector leader have?"},  # in ref, refused -> FN
    {"type": "ai", "content": "I'm unable to help with that question."},
]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("precision", 2 / 3),  # TP 2, FP 1
        ("recall", 0.5),  # TP 2, FN 2
        ("f1", 4 / 7),  # 2 * (2/3 * 1/2) / (2/3 + 1/2)
    ],
)
async def test_topic_adherence_lexical(mode: str, expected: float) -> None:
    sample = _sample(TOPICS, reference_topics=["stock price", "company sector"])
    [result], _ = await evaluate_samples([sample], [MetricSpec(name="topic_adherence", mode=mode)], [LexicalJudge()])
    assert result.score == pytest.approx(expected)
    details = result.judges[0].details
    assert details["refused"] == [False, True, False, True, False, True]
    assert details["in_reference"] == [True, False, False, True, True, True]
    assert (details["true_positives"], details["false_positives"], details["false_negatives"]) == (2, 1, 2)


async def test_topic_adherence_with_an_llm_judge(llm_judge: LlmJudgeFactory) -> None:
    answers = {
        "topic_extraction": {"topics": ["stock prices", "jokes", "weather"]},
        "topic_refusal": lambda body: text_reply(
            json.dumps({"refused": "jokes" in body["messages"][1]["content"], "reason": "r"})
        ),
        "topic_classification": {"in_reference": [True, False, False]},
    }
    app = make_fake_openai(_by_prompt(answers))
    judge = llm_judge(app, "topics")
    sample = _sample(TOPICS[:6], reference_topics=["stock price"])
    [result], _ = await evaluate_samples([sample], [MetricSpec(name="topic_adherence", mode="f1")], [judge])
    # TP 1 (stock prices), FP 1 (weather answered), FN 0 -> precision 0.5, recall 1.0, F1 2/3
    assert result.score == pytest.approx(2 / 3)
    assert result.judges[0].details["refused"] == [False, True, False]


async def test_topic_adherence_mismatched_classification_is_unscored(llm_judge: LlmJudgeFactory) -> None:
    app = make_fake_openai(
        _by_prompt(
            {
                "topic_extraction": {"topics": ["a", "b"]},
                "topic_refusal": {"refused": False, "reason": "r"},
                "topic_classification": {"in_reference": [True]},
            }
        )
    )
    judge = llm_judge(app, "short")
    [result], _ = await evaluate_samples(
        [_sample(TOPICS[:2], reference_topics=["x"])], [MetricSpec(name="topic_adherence")], [judge]
    )
    assert result.status == "unscored" and "1 verdicts for 2 topics" in (result.judges[0].reason or "")


async def test_messages_accept_roles_and_arguments_aliases() -> None:
    sample = _sample(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"name": "search", "arguments": {"q": "Luigi's"}}]},
        ],
        reference_tool_calls=[{"name": "search", "args": {"q": "Luigi's"}}],
    )
    assert [m.type for m in sample.user_input] == ["human", "ai"]
    [result], _ = await evaluate_samples([sample], [MetricSpec(name="tool_call_accuracy")], [LexicalJudge()])
    assert result.score == 1.0
