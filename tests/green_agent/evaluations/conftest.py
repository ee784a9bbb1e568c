"""Helpers for the evaluations tests: the green app with the evaluations component, the finance white agent, and the
seed's Groq example request."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from green_agent.evaluations import EvaluationsComponent, EvaluationsSettings, JudgeSettings, RetryPolicy
from green_agent.service.a2a_server import create_app
from green_agent.service.operator_auth import OperatorToken, bearer_header
from tests.support import TEST_OPERATOR_TOKEN
from tests.support.servers import serve_app_factory
from white_agent.app import create_white_agent_app, make_agent
from white_agent.server import TurnAgent
from white_agent.server import create_app as create_white_app

REPO = Path(__file__).resolve().parents[3]
SAMPLE_CSV = REPO / "scenarios" / "finance_suite.csv"
FAST_RETRY = RetryPolicy(max_retries=2, backoff_base_s=0.0, backoff_max_s=0.01, timeout_s=10.0)
OPERATOR_HEADERS = bearer_header(TEST_OPERATOR_TOKEN)
"""What an operator's HTTP client sends: /run and /evaluations/* need the green agent's operator token."""

# The seed's README "Test Example / Using Groq" request (Fair-Forge examples/agentic/aws-lambda/README.md): two
# responses (agent_response_1, agent_response_2) of a calculator agent to "What is 5 + 3?", config threshold 0.7,
# tool_threshold 0.75, verbose false. Reproduced field for field; only the key is a test placeholder.
SEED_GROQ_KEY = "gsk-test-SECRET-KEY-0123456789"


def _seed_dataset(assistant_id: str, answer: str) -> dict[str, Any]:
    return {
        "session_id": "eval_session",
        "assistant_id": assistant_id,
        "language": "english",
        "context": "You are a helpful calculator agent.",
        "conversation": [
            {
                "qa_id": "q1",
                "query": "What is 5 + 3?",
                "assistant": answer,
                "ground_truth_assistant": "5 + 3 equals 8",
                "agentic": {
                    "tools_used": [
                        {
                            "tool_name": "calculator",
                            "parameters": {"operation": "add", "a": 5, "b": 3},
                            "result": 8,
                            "step": 1,
                        }
                    ],
                    "final_answer_uses_tools": True,
                },
                "ground_truth_agentic": {
                    "expected_tools": [
                        {"tool_name": "calculator", "parameters": {"operation": "add", "a": 5, "b": 3}, "step": 1}
                    ],
                    "tool_sequence_matters": False,
                },
            }
        ],
    }


SEED_GROQ_REQUEST: dict[str, Any] = {
    "connector": {
        "class_path": "langchain_groq.chat_models.ChatGroq",
        "params": {"model": "llama-3.3-70b-versatile", "api_key": SEED_GROQ_KEY, "temperature": 0.0},
    },
    "datasets": [
        _seed_dataset("agent_response_1", "The result is 8."),
        _seed_dataset("agent_response_2", "5 + 3 is 8."),
    ],
    "config": {"threshold": 0.7, "tool_threshold": 0.75, "verbose": False},
}


@pytest.fixture
def seed_request() -> dict[str, Any]:
    """A fresh deep copy of the seed's Groq example request."""
    return copy.deepcopy(SEED_GROQ_REQUEST)


@contextlib.asynccontextmanager
async def green_server(tmp_path: Path, settings: EvaluationsSettings, **app_options: Any) -> AsyncIterator[str]:
    """The green agent's app with the evaluations component and the test operator token, on loopback; yields its
    base URL. ``app_options`` go to :func:`green_agent.service.a2a_server.create_app` (e.g. ``limits``)."""
    component = EvaluationsComponent(settings)
    token = OperatorToken(TEST_OPERATOR_TOKEN)
    async with serve_app_factory(
        lambda url: create_app(
            url,
            runs_dir=tmp_path / "runs",
            scoring_workers=1,
            components=[component],
            operator_token=token,
            **app_options,
        ),
        startup_timeout_s=120,
    ) as url:
        yield url


def operator_client(url: str, timeout: float = 30.0, **options: Any) -> httpx.AsyncClient:
    """An HTTP client for the green agent at ``url`` that authenticates as the operator (bearer header)."""
    return httpx.AsyncClient(base_url=url, timeout=timeout, headers=OPERATOR_HEADERS, **options)


def judge_settings(tmp_path: Path, **overrides: Any) -> JudgeSettings:
    """Judge settings for tests: a cache in tmp_path, fast retries, an empty environment (no real keys)."""
    values: dict[str, Any] = {"cache_path": tmp_path / "judge-cache.sqlite", "retry": FAST_RETRY, "environ": {}}
    values.update(overrides)
    return JudgeSettings(**values)


@contextlib.asynccontextmanager
async def finance_agent() -> AsyncIterator[str]:
    """The scripted finance white agent over A2A; yields its base URL."""
    async with serve_app_factory(lambda url: create_white_agent_app(make_agent("finance"), url + "/")) as url:
        yield url


@contextlib.asynccontextmanager
async def white_agent(agent: TurnAgent, name: str = "test agent") -> AsyncIterator[str]:
    """Any TurnAgent over A2A; yields its base URL."""
    async with serve_app_factory(
        lambda url: create_white_app(agent, card_url=url + "/", name=name, description=name)
    ) as url:
        yield url
