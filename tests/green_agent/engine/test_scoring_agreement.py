"""The battle's scores are tau2's: every attempt is re-scored with tau2's unmodified ``evaluate_simulation``.

The scoring workers compute tau2's verdict without tau2's ``evaluator.py`` (green_agent/engine/tau/evaluation.py:
no litellm, cached gold hashes, lazily copied databases). This module holds them to it: a finished battle's run
directory is read back as tau2 SimulationRuns (``launcher.cli.tau2_export.build_results``, the same reader as
``arena export --format tau2``), each attempt is evaluated by tau2 itself
(``evaluate_simulation(sim, task, EvaluationType.ALL, solo_mode=False, domain)``, tau2's registry constructors,
litellm imported), and the reward and the whole RewardInfo must equal what the battle recorded (``AttemptResult.reward``
and ``breakdown.raw``).

Which attempts: every attempt whose recorded breakdown is a RewardInfo (tau2 scored it). Attempts stopped before
scoring (a time limit, a crash, a malformed reply: Arena records a note, not a RewardInfo) are checked too, more
weakly: tau2, given the exported termination reason, must also give them 0 without any check, and so must Arena.
Infrastructure errors have no reward and are not exported (tau2 has no such notion); they are counted.

Used here on the offline demo battle (scenarios/offline_demo.toml, played through A2A with the flaky agent) and by
tests/green_agent/service/test_calibration_sweep.py on every calibration sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from green_agent.engine.config import remote_config_dict
from green_agent.engine.results import BattleResult
from green_agent.engine.tau.quiet import quiet_tau2
from launcher.cli.scenario import load_scenario
from launcher.cli.tau2_export import build_results
from tests.green_agent.service.conftest import assess, green_url, runs_dir, white_agent

quiet_tau2()
from tau2.data_model.simulation import Results, RewardInfo  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "scenarios" / "offline_demo.toml"
REWARD_INFO_FIELDS = tuple(RewardInfo.model_fields)
"""reward, db_check, env_assertions, action_checks, nl_assertions, communicate_checks, reward_basis,
reward_breakdown, info: the whole of tau2's verdict."""

__all__ = ["Agreement", "green_url", "rescore_with_tau2", "runs_dir"]  # the fixtures are re-exported for pytest


@dataclass
class Agreement:
    """How a battle's recorded scores compare with tau2's own evaluation of the same attempts."""

    scored: int = 0
    """Attempts tau2 scored in the battle (a RewardInfo was recorded), re-scored here and compared in full."""
    unscored: int = 0
    """Attempts stopped before scoring: tau2 must give them 0 from their termination reason alone, as Arena did."""
    infra_errors: int = 0
    """Attempts without a reward (infrastructure errors): nothing to compare."""
    disagreements: list[str] = field(default_factory=list)

    @property
    def compared(self) -> int:
        return self.scored + self.unscored


@contextlib.contextmanager
def _fast_gc() -> Iterator[None]:
    """Raise the GC thresholds while tau2 evaluates (3x faster on its many small objects; results unchanged)."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    return [name for name in REWARD_INFO_FIELDS if ours.get(name) != theirs.get(name)]


def _runner_env_kwargs(result: BattleResult, domain: str, task: Any) -> dict[str, Any]:
    """What tau2 v1.0.x's runner gives a banking_knowledge evaluation (``tau2.runner.build._build_env_kwargs``, with
    its own allowlist function): the battle's retrieval variant (Arena's default bm25 when the config names none),
    the task and its read-log allowlist. Nothing for other domains."""
    if domain != "banking_knowledge":
        return {}
    from tau2.runner.build import _derive_read_log_allowlist

    variant = result.config.retrieval or "bm25"
    return {
        "env_kwargs": {
            "retrieval_variant": variant,
            "task": task,
            "read_log_allowlist": _derive_read_log_allowlist(task),
        }
    }


def rescore_with_tau2(result: BattleResult, run_dir: Path) -> Agreement:
    """Re-score every attempt of a finished battle with tau2's unmodified evaluator and compare (blocking, slow)."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # litellm: fine in a test

    results = Results.model_validate_json(build_results(result, run_dir).text)
    simulations = {simulation.id: simulation for simulation in results.simulations}
    tasks = {task.id: task for task in results.tasks}
    prefixed = len({attempt.domain for attempt in result.attempts}) > 1
    agreement = Agreement()
    with _fast_gc():
        for attempt in result.attempts:
            label = f"{attempt.task_key}#{attempt.attempt}"
            if attempt.reward is None:
                agreement.infra_errors += 1
                continue
            simulation = simulations.get(f"{result.battle_id}/{attempt.task_key}/{attempt.attempt}")
            if simulation is None:
                agreement.disagreements.append(f"{label}: scored but missing from the tau2 export")
                continue
            task = tasks[f"{attempt.domain}/{attempt.task_id}" if prefixed else attempt.task_id]
            task = task.model_copy(update={"id": attempt.task_id})
            try:
                theirs = evaluate_simulation(
                    simulation=simulation,
                    task=task,
                    evaluation_type=EvaluationType.ALL,
                    solo_mode=False,
                    domain=attempt.domain,
                    **_runner_env_kwargs(result, attempt.domain, task),
                ).model_dump(mode="json")
            except Exception as error:  # tau2 failing on an attempt Arena scored is a disagreement too
                agreement.disagreements.append(f"{label}: tau2 raised {type(error).__name__}: {error}"[:500])
                continue
            recorded = attempt.breakdown.raw if attempt.breakdown is not None else {}
            if "reward" in recorded:  # tau2 scored it in the battle: the whole verdict must be the same
                agreement.scored += 1
                differing = _differences(recorded, theirs)
                if differing or attempt.reward != theirs["reward"]:
                    shown = {name: (recorded.get(name), theirs.get(name)) for name in differing}
                    agreement.disagreements.append(f"{label}: reward {attempt.reward} {json.dumps(shown)[:800]}")
            else:  # stopped before scoring: tau2 must also give 0 without any check
                agreement.unscored += 1
                if attempt.reward != 0.0 or theirs["reward"] != 0.0 or theirs["reward_basis"] is not None:
                    agreement.disagreements.append(
                        f"{label}: unscored ({attempt.termination_reason}), ours {attempt.reward}, tau2 {theirs}"[:800]
                    )
    return agreement


