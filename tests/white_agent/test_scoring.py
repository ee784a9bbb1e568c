"""The replay and flaky scripts judged by tau2's own evaluator (in process, no A2A): each script-level fault must
move exactly the check it is meant to move, so the green agent can classify it (task_incomplete, missing_outputs,
incomplete_outputs)."""

from __future__ import annotations

import importlib
import json
import os
import re
from typing import Any

import pytest

from white_agent.flaky import FlakyAgent
from white_agent.protocol import ArenaInfo, GreenTurn
from white_agent.replay import ReplayAgent

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _tau2() -> Any:
    from loguru import logger

    logger.disable("tau2")
    from tau2.data_model import message, simulation
    from tau2.evaluator import evaluator

    return message, simulation, evaluator


async def _score(agent: ReplayAgent, domain: str, task_id: str) -> Any:
    """Play the agent's script against a fresh tau2 environment, end with the user's stop, evaluate."""
    message, simulation, evaluator = _tau2()
    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    task = next(t for t in module.get_tasks("test") if t.id == task_id)
    env = module.get_environment()
    history: list[Any] = [message.AssistantMessage(role="assistant", content="Hi! How can I help you today?")]
    history.append(message.UserMessage(role="user", content="I need help."))
    arena = ArenaInfo(domain=domain, split="test", task_id=task_id, attempt=1, calibration=True)
    turn = GreenTurn(kind="first", text="User message: I need help.", content="I need help.", arena=arena)
    for step in range(50):
        reply = await agent.reply("ctx", turn)
        match = re.search(r"<json>(.*)</json>", reply.text, re.DOTALL)
        assert match is not None, reply
        action = json.loads(match.group(1))
        if action["name"] == "respond":
            history.append(message.AssistantMessage(role="assistant", content=action["arguments"]["content"]))
            history.append(message.UserMessage(role="user", content="###STOP###"))
            break
        call = message.ToolCall(id=f"call_{step}", name=action["name"], arguments=action["arguments"])
        history.append(message.AssistantMessage(role="assistant", tool_calls=[call]))
        result = env.get_response(call)
        history.append(result)
        turn = GreenTurn(kind="tool_result", text=f"Tool call result:\n{result.content}", content=result.content)
    run = simulation.SimulationRun(
        id="run",
        task_id=task_id,
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=simulation.TerminationReason.USER_STOP,
        messages=history,
    )
    return evaluator.evaluate_simulation(run, task, evaluator.EvaluationType.ALL, False, domain)


@pytest.mark.parametrize(
    ("fault", "reward", "db_match", "communicated"),
    [
        (None, 1.0, True, [True, True]),
        ("skip_action", 0.0, False, [True, True]),
        ("wrong_argument", 0.0, False, [True, True]),
        ("drop_final", 0.0, True, [False, False]),
        ("partial_final", 0.0, True, [True, False]),
        ("task_reply", 1.0, True, [True, True]),
    ],
)
async def test_faults_move_the_intended_check(
    fault: str | None, reward: float, db_match: bool, communicated: list[bool]
) -> None:
    agent = ReplayAgent() if fault is None else FlakyAgent(seed=0, fault_rates={fault: 1.0})
    info = await _score(agent, "retail", "40")
    assert info.reward == reward
    assert info.db_check.db_match is db_match
    assert [c.met for c in info.communicate_checks] == communicated


async def test_replay_scores_full_marks_on_an_airline_task() -> None:
    info = await _score(ReplayAgent(), "airline", "2")
    assert info.reward == 1.0
