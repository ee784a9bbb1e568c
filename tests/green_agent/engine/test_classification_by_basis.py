"""A failed score is explained by the checks of the task's reward basis only, for every basis tau2's tasks use.

tau2 runs every check on every task (database, communicated information, gold actions, environment assertions) but
the reward is the product of the checks the task's ``reward_basis`` names: a telecom task scored on environment
assertions alone has a database check in its RewardInfo that does not count. The first test derives every
(domain, reward basis) pair from tau2's task data at run time and requires a case below for each, so a new basis in
a tau2 upgrade fails here instead of going unexplained. Each case plays a real task in-process (opening, the user's
first message, optionally some tool calls, the agent ends the conversation), scores it with tau2's own
``evaluate_simulation`` exactly as the scoring workers do, and classifies it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from green_agent.engine.attribution import MAX_ARGUMENT_CHARS, MAX_DETAIL_CHARS, classify_scored
from green_agent.engine.results import FailureCategory, FaultAuthor, RewardBreakdown
from green_agent.engine.tau.environment import build_environment
from green_agent.engine.tau.scoring import breakdown_from_reward_info
from green_agent.engine.tau.tasks import TaskRef, list_domains, load_tasks, resolve_task

Basis = frozenset[str]
Call = tuple[str, dict[str, Any], str]

DB_DIFFERS = "conversation ended but the database state differs from the goal state"
CHECK_PHRASES = {
    "DB": "database state",
    "COMMUNICATE": "told to the user",
    "ACTION": "actions performed",
    "ENV_ASSERTION": "environment assertions",
}
"""The phrase each check's failure detail carries: a check outside the basis must never be named."""
GOODBYE = "I am sorry, I cannot help with that. Goodbye."


@dataclass(frozen=True)
class Case:
    name: str
    domain: str
    split: str
    index: int
    basis: Basis
    calls: tuple[Call, ...]
    """Tool calls (name, arguments, requestor) made before the agent's last message."""
    said: str
    """The agent's last message, which ends the conversation."""
    db_match: bool
    """tau2's database check, counted or not: False outside the basis shows the check that must be ignored."""
    category: FailureCategory
    detail: str


def case(
    name: str,
    task: str,
    basis: set[str],
    category: FailureCategory,
    detail: str,
    *,
    db_match: bool,
    calls: tuple[Call, ...] = (),
    said: str = GOODBYE,
) -> Case:
    domain, split, index = task.split("/")
    return Case(name, domain, split, int(index), frozenset(basis), calls, said, db_match, category, detail)


INCOMPLETE, MISSING, PARTIAL = (
    FailureCategory.TASK_INCOMPLETE,
    FailureCategory.MISSING_OUTPUTS,
    FailureCategory.INCOMPLETE_OUTPUTS,
)
CASES = [
    # retail and airline: COMMUNICATE + DB, explained exactly as before the basis was considered
    case("nothing_done", "retail/test/0", {"COMMUNICATE", "DB"}, INCOMPLETE, DB_DIFFERS, db_match=False),
    case(
        "nothing_told",
        "retail/test/22",
        {"COMMUNICATE", "DB"},
        MISSING,
        "required information told to the user: 0 of 2",
        db_match=True,
    ),
    case(
        "half_told",
        "retail/test/22",
        {"COMMUNICATE", "DB"},
        PARTIAL,
        "required information told to the user: 1 of 2",
        db_match=True,
        said="Your total is 302.67. Goodbye.",
    ),
    case("nothing_done", "airline/test/0", {"COMMUNICATE", "DB"}, INCOMPLETE, DB_DIFFERS, db_match=False),
    # telecom: the phone's state; the database differs (the gold run toggled the phone) but does not count
    case(
        "nothing_done",
        "telecom/test/0",
        {"ENV_ASSERTION"},
        INCOMPLETE,
        "environment assertions met: 0 of 2; failed: assert_mobile_data_status(expected_status=True) on the user's "
        "device; assert_internet_speed(expected_speed=200, expected_desc='excellent') on the user's device",
        db_match=False,
    ),
    case(
        "no_transfer",
        "telecom/small/10",
        {"ACTION", "ENV_ASSERTION"},
        INCOMPLETE,
        "expected actions performed: 0 of 1; missed: transfer_to_human_agents()",  # compare_args: []
        db_match=True,
    ),
    case(
        "transfer_after_resuming_the_line",
        "telecom/small/13",
        {"ACTION", "ENV_ASSERTION"},
        INCOMPLETE,
        "environment assertions met: 0 of 1; failed: assert_service_status(expected_status='no_service') on the "
        "user's device",
        db_match=False,
        calls=(
            ("resume_line", {"customer_id": "C1001", "line_id": "L1002"}, "assistant"),
            ("toggle_airplane_mode", {}, "user"),
            ("toggle_airplane_mode", {}, "user"),
            ("transfer_to_human_agents", {"summary": "The line is back."}, "assistant"),
        ),
    ),
    # mock: every other combination
    case("nothing_done", "mock/base/0", {"COMMUNICATE", "DB"}, INCOMPLETE, DB_DIFFERS, db_match=False),
    case(
        "wrong_title",  # doing nothing makes tau2's assertion raise (task_2 not found): a harness error, not this
        "mock/base/1",
        {"DB", "ENV_ASSERTION"},
        INCOMPLETE,
        DB_DIFFERS,
        db_match=False,
        calls=(("create_task", {"user_id": "user_1", "title": "Something else"}, "assistant"),),
    ),
    case(
        "nothing_done",
        "mock/base/7",
        {"ENV_ASSERTION"},
        INCOMPLETE,
        "environment assertions met: 0 of 1; failed: assert_task_status(task_id='task_2', "
        "expected_status='completed') in the agent's database",
        db_match=True,
    ),
    case(
        "no_transfer",
        "mock/base/8",
        {"ACTION", "DB"},
        INCOMPLETE,
        "expected actions performed: 0 of 1; missed: transfer_to_human_agents()",
        db_match=True,
    ),
]


