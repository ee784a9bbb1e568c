"""Every blame rule, produced by one real attempt: who failed, and how the attempt ended.

Each rule below plays one attempt of a real tau2 task (tests/green_agent/engine/conftest.py) with scripted parties
(tests/green_agent/engine/fakes.py) and states the verdict it must get: the failure category, the fault author and the
termination reason (plus a phrase of the detail). The coverage test at the end checks that the rules produce every
:class:`FailureCategory` and every :class:`FaultAuthor`, and the attempt deadline while waiting on each party.
No assertion is about elapsed time: limits that must expire are set small (conftest.SHORT).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from green_agent.engine.attempt import harness_failure
from green_agent.engine.attribution import DEADLINE_CATEGORY
from green_agent.engine.config import ConfigError
from green_agent.engine.results import (
    INFRASTRUCTURE_AUTHORS,
    AttemptResult,
    FailureCategory,
    FaultAuthor,
    RewardBreakdown,
    TerminationReason,
)
from green_agent.engine.tau.environment import AttemptEnvironment
from green_agent.engine.tau.scoring import ScoringError
from green_agent.engine.tau.users import UserSimulatorError
from green_agent.engine.white_client import (
    WhiteAgentCommunicationError,
    WhiteAgentReplyTooLarge,
    WhiteAgentReportedFailure,
    WhiteAgentTimeout,
)
from tests.green_agent.engine.conftest import MOCK, RETAIL, SHORT, Arena
from tests.green_agent.engine.fakes import (
    HANG,
    BrokenSandboxes,
    FixedScorer,
    HangingGateway,
    HangingSandboxes,
    ScriptedUser,
    ScriptedWhite,
    respond,
    tool,
)

Category, Author, Ends = FailureCategory, FaultAuthor, TerminationReason
CREATE = tool("create_task", user_id="user_1", title="Important Meeting")
DONE = respond("Done: the task 'Important Meeting' now exists for user_1.")
BOMB = {"expression": "9**9**9"}
"""calculate() evaluates it: one big-integer power that takes minutes, so the call runs into its time limit."""


@dataclass(frozen=True)
class Rule:
    name: str
    category: FailureCategory | None
    """None: the attempt succeeds."""
    author: FaultAuthor | None
    termination: TerminationReason
    detail: str
    """A phrase the failure's detail contains."""
    play: Callable[[Arena], Awaitable[AttemptResult]]


RULES: list[Rule] = []


def rule(
    category: FailureCategory | None, author: FaultAuthor | None, termination: TerminationReason, detail: str = ""
) -> Callable[[Callable[[Arena], Awaitable[AttemptResult]]], Callable[[Arena], Awaitable[AttemptResult]]]:
    def register(play: Callable[[Arena], Awaitable[AttemptResult]]) -> Callable[[Arena], Awaitable[AttemptResult]]:
        RULES.append(Rule(play.__name__, category, author, termination, detail, play))
        return play

    return register


# -- scored by tau2 ----------------------------------------------------------------------------------------------


@rule(None, None, Ends.USER_STOP)
async def gold_actions_then_goodbye_succeed(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(CREATE, DONE))  # the harness's own scripted user, tau2's own scorer


@rule(Category.TASK_INCOMPLETE, Author.WHITE_AGENT, Ends.USER_STOP, "database state differs")
async def goodbye_without_the_work_is_task_incomplete(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(respond("Goodbye, have a nice day.")))


def scored(name: str, verdict: RewardBreakdown | BaseException) -> Callable[[Arena], Awaitable[AttemptResult]]:
    """A gold conversation whose score is ``verdict`` (the breakdown tau2 gave, or the error its evaluator raised)."""

    async def play(arena: Arena) -> AttemptResult:
        return await arena.play(ScriptedWhite(CREATE, DONE), scorer=FixedScorer(verdict))

    play.__name__ = name
    return play


rule(Category.MISSING_OUTPUTS, Author.WHITE_AGENT, Ends.USER_STOP, "told to the user: 0 of 2")(
    scored("nothing_required_told", RewardBreakdown(reward=0.0, db_match=True, communicate_total=2, communicate_met=0))
)
rule(Category.INCOMPLETE_OUTPUTS, Author.WHITE_AGENT, Ends.USER_STOP, "told to the user: 1 of 2")(
    scored(
        "part_of_the_required_told", RewardBreakdown(reward=0.0, db_match=True, communicate_total=2, communicate_met=1)
    )
)
rule(Category.UNKNOWN_FAILURE, Author.WHITE_AGENT, Ends.USER_STOP, "no failed check")(
    scored("reward_below_1_without_a_failed_check", RewardBreakdown(reward=0.5, db_match=True))
)
rule(Category.HARNESS_ERROR, Author.HARNESS, Ends.USER_STOP, "tau2 evaluator failed: worker died")(
    scored("the_evaluator_fails", ScoringError("worker died"))
)


