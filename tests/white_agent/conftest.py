"""Fixtures of the white-agent tests: serving an agent on loopback and the tau2 oracle."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.servers import serve_app_factory
from tests.white_agent.helpers import Answer, Talker, first_message
from white_agent.app import create_white_agent_app


@contextlib.asynccontextmanager
async def serving(agent: Any) -> AsyncIterator[str]:
    """Serve ``agent`` (replay, flaky or llm) on a free loopback port; yield its base URL."""
    async with serve_app_factory(lambda url: create_white_agent_app(agent, url + "/")) as base_url:
        yield base_url


async def run_attempt(
    talker: Talker, context_id: str, arena: dict[str, Any] | None, *, max_turns: int = 40, timeout: float | None = None
) -> list[Answer]:
    """Drive one attempt like a green agent that feeds back a fixed tool result, until the agent responds."""
    text, data, metadata = first_message("Hi, I need help with my order.", arena=arena)
    answers = [await talker.send(context_id, text, data=data, metadata=metadata, timeout=timeout)]
    while len(answers) < max_turns:
        action = answers[-1].action()
        if answers[-1].kind == "error" or action is None or action["name"] == "respond":
            break
        answers.append(await talker.send(context_id, 'Tool call result:\n{"ok": true}', timeout=timeout))
    return answers


def tau2_task(domain: str, split: str, task_id: str) -> Any:
    """The task straight from tau2 (the oracle the tests compare against)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")
    import importlib

    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    return next(t for t in module.get_tasks(split) if t.id == task_id)


def gold_calls(task: Any) -> list[dict[str, Any]]:
    """The assistant's gold actions as the agents write them: ``{"name", "arguments", "kwargs"}`` dicts."""
    return [
        {"name": a.name, "arguments": a.arguments, "kwargs": a.arguments}
        for a in task.evaluation_criteria.actions
        if a.requestor == "assistant"
    ]


@pytest.fixture(params=["1.0", "0.3"])
def wire(request: pytest.FixtureRequest) -> str:
    """Both A2A wire formats."""
    return str(request.param)