@cache
def tau2_bases() -> frozenset[tuple[str, Basis]]:
    """Every (domain, reward basis) of every task of every split tau2 ships (telecom's 2285 tasks: ~5 s)."""
    found: set[tuple[str, Basis]] = set()
    for domain in list_domains():
        for split in domain.splits:
            for task in load_tasks(domain.name, split or None):
                if task.evaluation_criteria is not None:  # no criteria: tau2 scores 1.0, nothing to explain
                    basis = frozenset(str(b.value) for b in task.evaluation_criteria.reward_basis)
                    found.add((domain.name, basis))
    return frozenset(found)


def test_every_reward_basis_of_every_domain_has_a_case() -> None:
    cases = {(c.domain, c.basis) for c in CASES}
    bases = tau2_bases()
    missing = sorted((domain, sorted(basis)) for domain, basis in bases - cases)
    assert not missing, f"(domain, reward basis) pairs in tau2's tasks without a case here: {missing}"
    stale = sorted((domain, sorted(basis)) for domain, basis in cases - bases)
    assert not stale, f"cases for (domain, reward basis) pairs no tau2 task has: {stale}"


def score(ref: TaskRef, calls: tuple[Call, ...], said: str) -> RewardBreakdown:
    """Play ``ref`` in-process (opening, the user's request, ``calls``, the agent's ``said``; the agent stops) and
    score it with tau2's evaluator the way the scoring workers do: from the simulation's JSON, everything counted."""
    from tau2.data_model.message import AssistantMessage, Message, ToolCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    env, opening = build_environment(ref)
    messages: list[Message] = [*opening, UserMessage(role="user", content="Hi, I need help with my account.")]
    for number, (name, arguments, requestor) in enumerate(calls, 1):
        call = ToolCall(id=f"call_{number:03d}", name=name, arguments=arguments, requestor=requestor)
        speaker = AssistantMessage if requestor == "assistant" else UserMessage
        messages.append(speaker(role=requestor, content=None, tool_calls=[call]))
        messages.append(env.get_response(call))
        assert not messages[-1].error, messages[-1].content
        env.sync_tools()
    messages.append(AssistantMessage(role="assistant", content=said))
    run = SimulationRun(
        id=str(uuid.uuid4()),
        task_id=ref.task_id,
        start_time="2026-01-01T10:00:00",
        end_time="2026-01-01T10:00:30",
        duration=30.0,
        termination_reason=TerminationReason.AGENT_STOP,
        messages=[message.model_copy(update={"turn_idx": i}) for i, message in enumerate(messages)],
    )
    simulation = SimulationRun.model_validate(run.model_dump(mode="json"))
    info = evaluate_simulation(
        simulation=simulation, task=ref.task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=ref.domain
    )
    return breakdown_from_reward_info(info.model_dump(mode="json"))