# -- the white agent ---------------------------------------------------------------------------------------------


@rule(Category.FORMAT_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "reply at step 1 is not an action")
async def a_reply_that_is_no_action(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite("Sure, I will create that task for you later."))


@rule(Category.FORMAT_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "reply at step 2 is not an action")
async def a_megabyte_of_prose(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(CREATE, "la " * 350_000))  # parsed off the event loop, then refused


@rule(Category.FORMAT_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "reply at step 1 refused")
async def a_reply_over_the_byte_cap(arena: Arena) -> AttemptResult:
    too_large = WhiteAgentReplyTooLarge("the reply is larger than 1048576 bytes", max_bytes=1_048_576)
    return await arena.play(ScriptedWhite(too_large))


@rule(Category.TIMEOUT, Author.WHITE_AGENT, Ends.AGENT_ERROR, "turn time limit (5 s) exceeded at step 2")
async def no_reply_within_the_turn_limit(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(CREATE, WhiteAgentTimeout("no reply within 5 s", timeout_s=5.0)))


@rule(Category.COMMUNICATION_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "connection refused")
async def the_agent_cannot_be_reached(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(WhiteAgentCommunicationError("connection refused", kind="connect")))


@rule(Category.WHITE_AGENT_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "internal error")
async def the_agent_fails_its_task(arena: Arena) -> AttemptResult:
    failed = WhiteAgentReportedFailure(
        "Task in state failed: internal error", task_state="failed", text="", task_id="t"
    )
    return await arena.play(ScriptedWhite(failed))


@rule(Category.TIMEOUT, Author.WHITE_AGENT, Ends.MAX_STEPS, "max_steps (2) reached")
async def the_step_budget_runs_out(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(tool("get_users"), tool("get_users")), max_steps=2)


@rule(Category.TIMEOUT, Author.WHITE_AGENT, Ends.AGENT_ERROR, "the agent's tool call calculate")
async def the_agents_tool_call_is_killed_at_its_time_limit(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(tool("calculate", **BOMB)), ref=RETAIL, tool_timeout_s=SHORT)


async def _kill_the_sandbox(env: AttemptEnvironment) -> str:
    assert env.sandbox_pid is not None
    os.kill(env.sandbox_pid, signal.SIGKILL)
    return "Hi! Please list the users."


@rule(Category.WHITE_AGENT_ERROR, Author.WHITE_AGENT, Ends.AGENT_ERROR, "the agent's tool call get_users")
async def the_agents_tool_call_crashes_the_sandbox(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(tool("get_users")), ScriptedUser(_kill_the_sandbox))


@rule(Category.TIMEOUT, Author.WHITE_AGENT, Ends.DEADLINE, "while waiting for the white agent (step 2)")
async def deadline_while_waiting_on_the_agent(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(CREATE, HANG), attempt_timeout_s=SHORT)


@rule(Category.TIMEOUT, Author.WHITE_AGENT, Ends.DEADLINE, "while running the agent's tool call calculate")
async def deadline_during_the_agents_tool_call(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(tool("calculate", **BOMB)), ref=RETAIL, attempt_timeout_s=SHORT)


@rule(Category.HARNESS_ERROR, Author.HARNESS, Ends.TOO_MANY_ERRORS, "RuntimeError while waiting for the white agent")
async def the_channel_raises_something_unclassified(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(RuntimeError("a bug in the channel")))


# -- the simulated user ------------------------------------------------------------------------------------------


@rule(Category.USER_SIMULATOR_ERROR, Author.USER_SIMULATOR, Ends.USER_ERROR, "LLM endpoint answered 503")
async def the_users_opening_fails(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(UserSimulatorError("LLM endpoint answered 503")))


@rule(Category.USER_SIMULATOR_ERROR, Author.USER_SIMULATOR, Ends.USER_ERROR, "empty completion")
async def the_users_reply_fails(arena: Arena) -> AttemptResult:
    user = ScriptedUser("Hi! I need a task created.", UserSimulatorError("the LLM returned an empty completion"))
    return await arena.play(ScriptedWhite(respond("Which title should it have?")), user)


@rule(Category.USER_SIMULATOR_ERROR, Author.USER_SIMULATOR, Ends.DEADLINE, "waiting for the simulated user's opening")
async def deadline_while_waiting_on_the_users_opening(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(HANG), attempt_timeout_s=SHORT)


@rule(Category.USER_SIMULATOR_ERROR, Author.USER_SIMULATOR, Ends.DEADLINE, "while waiting for the simulated user")
async def deadline_while_waiting_on_the_users_reply(arena: Arena) -> AttemptResult:
    user = ScriptedUser("Hi! I need a task created.", HANG)
    return await arena.play(ScriptedWhite(respond("Which title?")), user, attempt_timeout_s=SHORT)


