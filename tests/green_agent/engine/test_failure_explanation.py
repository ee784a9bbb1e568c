"""The failure explanation against real tau2 tasks with known differences: the flaky agent's faults replayed on real
retail environments and scored by the scoring worker's own entry point (``_evaluate``), in process.

What must hold: the explanation names what the fault broke (wrong_argument: the corrupted argument of the gold
action and the record the action should have changed; skip_action: the record's fields the skipped write changes);
the strings never told; and explaining never changes tau2's verdict, also when it fails.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from green_agent.engine.results import AttemptResult, FailureCategory, FailureExplanation
from green_agent.engine.tau import scoring
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.explain import explain_database
from green_agent.engine.tau.scoring import ScoringPool, _evaluate
from green_agent.engine.tau.tasks import TaskRef, resolve_task
from tests.green_agent.engine.conftest import MOCK, Arena
from tests.green_agent.engine.fakes import ScriptedWhite, respond, tool
from white_agent.flaky import _target_action, corrupt_arguments, faulty_script
from white_agent.gold import GoldTask, load_gold_task
from white_agent.replay import ReplayScript

STARTED, ENDED = "2026-01-01T10:00:00Z", "2026-01-01T10:00:30Z"
WRITE_TARGET_ID = {7: "order_id", 10: "order_id", 11: "user_id", 12: "order_id"}
"""Retail test tasks of the offline demo, with the argument naming the record their last write action changes."""


@pytest.fixture(autouse=True, scope="module")
def score_like_a_worker() -> Iterator[None]:
    """Score in this process as a scoring worker does (``scoring._worker_init`` minus its process hygiene): tau2's
    registry builds environments from the databases parsed once, and the GC thresholds are raised (3x faster)."""
    from tau2.registry import registry

    domains, thresholds = dict(registry._domains), gc.get_threshold()
    scoring._use_cached_databases()
    gc.set_threshold(100_000, 50, 100)
    yield
    gc.set_threshold(*thresholds)
    registry._domains.clear()
    registry._domains.update(domains)


def gold(index: int) -> tuple[TaskRef, GoldTask]:
    ref = resolve_task("retail", "test", index)
    return ref, load_gold_task("retail", "test", ref.task_id)


async def play(ref: TaskRef, script: ReplayScript) -> dict[str, Any]:
    """The simulation of an attempt performing ``script`` (the flaky agent's actions and final statement)."""
    env = await AttemptEnvironment.create(ref)
    try:
        env.record_user_text("Hi, I need help with my order.")
        for action in script.actions:
            await env.call_tool(action.name, action.arguments(), requestor="user" if action.by_user else "assistant")
        env.record_assistant_text(script.final_content)
        env.record_user_text("Thanks! ###STOP###")
        return env.simulation("user_stop", started_at=STARTED, ended_at=ENDED)
    finally:
        await env.aclose()


def scored(ref: TaskRef, simulation: dict[str, Any]) -> tuple[dict[str, Any], FailureExplanation | None]:
    """The worker's answer with and without explaining: the verdicts must be identical."""
    plain = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation)
    explained = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation, True)
    assert "error" not in plain and "explain_error" not in explained, (plain, explained)
    assert explained["ok"] == plain["ok"]
    data = explained.get("explanation")
    return plain["ok"], None if data is None else FailureExplanation.model_validate(data)


def target(gold_task: GoldTask) -> tuple[str, dict[str, Any]]:
    index = _target_action(gold_task)
    assert index is not None
    action = gold_task.steps[index]
    return action.name, action.arguments()


@pytest.mark.parametrize("index", sorted(WRITE_TARGET_ID))
async def test_wrong_argument_names_the_corrupted_argument_and_the_record_left_unchanged(index: int) -> None:
    ref, gold_task = gold(index)
    name, arguments = target(gold_task)
    corrupted, key = corrupt_arguments(arguments)
    simulation = await play(ref, faulty_script(gold_task, "wrong_argument"))
    info, explanation = scored(ref, simulation)
    assert info["reward"] == 0.0 and explanation is not None

    [action] = [a for a in explanation.actions if a.name == name]
    assert action.arguments == arguments
    assert action.closest is not None and action.closest.name == name
    assert action.differing_arguments == [key]
    assert action.closest.arguments[key] == corrupted[key]
    call_steps = [
        m["turn_idx"] for m in simulation["messages"] if any(c["name"] == name for c in m.get("tool_calls") or [])
    ]
    assert action.closest.step in call_steps

    record = arguments[WRITE_TARGET_ID[index]]
    assert explanation.db is not None and explanation.db.total >= 1
    assert {d.record for d in explanation.db.differences} == {record}
    assert record in explanation.summary and name in explanation.summary