@pytest.mark.parametrize("played", [pytest.param(c, id=f"{c.domain}-{c.split}-{c.index}-{c.name}") for c in CASES])
def test_a_failed_task_is_explained_by_its_reward_basis(played: Case) -> None:
    ref = resolve_task(played.domain, played.split, played.index)
    criteria = ref.task.evaluation_criteria
    assert criteria is not None
    assert frozenset(str(b.value) for b in criteria.reward_basis) == played.basis, "the task is not of this basis"

    breakdown = score(ref, played.calls, played.said)
    assert breakdown.reward == 0.0
    assert set(breakdown.reward_basis) == played.basis
    assert breakdown.db_match is played.db_match

    failure = classify_scored(breakdown)
    assert failure is not None
    assert (failure.category, failure.fault_author) == (played.category, FaultAuthor.WHITE_AGENT)
    assert failure.detail == played.detail
    for check, phrase in CHECK_PHRASES.items():
        if check not in played.basis:
            assert phrase not in failure.detail, f"{check} is not in the basis but the detail names it"
    assert len(failure.detail) <= MAX_DETAIL_CHARS


# -- synthetic breakdowns -----------------------------------------------------------------------------------------


def assertion(func_name: str, met: bool, env_type: str = "user", assert_value: bool = True, **arguments: Any) -> Any:
    """One entry of RewardInfo.env_assertions, as tau2 dumps it."""
    return {
        "env_assertion": {
            "env_type": env_type,
            "func_name": func_name,
            "arguments": arguments,
            "assert_value": assert_value,
            "message": None,
        },
        "met": met,
        "reward": 1.0 if met else 0.0,
    }


def action(name: str, match: bool, requestor: str = "assistant", compare: list[str] | None = None, **args: Any) -> Any:
    """One entry of RewardInfo.action_checks, as tau2 dumps it."""
    return {
        "action": {
            "action_id": f"{name}_0",
            "requestor": requestor,
            "name": name,
            "arguments": args,
            "info": None,
            "compare_args": compare,
        },
        "action_match": match,
        "action_reward": 1.0 if match else 0.0,
    }


def breakdown(basis: list[str], **info: Any) -> RewardBreakdown:
    """A failed RewardInfo with ``basis`` and the given check lists, through the same flattening as a real score."""
    return breakdown_from_reward_info({"reward": 0.0, "reward_basis": basis, **info})


def detail_of(scored: RewardBreakdown) -> str:
    failure = classify_scored(scored)
    assert failure is not None
    return failure.detail


DB_WRONG = {"db_check": {"db_match": False, "db_reward": 0.0}}
DB_RIGHT = {"db_check": {"db_match": True, "db_reward": 1.0}}


def test_a_database_mismatch_outside_the_basis_is_ignored() -> None:
    scored = breakdown(
        ["ENV_ASSERTION"],
        **DB_WRONG,
        env_assertions=[assertion("assert_a", True), assertion("assert_b", False, expected=1)],
    )
    assert detail_of(scored) == "environment assertions met: 1 of 2; failed: assert_b(expected=1) on the user's device"


def test_only_failed_checks_outside_the_basis_is_an_unknown_failure() -> None:
    scored = breakdown(
        ["ENV_ASSERTION"],
        **DB_WRONG,
        env_assertions=[assertion("assert_a", True)],
        communicate_checks=[{"info": "42", "met": False, "justification": ""}],
        action_checks=[action("do_it", False)],
    )
    failure = classify_scored(scored)
    assert failure is not None
    assert failure.category is FailureCategory.UNKNOWN_FAILURE
    assert failure.detail == "reward 0 with no failed check in the breakdown"


def test_retail_and_airline_basis_ignores_actions() -> None:
    scored = breakdown(
        ["DB", "COMMUNICATE"],
        **DB_RIGHT,
        communicate_checks=[{"info": "42", "met": True, "justification": ""}],
        action_checks=[action("do_it", False)],
    )
    failure = classify_scored(scored)
    assert failure is not None
    assert failure.category is FailureCategory.UNKNOWN_FAILURE


