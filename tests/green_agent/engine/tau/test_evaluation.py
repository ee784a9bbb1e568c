"""green_agent.engine.tau.evaluation gives exactly what tau2's ``evaluate_simulation`` gives (or raises).

Each case is a real attempt (played in a tool sandbox, as in a battle) or a task edited into an edge case, evaluated
by both: tau2's unmodified evaluator (with its registry constructors, in this process) and ours. The whole RewardInfo
must be equal, and so must the exception when tau2 raises. Every attempt of the calibration sweeps and of the offline
demo is compared the same way in tests/green_agent/engine/test_scoring_agreement.py.
"""

from __future__ import annotations

import gc
import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from green_agent.engine.tau.databases import template
from green_agent.engine.tau.evaluation import GoldCache, evaluate, gold_hashes
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import TaskRef, load_tasks, resolve_task
from tests.green_agent.engine.tau.conftest import ENDED, STARTED, communicate_info, gold_actions, replay

quiet_tau2()
from tau2.data_model.simulation import SimulationRun  # noqa: E402
from tau2.data_model.tasks import RewardType, Task  # noqa: E402

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?")
"""tau2's replay error shows the ToolMessage it just made, with its creation time: not part of the verdict."""


@pytest.fixture(autouse=True, scope="module")
def fast_gc() -> Iterator[None]:
    """Raise the GC thresholds as the scoring workers do (3x faster for tau2's evaluator; results unchanged)."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    yield
    gc.set_threshold(*before)


def _failure(error: Exception) -> str:
    return TIMESTAMP.sub("<time>", f"{type(error).__name__}: {error}")


def tau2_verdict(simulation: SimulationRun, task: Task, domain: str) -> Any:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    try:
        return evaluate_simulation(simulation, task, EvaluationType.ALL, False, domain).model_dump(mode="json")
    except Exception as error:
        return _failure(error)


def our_verdict(simulation: SimulationRun, task: Task, domain: str, gold: GoldCache | None = None) -> Any:
    try:
        return evaluate(simulation, task, domain, gold).model_dump(mode="json")
    except Exception as error:
        return _failure(error)


def assert_same(simulation: dict[str, Any], task: Task, domain: str) -> Any:
    run = SimulationRun.model_validate(simulation)
    theirs = tau2_verdict(run, task, domain)
    assert our_verdict(run, task, domain) == theirs
    assert our_verdict(run, task, domain, GoldCache()) == theirs  # cold cache, then warm above
    return theirs


def _cases() -> list[tuple[str, int]]:
    """A spread of test tasks of every domain, all of mock (the sweeps compare every task, in the slow tests)."""
    cases = [("retail", i) for i in range(0, 40, 8)] + [("airline", i) for i in range(0, 20, 5)]
    cases += [("telecom", i) for i in range(0, 40, 10)]
    return cases + [("mock", i) for i in range(len(load_tasks("mock", None)))]


def _ref(domain: str, index: int) -> TaskRef:
    return resolve_task(domain, None if domain == "mock" else "test", index)


@pytest.mark.parametrize(("domain", "index"), _cases())
async def test_gold_and_broken_replays_get_tau2s_verdict(domain: str, index: int) -> None:
    ref = _ref(domain, index)
    actions = gold_actions(ref)
    variants: list[dict[str, Any]] = [
        {},
        {"skip": {len(actions) - 1}},  # the last (usually the write) action left out
        {"told": []},  # nothing communicated
        {"skip": set(range(0, len(actions), 2)), "told": communicate_info(ref)[:1]},
    ]
    verdicts = []
    for variant in variants:
        env, simulation = await replay(ref, **variant)
        await env.aclose()
        verdicts.append(assert_same(simulation, ref.task, domain))
    assert any(isinstance(v, dict) for v in verdicts)


async def test_an_attempt_that_changes_records_in_ways_the_gold_does_not() -> None:
    """Extra writes on other records, a booking (a new reservation), a certificate, unknown tools, bad arguments."""
    from green_agent.engine.tau.environment import AttemptEnvironment

    ref = _ref("airline", 1)
    async with await AttemptEnvironment.create(ref) as env:
        env.record_user_text("I want to change things.")
        user = next(iter(template("airline").database.__dict__["users"]))
        await env.call_tool("get_user_details", {"user_id": user})
        await env.call_tool("send_certificate", {"user_id": user, "amount": 150})
        await env.call_tool("search_direct_flight", {"origin": "JFK", "destination": "SFO", "date": "2024-05-20"})
        await env.call_tool("no_such_tool", {})
        await env.call_tool("cancel_reservation", {"reservation_id": "NOPE"})
        for name, arguments, requestor in gold_actions(ref):
            await env.call_tool(name, arguments, requestor=requestor)  # type: ignore[arg-type]
        env.record_assistant_text("Done.")
        env.record_user_text("###STOP###")
        simulation = env.simulation("user_stop", started_at=STARTED, ended_at=ENDED)
    verdict = assert_same(simulation, ref.task, "airline")
    assert verdict["db_check"]["db_match"] is False


async def test_a_tampered_tool_output_raises_what_tau2_raises() -> None:
    ref = _ref("retail", 0)
    env, simulation = await replay(ref)
    await env.aclose()
    next(m for m in simulation["messages"] if m["role"] == "tool")["content"] = '{"tampered": true}'
    verdict = assert_same(simulation, ref.task, "retail")
    assert isinstance(verdict, str) and verdict.startswith("ValueError: Tool call:")


@pytest.mark.parametrize("reason", ["max_steps", "too_many_errors", "agent_error", "user_error", "agent_stop"])
async def test_terminations(reason: str) -> None:
    ref = _ref("retail", 3)
    env, simulation = await replay(ref, termination=reason)
    await env.aclose()
    assert_same(simulation, ref.task, "retail")


def _edited(ref: TaskRef, **changes: Any) -> Task:
    criteria = ref.task.evaluation_criteria
    assert criteria is not None
    return ref.task.model_copy(update={"evaluation_criteria": criteria.model_copy(update=changes)})


async def test_edited_tasks_get_tau2s_verdict_and_their_own_gold() -> None:
    ref = _ref("retail", 12)
    env, simulation = await replay(ref)
    await env.aclose()
    run = SimulationRun.model_validate(simulation)
    assert len(ref.task.evaluation_criteria.actions) > 1
    cases = {
        "no criteria": ref.task.model_copy(update={"evaluation_criteria": None}),
        "NL assertion in the basis": _edited(ref, reward_basis=[RewardType.DB, RewardType.NL_ASSERTION]),
        "no actions, no assertions": _edited(ref, actions=None, env_assertions=None),
        "no actions": _edited(ref, actions=[]),
        "only the first action": _edited(ref, actions=ref.task.evaluation_criteria.actions[:1]),
        "action basis": _edited(ref, reward_basis=[RewardType.ACTION, RewardType.COMMUNICATE]),
        "everything": _edited(ref, reward_basis=list(RewardType)),
    }
    gold = GoldCache()
    for name, task in itertools.chain(cases.items(), [("original", ref.task)]):
        theirs = tau2_verdict(run, task, "retail")
        assert our_verdict(run, task, "retail", gold) == theirs, name
    assert tau2_verdict(run, cases["NL assertion in the basis"], "retail").startswith("ValueError: NL assertions")
    distinct = {  # one gold per distinct list of gold actions among the tasks that get as far as the gold
        str(task.evaluation_criteria.actions)
        for task in [*cases.values(), ref.task]
        if task.evaluation_criteria is not None
        and (task.evaluation_criteria.actions is not None or task.evaluation_criteria.env_assertions is not None)
    }
    assert gold.misses == len(gold) == len(distinct) >= 3


def test_the_gold_cache_is_bounded_and_keyed_by_what_the_gold_depends_on() -> None:
    gold = GoldCache(size=2)
    refs = [_ref("telecom", i) for i in range(3)]
    for ref in refs + refs[-1:]:
        assert gold.get(ref.task, "telecom") == gold_hashes(ref.task, "telecom")
    assert (len(gold), gold.misses, gold.hits) == (2, 3, 1)
    assert gold.get(refs[0].task, "telecom") and gold.misses == 4  # evicted, computed again
