"""Scoring with tau2's evaluator in the pool: gold replays score 1, broken ones score 0, evaluator failures raise."""

from __future__ import annotations

import asyncio

import pytest

from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.gold_gaps import gold_gap
from green_agent.engine.tau.scoring import (
    ScoringError,
    ScoringPool,
    breakdown_from_reward_info,
)
from green_agent.engine.tau.tasks import TaskRef, resolve_task
from tests.green_agent.engine.tau.conftest import ENDED, STARTED, communicate_info, gold_actions, replay

# (domain, index): tasks with a write action; retail 9 and 12 and airline 5 also carry communicate_info.
GOLD_CASES = [("retail", 0), ("retail", 9), ("retail", 12), ("airline", 0), ("airline", 5)]


@pytest.mark.parametrize(("domain", "index"), GOLD_CASES)
async def test_gold_replay_scores_one(scoring_pool: ScoringPool, domain: str, index: int) -> None:
    ref = resolve_task(domain, "test", index)
    _, simulation = await replay(ref)
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 1.0
    assert breakdown.db_match is True
    assert breakdown.communicate_met == breakdown.communicate_total == len(communicate_info(ref))
    assert breakdown.reward_basis == ["DB", "COMMUNICATE"]
    assert breakdown.raw["reward"] == 1.0


def _last_write(ref: TaskRef) -> int:
    writes = {
        "return_delivered_order_items",
        "exchange_delivered_order_items",
        "cancel_pending_order",
        "modify_pending_order_items",
        "modify_pending_order_address",
        "modify_pending_order_payment",
        "modify_user_address",
        "book_reservation",
        "cancel_reservation",
        "update_reservation_flights",
        "update_reservation_baggages",
        "update_reservation_passengers",
        "send_certificate",
    }
    return max(i for i, (name, _, _) in enumerate(gold_actions(ref)) if name in writes)


@pytest.mark.parametrize(("domain", "index"), [("retail", 12), ("airline", 0)])
async def test_dropping_the_final_write_scores_zero(scoring_pool: ScoringPool, domain: str, index: int) -> None:
    ref = resolve_task(domain, "test", index)
    _, simulation = await replay(ref, skip={_last_write(ref)})
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 0.0
    assert breakdown.db_match is False