@pytest.mark.parametrize("index", sorted(WRITE_TARGET_ID))
async def test_skip_action_names_the_fields_the_skipped_write_changes(index: int) -> None:
    ref, gold_task = gold(index)
    name, arguments = target(gold_task)
    simulation = await play(ref, faulty_script(gold_task, "skip_action"))
    info, explanation = scored(ref, simulation)
    assert info["reward"] == 0.0 and explanation is not None and explanation.db is not None

    record = arguments[WRITE_TARGET_ID[index]]
    assert {d.record for d in explanation.db.differences} == {record}
    assert not explanation.db.truncated and explanation.db.total == len(explanation.db.differences)
    [action] = explanation.actions
    assert action.name == name
    assert action.closest is None or action.closest.name != name  # the write never happened


async def test_a_skipped_cancellation_reads_as_the_status_expected_and_got() -> None:
    ref, gold_task = gold(10)  # cancel_pending_order of #W9348897
    _, explanation = scored(ref, await play(ref, faulty_script(gold_task, "skip_action")))
    assert explanation is not None and explanation.db is not None
    by_field = {d.field: d for d in explanation.db.differences}
    status = by_field["status"]
    assert (status.table, status.record, status.change) == ("orders", "#W9348897", "changed")
    assert (json.loads(status.expected or ""), json.loads(status.actual or "")) == ("cancelled", "pending")
    refund = by_field["payment_history[1]"]
    assert refund.change == "missing_field" and refund.actual is None
    assert json.loads(refund.expected or "")["transaction_type"] == "refund"
    assert explanation.summary.startswith("database: 3 differences (orders #W9348897 status")


async def test_the_strings_never_told_are_listed_and_nothing_else() -> None:
    ref, gold_task = gold(12)  # communicate_info ["60", "mastercard"]
    info, explanation = scored(ref, await play(ref, faulty_script(gold_task, "partial_final")))
    assert info["reward"] == 0.0 and explanation is not None
    assert explanation.communicate is not None and explanation.communicate.missing == ["mastercard"]
    assert explanation.db is None and explanation.actions == [] and explanation.env_assertions == []
    assert explanation.summary == "never told the user: 1 required string"


async def test_telecom_lists_the_unmet_assertions_and_the_customers_own_action() -> None:
    ref = resolve_task("telecom", "test", 0)  # the customer must toggle roaming on their phone (a user tool)
    gold_task = load_gold_task("telecom", "test", ref.task_id)
    simulation = await play(ref, faulty_script(gold_task, "wrong_argument"))
    info, explanation = scored(ref, simulation)
    assert info["reward_basis"] == ["ENV_ASSERTION"] and explanation is not None
    assert explanation.db is None  # not part of this task's reward
    assert [a.function for a in explanation.env_assertions] == ["assert_mobile_data_status", "assert_internet_speed"]
    [action] = explanation.actions
    assert (action.name, action.requestor, action.differing_arguments) == (
        "toggle_roaming",
        "user",
        ["unexpected_argument"],
    )
    assert action.closest is not None and action.closest.arguments == {"unexpected_argument": "x"}

    from tau2.data_model.simulation import SimulationRun

    messages = list(SimulationRun.model_validate(simulation).messages)
    diff = explain_database(ref.task, messages, "telecom")  # the phone's own database differs where roaming is
    assert ("user_db", "device", "roaming_enabled", "true", "false") in {
        (d.table, d.record, d.field, d.expected, d.actual) for d in diff.differences
    }


async def test_a_success_is_not_explained() -> None:
    ref, gold_task = gold(12)
    info, explanation = scored(ref, await play(ref, faulty_script(gold_task, None)))
    assert info["reward"] == 1.0 and explanation is None


