"""Budgets (issue 27): ``max_cost_usd`` and ``max_wall_s`` stop a battle cleanly (nothing new starts, what finished is
kept, the summary says why), and ``--resume`` with a higher budget finishes it with the numbers of an uninterrupted
run. Remote configs may lower an operator's budget, never raise or remove it. No timed assertion: the wall clock is
injected."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.battle import Battle
from green_agent.engine.battle_limits import BattleLimits, BudgetStop
from green_agent.engine.budget import BudgetTracker
from green_agent.engine.config import BattleConfig
from green_agent.engine.costs import AGENT_USAGE_KEY
from green_agent.engine.results import AttemptResult, BattleResult
from green_agent.engine.run_store import config_hash, summary_status
from green_agent.engine.tau.scoring import ScoringPool
from tests.support.servers import serve_app_factory
from white_agent.app import make_agent
from white_agent.protocol import GreenTurn
from white_agent.server import AgentReply
from white_agent.server import create_app as create_white_app

COST_PER_REPLY = 0.01
CONFIG: dict[str, Any] = {
    "domain": "retail",
    "task_index": [7, 9, 10, 11],
    "k": 2,
    "seed": 3,
    "concurrency": 1,
    "calibration": True,
    "turn_timeout_s": 30,
}
"""8 attempts one at a time (the stop point is deterministic), against the flaky agent (seeded faults: a mix of
successes and failures, each decided by (seed, task, attempt), so a resumed battle ends with the same numbers)."""


class CostlyFlaky:
    """The flaky agent, also reporting that each reply cost :data:`COST_PER_REPLY` (arena/usage)."""

    card_name = "flaky reporting cost"
    card_description = "Flaky agent with arena/usage metadata."

    def __init__(self) -> None:
        self.inner = make_agent("flaky", seed=5, fault_rates={"skip_action": 0.3, "wrong_argument": 0.2})

    async def reply(self, context_id: str, turn: GreenTurn) -> AgentReply:
        answer = await self.inner.reply(context_id, turn)
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": COST_PER_REPLY}
        return dataclasses.replace(answer, metadata={AGENT_USAGE_KEY: usage})

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def costly_agent() -> AsyncIterator[str]:
    agent = CostlyFlaky()
    app = lambda url: create_white_app(agent, card_url=url, name=agent.card_name, description=agent.card_description)  # noqa: E731
    async with serve_app_factory(app) as url:
        yield url


def ticking(step_s: float) -> Callable[[], float]:
    """A clock that advances ``step_s`` each time it is read."""
    now = [0.0]

    def clock() -> float:
        now[0] += step_s
        return now[0]

    return clock


def numbers(result: BattleResult) -> dict[str, Any]:
    """What an uninterrupted run and a resumed one must share: every figure and every attempt's outcome."""
    return {
        "summary": result.summary.model_dump(mode="json"),
        "failure_breakdown": result.failure_breakdown,
        "infrastructure_errors": result.infrastructure_errors,
        "attempts": [(a.task_key, a.attempt, a.outcome, a.reward, a.steps) for a in result.attempts],
        "cost": result.usage.total_cost_usd if result.usage else None,
    }


async def run_battle(
    white: str, scoring: ScoringPool, runs: Path, config: BattleConfig, **options: Any
) -> BattleResult:
    return await Battle("budget-1", white, config, scoring=scoring, runs_dir=runs, **options).run()