async def _users_tool_call_on_a_dead_sandbox(env: AttemptEnvironment) -> str:
    await _kill_the_sandbox(env)
    await env.call_tool("get_users", {}, requestor="user")
    raise AssertionError("a tool call on a dead sandbox must raise ToolFault")


@rule(Category.USER_SIMULATOR_ERROR, Author.USER_SIMULATOR, Ends.USER_ERROR, "the simulated user's tool call get_users")
async def the_users_tool_call_crashes_the_sandbox(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(_users_tool_call_on_a_dead_sandbox))


@rule(Category.HARNESS_ERROR, Author.USER_SIMULATOR, Ends.TOO_MANY_ERRORS, "KeyError while waiting for the simulated")
async def the_user_raises_something_unclassified(arena: Arena) -> AttemptResult:
    user = ScriptedUser("Hi! I need a task created.", KeyError("turns"))
    return await arena.play(ScriptedWhite(respond("Which title?")), user)


# -- the environment ---------------------------------------------------------------------------------------------


@rule(Category.HARNESS_ERROR, Author.ENVIRONMENT, Ends.TOO_MANY_ERRORS, "SandboxError while building the tau2")
async def the_environment_cannot_be_built(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(), sandboxes=BrokenSandboxes())


@rule(Category.HARNESS_ERROR, Author.ENVIRONMENT, Ends.DEADLINE, "while building the tau2 environment")
async def deadline_while_waiting_on_the_environment(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(), sandboxes=HangingSandboxes(), attempt_timeout_s=SHORT)


# -- the harness -------------------------------------------------------------------------------------------------


def _no_user(*args: object, **kwargs: object) -> ScriptedUser:
    raise ConfigError("user_simulator.kind: 'llm' needs an API key")


@rule(Category.HARNESS_ERROR, Author.HARNESS, Ends.TOO_MANY_ERRORS, "ConfigError while creating the simulated user")
async def the_user_cannot_be_created(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), user_factory=_no_user)


@rule(Category.HARNESS_ERROR, Author.HARNESS, Ends.TOO_MANY_ERRORS, "needs the green agent's MCP component")
async def mcp_tools_without_the_mcp_component(arena: Arena) -> AttemptResult:
    return await arena.play(ScriptedWhite(), ScriptedUser(), tool_mode="mcp")


@rule(Category.HARNESS_ERROR, Author.HARNESS, Ends.DEADLINE, "while opening the attempt's MCP tool endpoint")
async def deadline_while_the_harness_opens_the_tool_endpoint(arena: Arena) -> AttemptResult:
    gateway = HangingGateway()
    return await arena.play(ScriptedWhite(), ScriptedUser(), tool_mode="mcp", gateway=gateway, attempt_timeout_s=SHORT)


# -- the verdicts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
async def test_the_attempt_is_blamed_on_the_right_party(rule: Rule, arena: Arena) -> None:
    result = await rule.play(arena)
    failure = result.failure
    verdict = (failure.category, failure.fault_author) if failure else (None, None)
    assert verdict == (rule.category, rule.author), failure
    assert result.termination_reason is rule.termination
    assert rule.detail in (failure.detail if failure else ""), failure
    infrastructure = rule.author in INFRASTRUCTURE_AUTHORS
    expected = "success" if failure is None else "infra_error" if infrastructure else "failure"
    assert result.outcome == expected
    assert (result.reward is None) is infrastructure, "an infrastructure error has no reward; everything else has one"
    assert result.trial_outcome is (None if infrastructure else failure is None)
    # The result is data: its JSON keeps the termination's string and reads back as the same result.
    dumped = result.model_dump(mode="json")
    assert dumped["termination_reason"] == rule.termination.value
    assert AttemptResult.model_validate(dumped) == result


def test_every_category_and_every_author_is_produced_by_a_rule() -> None:
    assert {r.category for r in RULES} - {None} == set(FailureCategory)
    assert {r.author for r in RULES} - {None} == set(FaultAuthor)
    deadline_waits = {r.author for r in RULES if r.termination is TerminationReason.DEADLINE}
    assert deadline_waits == set(FaultAuthor), "the attempt deadline while waiting on each party"
    assert {(r.author, r.category) for r in RULES if r.termination is TerminationReason.DEADLINE} == set(
        DEADLINE_CATEGORY.items()
    )
    assert len({r.name for r in RULES}) == len(RULES)


def test_an_attempt_loop_that_raises_is_the_harness_s_error() -> None:
    """The battle's last resort (run_attempt itself raised): an infrastructure error, never the agent's."""
    from green_agent.engine.attempt import AttemptSpec

    result = harness_failure(AttemptSpec("blame-rules", MOCK, 2, "http://white.invalid"), "TypeError in the loop")
    assert result.failure is not None
    assert (result.failure.category, result.failure.fault_author) == (Category.HARNESS_ERROR, Author.HARNESS)
    assert (result.outcome, result.termination_reason) == ("infra_error", Ends.TOO_MANY_ERRORS)
