"""Blame for an evaluator error the conversation provoked (issue 24, item 8).

In the mock domain, an agent that does nothing leaves no task_2 behind, and the task's environment assertion
(``assert_task_status(task_id="task_2", ...)``) raises "Task task_2 not found" inside tau2's evaluator. tau2's runner
scores such a run 0 (tau2 gives a do-nothing agent 1/9 on mock); Arena excluded it as a harness error, which lifted
the agent's score (1/8). It is the agent's failure: scored 0, ``task_incomplete`` / white_agent, tau2's error named.
Every other evaluator exception stays a harness error (tests/green_agent/engine/tau/test_scoring.py), and our evaluator
still raises exactly what tau2's raises (the contract of tests/green_agent/engine/tau/test_evaluation.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from green_agent.engine.attribution import classify_scored
from green_agent.engine.results import FailureCategory, FaultAuthor
from green_agent.engine.tau.evaluation import evaluate, provoking_assertion
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.scoring import ScoringError, ScoringPool
from green_agent.engine.tau.tasks import TaskRef, load_tasks, resolve_task
from tests.green_agent.engine.tau.conftest import gold_actions, replay

quiet_tau2()
from tau2.data_model.simulation import SimulationRun  # noqa: E402

MOCK_WITH_ASSERTIONS = 1
"""mock/base/1, ``create_task_1_with_env_assertions``: its env assertion checks a task the agent must create."""


async def do_nothing(ref: TaskRef) -> dict[str, Any]:
    """The conversation of an agent that calls no tool and tells nothing, until the user stops."""
    env, simulation = await replay(ref, skip=set(range(len(gold_actions(ref)))), told=[])
    await env.aclose()
    return simulation


async def test_an_assertion_that_raises_on_the_state_the_agent_left_is_the_agents_failure(
    scoring_pool: ScoringPool,
) -> None:
    ref = resolve_task("mock", None, MOCK_WITH_ASSERTIONS)
    simulation = await do_nothing(ref)
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 0.0
    assert "Task task_2 not found" in breakdown.raw["info"]["evaluator_error"]
    assert (breakdown.env_assertions_total, breakdown.env_assertions_met) == (1, 0)
    failure = classify_scored(breakdown)
    assert failure is not None and not failure.is_infrastructure
    assert (failure.category, failure.fault_author) == (FailureCategory.TASK_INCOMPLETE, FaultAuthor.WHITE_AGENT)
    assert "Task task_2 not found" in failure.detail and "assert_task_status(" in failure.detail


async def test_our_evaluator_still_raises_what_tau2_raises_and_marks_where() -> None:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    ref = resolve_task("mock", None, MOCK_WITH_ASSERTIONS)
    run = SimulationRun.model_validate(await do_nothing(ref))
    with pytest.raises(ValueError) as theirs:
        evaluate_simulation(run, ref.task, EvaluationType.ALL, False, "mock")
    with pytest.raises(ValueError) as ours:
        evaluate(run, ref.task, "mock")
    assert str(ours.value) == str(theirs.value) == "Task task_2 not found"
    assertion = provoking_assertion(ours.value)
    assert assertion is not None and assertion.func_name == "assert_task_status"
    assert provoking_assertion(ValueError("anything else")) is None


async def test_a_do_nothing_agent_scores_what_tau2_gives_it_on_mock(scoring_pool: ScoringPool) -> None:
    """Every mock task is scored (none excluded as an infrastructure error): 1 success in 9, tau2's 0.111."""
    rewards: dict[str, float] = {}
    for index in range(len(load_tasks("mock", None))):
        ref = resolve_task("mock", None, index)
        try:
            rewards[ref.task_id] = (await scoring_pool.score(ref, await do_nothing(ref))).reward
        except ScoringError as error:
            pytest.fail(f"{ref.key}: a do-nothing agent's attempt was excluded as a harness error: {error}")
    assert len(rewards) == 9
    assert sum(1 for reward in rewards.values() if reward == 1.0) / len(rewards) == pytest.approx(1 / 9)


async def test_a_tampered_tool_output_is_still_the_harness_s_error(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("mock", None, MOCK_WITH_ASSERTIONS)
    env, simulation = await replay(ref)
    await env.aclose()
    next(m for m in simulation["messages"] if m["role"] == "tool")["content"] = '{"tampered": true}'
    with pytest.raises(ScoringError, match="tau2 evaluator failed on mock"):
        await scoring_pool.score(ref, simulation)