# --- the offline demo ------------------------------------------------------------------------------------------------

pytestmark = pytest.mark.asyncio(loop_scope="session")


@dataclass(frozen=True)
class DemoRun:
    result: BattleResult
    run_dir: Path
    outcome: Any


_demo: DemoRun | None = None


async def _demo_battle(green: str, runs: Path) -> DemoRun:
    """The offline demo battle, played once per session (both tests below read it)."""
    global _demo
    if _demo is None:
        scenario = load_scenario(DEMO)
        white = scenario.white_agent
        async with white_agent(white.kind, seed=white.seed, fault_rates=dict(white.fault_rates)) as url:
            outcome = await assess(green, url, remote_config_dict(scenario.pass_k_config))
        assert outcome.state == "completed", outcome.error
        result = BattleResult.model_validate(outcome.result)
        _demo = DemoRun(result, runs / result.battle_id, outcome)
    return _demo


async def test_every_attempt_of_the_offline_demo_scores_as_tau2_scores_it(green_url: str, runs_dir: Path) -> None:
    demo = await _demo_battle(green_url, runs_dir)
    macro = {row["j"]: row["pass_hat_mean"] for row in demo.outcome.result["summary"]["macro"]}
    assert (round(macro[1], 3), round(macro[2], 3), round(macro[4], 3)) == (0.55, 0.267, 0.0)  # it is the demo
    agreement = await asyncio.to_thread(rescore_with_tau2, demo.result, demo.run_dir)
    print(f"offline demo vs tau2: {agreement}")  # shown with -s: the counts for the record
    assert agreement.disagreements == []
    assert agreement.compared + agreement.infra_errors == len(demo.result.attempts) == 20
    assert agreement.scored >= 15  # most attempts end in a stop that tau2 scores; the rest are timeouts, crashes...
    assert agreement.unscored >= 1  # ...of which there is at least one (the no_reply timeout)


async def test_a_score_that_differs_from_tau2s_is_reported(green_url: str, runs_dir: Path) -> None:
    demo = await _demo_battle(green_url, runs_dir)
    data = demo.result.model_dump(mode="json")
    scored = [a for a in data["attempts"] if "reward" in ((a.get("breakdown") or {}).get("raw") or {})]
    failed = next(a for a in scored if not a["breakdown"]["raw"]["db_check"]["db_match"])  # a skipped write, say
    failed["breakdown"]["raw"]["db_check"] = {"db_match": True, "db_reward": 1.0}  # not what tau2 says
    passed = next(a for a in scored if a["reward"] == 1.0)
    passed["breakdown"]["raw"]["communicate_checks"] = []
    tampered = BattleResult.model_validate(data)
    agreement = await asyncio.to_thread(rescore_with_tau2, tampered, demo.run_dir)
    shown = "\n".join(agreement.disagreements)
    assert len(agreement.disagreements) == 2, shown
    assert "communicate_checks" in shown
