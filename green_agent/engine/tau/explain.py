"""The failure explanation of a scored attempt, computed in the scoring worker from the simulation tau2 just scored.

Runs only for a reward below 1, after tau2's ``RewardInfo`` was taken (it is read here, never changed), so the
verdict is the same with or without it. What each part reads:

* database: tau2 compares only hashes, so the two final databases are rebuilt exactly as its environment evaluator
  (tau2/evaluator/evaluator_env.py) builds them: the attempt's by replaying the simulation's tool calls on a fresh
  environment, the gold one from the task's initial state plus its gold actions (failing gold actions skipped, as
  tau2 does). Then :func:`~green_agent.engine.tau.db_diff.diff_databases` names the differing fields. This doubles
  the evaluator's environment work for a failed attempt; passing attempts pay nothing.
* communicate: the ``communicate_checks`` tau2 marked unmet.
* actions: the ``action_checks`` tau2 marked unmatched, each with the call of the conversation that came closest
  (tau2's own comparison rule: the task's ``compare_args``, else the call's arguments).
* assertions: the ``env_assertions`` tau2 marked unmet.

Everything taken from the conversation is bounded, and so is the whole (green_agent/engine/explanation.py).
"""

from __future__ import annotations

import functools
from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from green_agent.engine.bounded_json import bounded_copy, safe_equal
from green_agent.engine.explanation import (
    MAX_ACTIONS,
    MAX_ARGUMENTS_CHARS,
    MAX_ASSERTIONS,
    MAX_COMMUNICATE,
    MAX_NAME_CHARS,
    MAX_VALUE_CHARS,
    CalledTool,
    CommunicateExplanation,
    DbExplanation,
    FailureExplanation,
    UnmatchedAction,
    UnmetAssertion,
    cut,
    fit,
    summarize,
)
from green_agent.engine.tau.db_diff import diff_databases
from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()

from tau2.data_model.message import AssistantMessage, Message, UserMessage  # noqa: E402  (after quiet_tau2)

if TYPE_CHECKING:
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Action, Task
    from tau2.environment.environment import Environment

MAX_CALLS_SEARCHED: Final = 1000
"""Tool calls of the conversation considered as the closest call (the first ones; bounded by max_steps anyway)."""
_ABSENT: Final = object()


def _bounded_arguments(arguments: Any) -> dict[str, Any]:
    copied = bounded_copy(
        arguments if isinstance(arguments, dict) else {}, chars=MAX_ARGUMENTS_CHARS, max_string=MAX_VALUE_CHARS
    )
    return copied if isinstance(copied, dict) else {}


# --- database ------------------------------------------------------------------------------------------------------


def _dumps(env: Environment) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The agent database and the user database (None without one) as tau2 hashes them (``model_dump()``)."""
    agent: dict[str, Any] = env.tools.db.model_dump() if env.tools is not None else {}
    user_tools = env.user_tools
    user_db = getattr(user_tools, "db", None) if user_tools is not None else None
    return agent, (user_db.model_dump() if user_db is not None else None)


def final_databases(
    task: Task, messages: list[Message], domain: str, retrieval: str | None = None
) -> tuple[Environment, Environment]:
    """The gold environment and the attempt's, built as tau2's EnvironmentEvaluator builds them (same constructor,
    same initial state, same replay; ``solo_mode`` False as the scoring worker evaluates). The constructor is
    :func:`fresh_environment`, the scoring worker's own: tau2's registry would import litellm (~4 s) into it.
    ``retrieval``: banking_knowledge's variant (its environments depend on it and on the task)."""
    from green_agent.engine.tau.banking import environment_kwargs
    from green_agent.engine.tau.environment import fresh_environment

    constructor = functools.partial(fresh_environment, domain, **environment_kwargs(domain, task, retrieval))
    state = task.initial_state
    data = state.initialization_data if state is not None else None
    actions = state.initialization_actions if state is not None else None
    history = list(state.message_history or []) if state is not None else []
    attempt = constructor(solo_mode=False)
    attempt.set_state(initialization_data=data, initialization_actions=actions, message_history=messages)
    gold = constructor()
    gold.set_state(initialization_data=data, initialization_actions=actions, message_history=history)
    criteria = task.evaluation_criteria
    for action in (criteria.actions or []) if criteria is not None else []:
        try:  # tau2 logs a failing gold action and carries on; so does this
            gold.make_tool_call(tool_name=action.name, requestor=action.requestor, **deepcopy(action.arguments))
        except Exception:  # the same as tau2's evaluator: the gold state is what the other actions left
            continue
    return gold, attempt


def explain_database(task: Task, messages: list[Message], domain: str, retrieval: str | None = None) -> DbExplanation:
    """Where the attempt's final databases differ from the gold ones (see :mod:`.db_diff`)."""
    gold, attempt = final_databases(task, messages, domain, retrieval)
    expected, expected_user = _dumps(gold)
    actual, actual_user = _dumps(attempt)
    return diff_databases(expected, actual, expected_user=expected_user, actual_user=actual_user)


# --- actions -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    arguments: dict[str, Any]
    requestor: str
    step: int


def recorded_calls(messages: list[Message]) -> list[_Call]:
    """The tool calls of the conversation (the agent's and the simulated user's), with their message's step."""
    calls: list[_Call] = []
    for index, message in enumerate(messages):
        if not isinstance(message, (AssistantMessage, UserMessage)) or not message.is_tool_call():
            continue
        step = message.turn_idx if message.turn_idx is not None else index
        for call in message.tool_calls or []:
            arguments = call.arguments if isinstance(call.arguments, dict) else {}
            calls.append(_Call(call.name, arguments, str(call.requestor), step))
            if len(calls) >= MAX_CALLS_SEARCHED:
                return calls
    return calls