async def test_a_failure_to_explain_keeps_the_verdict_and_leaves_no_explanation(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ref, gold_task = gold(10)
    simulation = await play(ref, faulty_script(gold_task, "skip_action"))
    plain = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation)

    def broken(*args: Any) -> FailureExplanation:
        raise RuntimeError("explainer bug")

    monkeypatch.setattr("green_agent.engine.tau.explain.explain_failure", broken)
    with caplog.at_level(logging.WARNING, logger=scoring.__name__):
        answer = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation, True)
    assert answer["ok"] == plain["ok"] and "explanation" not in answer
    assert "RuntimeError: explainer bug" in answer["explain_error"]
    assert "explaining a failed attempt" in caplog.text
    assert scoring._explanation_from(answer, ref) is None


async def test_the_pool_scores_the_same_with_and_without_the_explanation(scoring_pool: ScoringPool) -> None:
    ref, gold_task = gold(11)
    simulation = await play(ref, faulty_script(gold_task, "wrong_argument"))
    breakdown = await scoring_pool.score(ref, simulation)
    scored_simulation = await scoring_pool.score_explained(ref, simulation)
    assert scored_simulation.breakdown == breakdown and breakdown.reward == 0.0
    explanation = scored_simulation.explanation
    assert explanation is not None and explanation.db is not None
    assert [d.field for d in explanation.db.differences][:1] == ["address.address1"]


async def test_an_attempt_stores_the_explanation_in_its_result_and_trajectory(arena: Arena) -> None:
    wrong = tool("create_task", user_id="user_1", title="Unimportant Meeting")
    result = await arena.play(ScriptedWhite(wrong, respond("Done: the task now exists for user_1.")), ref=MOCK)
    assert result.failure is not None and result.failure.category is FailureCategory.TASK_INCOMPLETE
    explanation = result.explanation
    assert explanation is not None and explanation.db is not None
    titles = [d for d in explanation.db.differences if d.field == "title"]
    assert [(d.table, d.expected, d.actual) for d in titles] == [
        ("tasks", '"Important Meeting"', '"Unimportant Meeting"')
    ]
    [action] = explanation.actions
    assert action.differing_arguments == ["title"]
    assert result.trajectory_file is not None
    header = json.loads((arena.trajectories.parent / result.trajectory_file).read_text().splitlines()[0])
    assert header["attempt"]["explanation"] == explanation.model_dump(mode="json")
    assert AttemptResult.model_validate_json(result.model_dump_json()) == result


async def test_a_successful_attempt_has_no_explanation_key(arena: Arena) -> None:
    create = tool("create_task", user_id="user_1", title="Important Meeting")
    result = await arena.play(ScriptedWhite(create, respond("Done: the task 'Important Meeting' exists.")), ref=MOCK)
    assert result.outcome == "success" and result.explanation is None
    assert "explanation" not in result.model_dump(mode="json")


# -- property: explaining never alters tau2's verdict -----------------------------------------------------------------

CASES = st.tuples(
    st.sampled_from([7, 9, 10, 11, 12]),
    st.sampled_from([None, "skip_action", "wrong_argument", "drop_final", "partial_final"]),
    st.sets(st.integers(0, 12), max_size=3),
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=CASES)
def test_explaining_never_alters_the_reward(case: tuple[int, str | None, set[int]]) -> None:
    index, fault, dropped = case
    ref, gold_task = gold(index)
    script = faulty_script(gold_task, fault)
    script = ReplayScript(
        actions=tuple(a for i, a in enumerate(script.actions) if i not in dropped), final_content=script.final_content
    )
    task_before = ref.task.model_dump(mode="json")
    simulation = asyncio.run(play(ref, script))
    frozen = json.dumps(simulation, sort_keys=True)
    first = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation, True)
    again = _evaluate(ref.domain, ref.split, ref.index, ref.task_id, simulation)
    assert "error" not in first and "explain_error" not in first
    assert first["ok"] == again["ok"]
    assert ("explanation" in first) == (first["ok"]["reward"] < 1.0)
    assert json.dumps(simulation, sort_keys=True) == frozen  # the simulation is read, never changed
    assert ref.task.model_dump(mode="json") == task_before  # nor the task (its gold actions are replayed)


def test_results_without_an_explanation_read_as_before(tmp_path: Path) -> None:
    legacy = Path(__file__).parent / "results" / "data" / "legacy_summary.json"
    attempts = json.loads(legacy.read_text(encoding="utf-8"))["attempts"]
    for data in attempts:
        attempt = AttemptResult.model_validate(data)
        assert attempt.explanation is None and "explanation" not in attempt.model_dump(mode="json")