async def test_telling_part_of_the_information_is_counted(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("retail", "test", 12)
    info = communicate_info(ref)
    assert len(info) == 2
    _, simulation = await replay(ref, told=info[:1])
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 0.0
    assert breakdown.db_match is True
    assert (breakdown.communicate_met, breakdown.communicate_total) == (1, 2)


async def test_telecom_gold_replay_scores_one_on_env_assertions(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("telecom", "test", 0)  # the gold actions are the user's, on the phone
    _, simulation = await replay(ref)
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 1.0
    assert breakdown.env_assertions_met == breakdown.env_assertions_total == 2
    assert breakdown.action_met == breakdown.action_total == 2


async def test_unscored_termination_gets_zero_without_checks(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("retail", "test", 0)
    _, simulation = await replay(ref, termination="max_steps")
    breakdown = await scoring_pool.score(ref, simulation)
    assert breakdown.reward == 0.0
    assert breakdown.db_match is None
    assert "max_steps" in breakdown.raw["info"]["note"]


async def test_evaluator_failure_is_a_scoring_error(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("retail", "test", 0)
    _, simulation = await replay(ref)
    tool_result = next(m for m in simulation["messages"] if m["role"] == "tool")
    tool_result["content"] = '{"tampered": true}'  # tau2's replay sees a different output and raises
    with pytest.raises(ScoringError, match="tau2 evaluator failed on retail/test/0"):
        await scoring_pool.score(ref, simulation)


async def test_task_mismatch_is_a_scoring_error(scoring_pool: ScoringPool) -> None:
    ref = resolve_task("retail", "test", 0)
    _, simulation = await replay(ref)
    wrong = TaskRef(domain="retail", split="test", index=0, task_id="not-this-one", task=ref.task)
    with pytest.raises(ScoringError, match="expected 'not-this-one'"):
        await scoring_pool.score(wrong, simulation)


async def test_concurrent_scores_are_independent(scoring_pool: ScoringPool) -> None:
    good = resolve_task("retail", "test", 9)
    bad = resolve_task("retail", "test", 12)
    simulations = [(good, (await replay(good))[1]), (bad, (await replay(bad, skip={_last_write(bad)}))[1])] * 3
    results = await asyncio.gather(*(scoring_pool.score(ref, sim) for ref, sim in simulations))
    assert [r.reward for r in results] == [1.0, 0.0] * 3


async def test_pool_as_context_manager_starts_and_closes() -> None:
    async with ScoringPool(max_workers=1) as pool:
        ref = resolve_task("mock", None, 0)
        _, simulation = await replay(ref)
        breakdown = await pool.score(ref, simulation)
        assert 0.0 <= breakdown.reward <= 1.0
    with pytest.raises(ScoringError, match="closed"):
        await pool.score(ref, simulation)


def test_breakdown_flattens_reward_info() -> None:
    info = {
        "reward": 0.0,
        "db_check": {"db_match": True, "db_reward": 1.0},
        "communicate_checks": [
            {"info": "a", "met": True, "justification": ""},
            {"info": "b", "met": False, "justification": ""},
        ],
        "action_checks": [{"action": {}, "action_match": False, "action_reward": 0.0}],
        "env_assertions": None,
        "reward_basis": ["DB", "COMMUNICATE"],
    }
    breakdown = breakdown_from_reward_info(info)
    assert breakdown.db_match is True
    assert (breakdown.communicate_met, breakdown.communicate_total) == (1, 2)
    assert (breakdown.action_met, breakdown.action_total) == (0, 1)
    assert breakdown.env_assertions_total == 0
    assert breakdown.raw == info


async def test_dead_worker_is_a_scoring_error_and_the_pool_recovers() -> None:
    psutil = pytest.importorskip("psutil")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ref = resolve_task("retail", "test", 9)
    _, simulation = await replay(ref)
    async with ScoringPool(max_workers=1) as pool:
        workers = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in before and "spawn_main" in " ".join(p.cmdline())  # not the resource tracker
        ]
        assert workers
        for worker in workers:
            worker.kill()
        psutil.wait_procs(workers, timeout=10)
        with pytest.raises(ScoringError, match="worker died"):
            await pool.score(ref, simulation)
        assert (await pool.score(ref, simulation)).reward == 1.0


async def test_mock_gold_gap_is_passable_by_an_agent_but_not_by_the_gold_replay(scoring_pool: ScoringPool) -> None:
    """The reason green_agent.engine.tau.gold_gaps gives for mock task 7, checked against tau2's evaluator: replaying
    its (empty) gold solution fails, the one call the reason names passes."""
    ref = resolve_task("mock", None, 7)
    assert gold_gap("mock", ref.task_id) is not None
    assert gold_actions(ref) == []
    replayed, gold = await replay(ref)
    await replayed.aclose()
    assert (await scoring_pool.score(ref, gold)).reward == 0.0
    async with await AttemptEnvironment.create(ref) as env:
        env.record_user_text("I want to mark task_2 as completed.")
        await env.call_tool("update_task_status", {"task_id": "task_2", "status": "completed"})
        env.record_assistant_text("Task task_2 is now completed.")
        env.record_user_text("Thanks! ###STOP###")
        fixed = env.simulation("user_stop", started_at=STARTED, ended_at=ENDED)
    assert (await scoring_pool.score(ref, fixed)).reward == 1.0


async def test_workers_score_without_ever_importing_litellm() -> None:
    """Scoring, and explaining failures (the database's too), never loads tau2's evaluator module, its registry or
    litellm in a worker; scores submitted before the workers are started queue until they are."""
    retail, telecom = resolve_task("retail", "test", 12), resolve_task("telecom", "test", 0)
    simulations = [(await replay(retail))[1], (await replay(retail, told=[]))[1], (await replay(telecom))[1]]
    skipped = (await replay(retail, skip={_last_write(retail)}))[1]
    async with ScoringPool(max_workers=1, warm=False) as pool:
        queued = asyncio.gather(
            pool.score(retail, simulations[0]),
            pool.score_explained(retail, simulations[1]),
            pool.score(telecom, simulations[2]),
            pool.score_explained(retail, skipped),
        )
        await pool.start()
        await pool.start()  # idempotent
        passed, explained, dual, db_failure = await queued
        state = await pool.worker_state()
    assert (passed.reward, explained.breakdown.reward, dual.reward) == (1.0, 0.0, 1.0)
    assert explained.explanation is not None and explained.explanation.communicate is not None
    assert db_failure.breakdown.db_match is False
    assert db_failure.explanation is not None and db_failure.explanation.db is not None  # the databases were diffed
    assert state["litellm_imported"] is False
    assert state["tau2_evaluator_imported"] is False and state["tau2_registry_imported"] is False
    assert (state["gold_misses"], state["gold_hits"]) == (2, 2)  # retail's gold computed once for its three attempts
    assert state["gc_thresholds"][0] >= 100_000


async def test_starting_a_closed_pool_does_nothing() -> None:
    pool = ScoringPool(max_workers=1, warm=False)
    await pool.close()
    await pool.start()
    with pytest.raises(ScoringError, match="closed"):
        await pool.worker_state()