@pytest.mark.asyncio(loop_scope="session")
async def test_a_budget_stops_the_battle_and_a_resume_with_more_finishes_it_with_the_same_numbers(
    tmp_path: Path,
) -> None:
    base = BattleConfig.model_validate(CONFIG)
    async with ScoringPool(max_workers=1) as scoring, costly_agent() as white:
        full = await run_battle(white, scoring, tmp_path / "full", base)
        assert full.budget_stop is None and len(full.attempts) == 8
        outcomes = {a.outcome for a in full.attempts}
        assert outcomes == {"success", "failure"}, outcomes  # the numbers are not trivially all-pass

        # max_cost_usd below the battle's cost: it stops, keeps what finished, and says why
        cheap = base.model_copy(update={"max_cost_usd": 0.05})
        stopped = await run_battle(white, scoring, tmp_path / "budget", cheap)
        stop = stopped.budget_stop
        assert stop is not None and stop.reason == "max_cost_usd" and stop.limit == 0.05
        assert 1 <= len(stopped.attempts) < 8 and stop.attempts_done == len(stopped.attempts)
        assert stop.attempts_total == 8 and stop.spent >= 0.05
        assert stopped.status == "completed"
        run_dir = tmp_path / "budget" / "budget-1"
        written = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        assert BudgetStop.model_validate(written["budget_stop"]) == stop
        markdown = (run_dir / "summary.md").read_text(encoding="utf-8")
        assert "> PARTIAL: stopped by budget: max_cost_usd $0.05 reached" in markdown
        assert summary_status(run_dir) == "budget_stopped"  # unfinished: a resume may continue it

        # --resume with the same budget stops again at once; with a higher one it finishes
        again = await run_battle(white, scoring, tmp_path / "budget", cheap, resume=True)
        assert again.budget_stop is not None and len(again.attempts) == len(stopped.attempts)
        more = base.model_copy(update={"max_cost_usd": 100.0})
        resumed = await run_battle(white, scoring, tmp_path / "budget", more, resume=True)
    assert resumed.budget_stop is None and summary_status(run_dir) == "completed"
    assert resumed.resumed_attempts == len(stopped.attempts)
    assert numbers(resumed) == numbers(full)


@pytest.mark.asyncio(loop_scope="session")
async def test_max_wall_s_stops_the_battle_on_its_clock_and_a_resume_finishes_it(tmp_path: Path) -> None:
    base = BattleConfig.model_validate(CONFIG)
    async with ScoringPool(max_workers=1) as scoring, costly_agent() as white:
        full = await run_battle(white, scoring, tmp_path / "full", base)
        # each read of the clock is 10 s later: the starts of attempts 1 and 2 are under 25 s, the third is not
        timed = base.model_copy(update={"max_wall_s": 25.0})
        stopped = await run_battle(white, scoring, tmp_path / "wall", timed, clock=ticking(10.0))
        resumed = await run_battle(white, scoring, tmp_path / "wall", base, resume=True)
    stop = stopped.budget_stop
    assert stop is not None and (stop.reason, stop.limit, stop.spent) == ("max_wall_s", 25.0, 30.0)
    assert len(stopped.attempts) == 2 and stop.attempts_done == 2
    assert "max_wall_s 25 s reached" in stop.text()
    assert resumed.budget_stop is None and numbers(resumed) == numbers(full)


def attempt_costing(dollars: float | None) -> AttemptResult:
    data: dict[str, Any] = {
        "battle_id": "b",
        "termination_reason": "user_stop",
        "task_key": "retail/test/0",
        "domain": "retail",
        "split": "test",
        "task_index": 0,
        "task_id": "0",
        "attempt": 1,
        "outcome": "success",
        "reward": 1.0,
        "steps": 1,
        "duration_s": 1.0,
        "context_id": "c",
        "usage": {"agent": {"calls": 1, "reported": 1, "cost_usd": dollars}},
    }
    return AttemptResult.model_validate(data)


def test_the_tracker_counts_known_costs_only_and_remembers_its_stop() -> None:
    tracker = BudgetTracker(BattleLimits(max_cost_usd=0.3), clock=ticking(1.0))
    finished = [attempt_costing(0.1), attempt_costing(None)]
    assert not tracker.exhausted(finished, 10)  # an unknown cost counts nothing
    finished += [attempt_costing(0.1), attempt_costing(0.1)]
    assert tracker.exhausted(finished, 10)
    assert tracker.stop is not None and tracker.stop.spent == pytest.approx(0.3)
    assert tracker.exhausted([], 10)  # once spent, it stays spent
    assert tracker.summary(4) == tracker.stop and tracker.summary(10) is None  # everything ran all the same
    assert not BudgetTracker(BattleLimits()).exhausted(finished, 10)  # no budget, no stop


def test_budgets_do_not_change_the_config_hash_so_a_resume_may_raise_them() -> None:
    base = BattleConfig()
    assert "max_cost_usd" not in base.model_dump(mode="json")  # older configs read and hash as before
    raised = base.model_copy(update={"max_cost_usd": 9.0, "max_wall_s": 60.0, "provider_max_concurrency": 2})
    assert config_hash(raised) == config_hash(base)