@pytest.mark.parametrize(
    ("basis", "detail"),
    [
        (["ENV_ASSERTION", "ACTION", "COMMUNICATE", "DB"], DB_DIFFERS),
        (["ENV_ASSERTION", "ACTION", "COMMUNICATE"], "required information told to the user: 0 of 1"),
        (["ENV_ASSERTION", "ACTION"], "expected actions performed: 0 of 1; missed: do_it()"),
        (["ENV_ASSERTION"], "environment assertions met: 0 of 1; failed: assert_a() on the user's device"),
    ],
    ids=["db", "communicate", "action", "env_assertion"],
)
def test_within_the_basis_checks_keep_their_order(basis: list[str], detail: str) -> None:
    scored = breakdown(
        basis,
        **DB_WRONG,
        communicate_checks=[{"info": "42", "met": False, "justification": ""}],
        action_checks=[action("do_it", False)],
        env_assertions=[assertion("assert_a", False)],
    )
    assert detail_of(scored) == detail


@pytest.mark.parametrize(
    ("scored", "category", "detail"),
    [
        (
            RewardBreakdown(reward=0.0, db_match=False, env_assertions_total=2, env_assertions_met=0),
            FailureCategory.TASK_INCOMPLETE,
            DB_DIFFERS,
        ),
        (
            RewardBreakdown(reward=0.0, db_match=True, communicate_total=3, communicate_met=1, action_total=1),
            FailureCategory.INCOMPLETE_OUTPUTS,
            "required information told to the user: 1 of 3",
        ),
        (
            RewardBreakdown(
                reward=0.0, db_match=True, action_total=2, action_met=1, raw={"action_checks": [action("x", False)]}
            ),
            FailureCategory.TASK_INCOMPLETE,
            "expected actions performed: 1 of 2",
        ),
        (
            RewardBreakdown(
                reward=0.0,
                db_match=True,
                env_assertions_total=1,
                raw={"env_assertions": [assertion("assert_a", False)]},
            ),
            FailureCategory.TASK_INCOMPLETE,
            "environment assertions met: 0 of 1",
        ),
        (
            RewardBreakdown(reward=0.5, db_match=True),
            FailureCategory.UNKNOWN_FAILURE,
            "reward 0.5 with no failed check in the breakdown",
        ),
    ],
    ids=["db", "communicate", "action", "env_assertion", "none_failed"],
)
def test_without_a_basis_every_check_counts_as_before(
    scored: RewardBreakdown, category: FailureCategory, detail: str
) -> None:
    failure = classify_scored(scored)
    assert failure is not None
    assert failure.category is category
    assert failure.detail == detail


def test_names_show_where_and_what_was_expected() -> None:
    scored = breakdown(
        ["ENV_ASSERTION"],
        env_assertions=[
            assertion("assert_x", False, env_type="assistant", customer_id="C1001", amount=2.5),
            assertion("assert_y", False, assert_value=False, flag=None),
            assertion("assert_z", True),
        ],
    )
    assert detail_of(scored) == (
        "environment assertions met: 1 of 3; failed: assert_x(customer_id='C1001', amount=2.5) in the agent's "
        "database; not assert_y(flag=None) on the user's device"
    )


def test_missed_actions_show_the_compared_arguments_and_who_acts() -> None:
    scored = breakdown(
        ["ACTION"],
        action_checks=[
            action("lookup", True, user_id="u1"),
            action("cancel", False, compare=["order_id"], order_id="#W1", reason="no longer needed"),
            action("toggle_roaming", False, requestor="user"),
            action("refund", False, amount=10, note="all arguments compared"),
        ],
    )
    assert detail_of(scored) == (
        "expected actions performed: 1 of 4; missed: cancel(order_id='#W1'); toggle_roaming() by the user; "
        "refund(amount=10, note='all arguments compared')"
    )


def test_a_long_detail_is_bounded() -> None:
    many = [assertion(f"assert_check_{i}", False, customer_id=f"C{i:04d}", note="x" * 500) for i in range(30)]
    detail = detail_of(breakdown(["ENV_ASSERTION"], env_assertions=many))
    assert len(detail) == MAX_DETAIL_CHARS
    assert detail.startswith("environment assertions met: 0 of 30; failed: assert_check_0(customer_id='C0000', ")
    assert detail.endswith("...")
    cut_value = "'" + "x" * (MAX_ARGUMENT_CHARS - 4) + "..."  # a repr of MAX_ARGUMENT_CHARS, ellipsis included
    assert f"note={cut_value}) on the user's device; assert_check_1(" in detail


def test_malformed_check_lists_fall_back_to_the_counts() -> None:
    scored = breakdown(
        ["ENV_ASSERTION"], env_assertions=[{"met": False}, {"env_assertion": None}, {"env_assertion": "x"}]
    )
    assert detail_of(scored) == "environment assertions met: 0 of 3"