def differing_arguments(action: Action, call: _Call) -> list[str]:
    """The arguments where ``call`` differs from the gold ``action``, by tau2's rule for the same tool (only
    ``compare_args``, else the call's own arguments); for another tool, every argument either of them has."""
    if call.name == action.name:
        keys = list(action.compare_args) if action.compare_args is not None else list(call.arguments)
    else:
        keys = [*action.arguments, *(key for key in call.arguments if key not in action.arguments)]
    return [key for key in keys if not safe_equal(call.arguments.get(key, _ABSENT), action.arguments.get(key, _ABSENT))]


def _shares_a_value(action: Action, call: _Call) -> bool:
    return any(
        key in call.arguments and safe_equal(call.arguments[key], value) for key, value in action.arguments.items()
    )


def closest_call(action: Action, calls: list[_Call]) -> tuple[_Call, list[str]] | None:
    """The call closest to ``action``: the same tool first, then the fewest differing arguments, then the same
    requestor, then the earliest. Another tool's call counts only if it shares an argument value with the action
    (a lookup of the same order, say); None when no call qualifies."""
    best: tuple[tuple[int, int, int, int], _Call, list[str]] | None = None
    for call in calls:
        same_tool = call.name == action.name
        if not same_tool and not _shares_a_value(action, call):
            continue
        differing = differing_arguments(action, call)
        rank = (0 if same_tool else 1, len(differing), 0 if call.requestor == action.requestor else 1, call.step)
        if best is None or rank < best[0]:
            best = (rank, call, differing)
    return None if best is None else (best[1], best[2])


@cache
def _write_tools(domain: str) -> frozenset[tuple[str, str]]:
    """(requestor, tool name) of the domain's tools that write (tau2's ToolType.WRITE), per worker process."""
    from tau2.environment.toolkit import ToolType

    from green_agent.engine.tau.environment import fresh_environment

    env = fresh_environment(domain)
    writes: set[tuple[str, str]] = set()
    for requestor, kit in (("assistant", env.tools), ("user", env.user_tools)):
        if kit is None:
            continue
        writes.update((requestor, name) for name in kit.get_tools() if kit.tool_type(name) == ToolType.WRITE)
    return frozenset(writes)


def explain_actions(
    info: RewardInfo, messages: list[Message], domain: str, *, writes_only: bool
) -> list[UnmatchedAction]:
    """The unmatched gold actions (only the write ones when ``writes_only``), each with the closest call."""
    unmatched = [check.action for check in info.action_checks or [] if not check.action_match]
    if writes_only and unmatched:
        writes = _write_tools(domain)
        unmatched = [action for action in unmatched if (str(action.requestor), action.name) in writes]
    if not unmatched:
        return []
    calls = recorded_calls(messages)
    explained: list[UnmatchedAction] = []
    for action in unmatched[:MAX_ACTIONS]:
        found = closest_call(action, calls)
        closest, differing = (None, []) if found is None else found
        explained.append(
            UnmatchedAction(
                name=cut(action.name, MAX_NAME_CHARS),
                arguments=_bounded_arguments(action.arguments),
                requestor=str(action.requestor),
                closest=None
                if closest is None
                else CalledTool(
                    name=cut(closest.name, MAX_NAME_CHARS),
                    arguments=_bounded_arguments(closest.arguments),
                    step=closest.step,
                ),
                differing_arguments=[cut(key, MAX_NAME_CHARS) for key in differing[:MAX_ACTIONS]],
            )
        )
    return explained


# --- the whole explanation -----------------------------------------------------------------------------------------


def explain_failure(
    task: Task, simulation: SimulationRun, info: RewardInfo, domain: str, retrieval: str | None = None
) -> FailureExplanation:
    """Why ``simulation`` of ``task`` got ``info.reward`` < 1: one part per failed check of the reward basis
    (``retrieval``: banking_knowledge's variant)."""
    basis = {getattr(item, "value", str(item)) for item in info.reward_basis or []}
    messages = list(simulation.messages)
    db = None
    if "DB" in basis and info.db_check is not None and not info.db_check.db_match:
        db = explain_database(task, messages, domain, retrieval)
    communicate = None
    missing = [check.info for check in info.communicate_checks or [] if not check.met]
    if "COMMUNICATE" in basis and missing:
        communicate = CommunicateExplanation(missing=[cut(text, MAX_VALUE_CHARS) for text in missing[:MAX_COMMUNICATE]])
    actions = explain_actions(info, messages, domain, writes_only="ACTION" not in basis)
    assertions = []
    if "ENV_ASSERTION" in basis:
        assertions = [
            UnmetAssertion(
                function=cut(check.env_assertion.func_name, MAX_NAME_CHARS),
                arguments=_bounded_arguments(check.env_assertion.arguments),
                message=None
                if check.env_assertion.message is None
                else cut(check.env_assertion.message, MAX_VALUE_CHARS),
            )
            for check in (info.env_assertions or [])
            if not check.met
        ][:MAX_ASSERTIONS]
    explanation = FailureExplanation(
        summary="", db=db, communicate=communicate, actions=actions, env_assertions=assertions
    )
    explanation.summary = summarize(explanation)
    return fit(explanation)


__all__ = [
    "closest_call",
    "differing_arguments",
    "explain_actions",
    "explain_database",
    "explain_failure",
    "final_databases",
    "recorded_calls",
]
