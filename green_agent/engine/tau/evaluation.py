"""tau2's ``evaluate_simulation(..., EvaluationType.ALL, solo_mode=False, domain)``, computed without its costs.

Why not call it: ``tau2.evaluator.evaluator`` imports tau2's registry and with it litellm (~4 s and ~150 MB per
process, for nothing: no retail, airline or telecom task has an NL assertion), and its environment check rebuilds
and hashes the gold environment on every call although that depends only on the task. This module calls tau2's
own evaluators where they are cheap (``ActionEvaluator``, ``CommunicateEvaluator``, the environment's
``set_state`` replay and ``run_env_assertion``) and combines them as ``evaluate_simulation`` does:

* a termination other than ``agent_stop``/``user_stop`` scores 0 with tau2's "terminated prematurely" note, a task
  without evaluation criteria 1 with its "No evaluation criteria" note;
* the environment check (tau2's ``EnvironmentEvaluator.calculate_reward``): the attempt's environment is a fresh one
  set to the task's initial state with the *whole trajectory* as message history (so tau2's ``set_state`` replays
  every recorded tool call and raises if an output differs), its agent and user database hashes are compared with
  the gold environment's (the task's initial state with only the task's message history, then the gold actions,
  failing ones skipped), and the env assertions run on the attempt's environment after hashing;
* the reward is the product over the task's reward basis (environment for DB/ENV_ASSERTION, then ACTION, then
  COMMUNICATE), the breakdown the union of the parts' breakdowns in that order, ``info`` tau2's four keys; an
  NL_ASSERTION in the basis raises tau2's ValueError, as ``EvaluationType.ALL`` does.

What is cached: per task (keyed by its id, initial state and gold actions, so an edited task is a new entry), the
gold environment's agent and user database hashes, in a bounded LRU per process. Environments come from
:mod:`green_agent.engine.tau.databases` (validated once, records copied as reached, hashed from pre-serialised
records): the same data and the same hash as tau2's constructors.
tests/green_agent/engine/test_scoring_agreement.py compares the result with tau2's unmodified ``evaluate_simulation``
on every attempt of the calibration sweeps and the demo.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from copy import deepcopy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from green_agent.engine.tau.databases import agent_database_hash, lazy_environment
from green_agent.engine.tau.flavour import installed_tau2
from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()

from tau2.data_model.simulation import (  # noqa: E402  (after quiet_tau2)
    DBCheck,
    EnvAssertionCheck,
    RewardInfo,
    SimulationRun,
    TerminationReason,
)
from tau2.data_model.tasks import EnvAssertion, RewardType, Task  # noqa: E402
from tau2.evaluator.evaluator_action import ActionEvaluator  # noqa: E402
from tau2.evaluator.evaluator_communicate import CommunicateEvaluator  # noqa: E402

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.environment.environment import Environment

GOLD_CACHE_SIZE = 512
"""Tasks whose gold hashes a process keeps (two short strings each); every test and base task of every domain fits."""

SCORED = frozenset({TerminationReason.AGENT_STOP, TerminationReason.USER_STOP})
ENVIRONMENT_BASIS = frozenset({RewardType.DB, RewardType.ENV_ASSERTION})


@dataclass(frozen=True, slots=True)
class GoldHashes:
    """The gold environment's database hashes (``get_db_hash()``, ``get_user_db_hash()``) for one task."""

    agent: str | None
    user: str | None


class GoldCache:
    """Bounded LRU of :class:`GoldHashes` per task, thread-safe (a worker scores one attempt at a time anyway)."""

    def __init__(self, size: int = GOLD_CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, str], GoldHashes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, task: Task, domain: str) -> GoldHashes:
        """The task's gold hashes, computed on the first request (exceptions propagate and nothing is cached)."""
        key = (domain, _task_fingerprint(task))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
        hashes = gold_hashes(task, domain)
        with self._lock:
            self.misses += 1
            self._entries[key] = hashes
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return hashes

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _task_fingerprint(task: Task) -> str:
    """What the gold side depends on: the task's id, initial state and gold actions (as JSON)."""
    criteria = task.evaluation_criteria
    parts = [
        task.id,
        task.initial_state.model_dump_json() if task.initial_state is not None else "null",
        *(action.model_dump_json() for action in (criteria.actions or [] if criteria is not None else [])),
    ]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _initial_state(task: Task) -> tuple[object, object, list[Message]]:
    state = task.initial_state
    if state is None:
        return None, None, []
    return state.initialization_data, state.initialization_actions, list(state.message_history or [])


def _hashes(environment: Environment) -> GoldHashes:
    return GoldHashes(agent_database_hash(environment), environment.get_user_db_hash())


def gold_hashes(task: Task, domain: str) -> GoldHashes:
    """Build the gold environment as tau2 does and hash it (uncached)."""
    data, actions, history = _initial_state(task)
    gold = lazy_environment(domain)
    gold.set_state(initialization_data=data, initialization_actions=actions, message_history=history)
    criteria = task.evaluation_criteria
    for action in (criteria.actions or []) if criteria is not None else []:
        try:  # tau2 logs a failing gold action and goes on with the state the others leave
            gold.make_tool_call(tool_name=action.name, requestor=action.requestor, **deepcopy(action.arguments))
        except Exception:  # exactly tau2's handling
            continue
    return _hashes(gold)


_GOLD = GoldCache()


def gold_cache() -> GoldCache:
    """This process's gold cache (statistics, tests)."""
    return _GOLD


def environment_check(task: Task, messages: list[Message], domain: str, gold: GoldCache | None = None) -> RewardInfo:
    """tau2's ``EnvironmentEvaluator.calculate_reward`` (solo mode off) with the gold side cached."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, info={"note": "No evaluation criteria"})
    if criteria.actions is None and criteria.env_assertions is None:
        return RewardInfo(
            reward=1.0,
            db_check=DBCheck(db_match=True, db_reward=1.0),
            info={"note": "No expected actions or env assertions"},
        )
    data, actions, _history = _initial_state(task)
    predicted = lazy_environment(domain)
    predicted.set_state(initialization_data=data, initialization_actions=actions, message_history=messages)
    expected = (gold if gold is not None else _GOLD).get(task, domain)
    got = _hashes(predicted)  # before the assertions: running them syncs tools, which may change the databases
    db_match = expected.agent == got.agent and expected.user == got.user
    db_reward = 1.0 if db_match else 0.0
    checks = []
    assertions_reward = 1.0
    for assertion in criteria.env_assertions or []:
        try:
            met = predicted.run_env_assertion(assertion, raise_assertion_error=False)
        except Exception as error:  # raised as tau2 raises it, marked as provoked by the attempt's state
            setattr(error, _PROVOKED, assertion)
            raise
        checks.append(EnvAssertionCheck(env_assertion=assertion, met=met, reward=1.0 if met else 0.0))
        assertions_reward *= 1.0 if met else 0.0
    reward = 1.0
    breakdown: dict[RewardType, float] = {}
    if RewardType.DB in criteria.reward_basis:
        breakdown[RewardType.DB] = db_reward
        reward *= db_reward
    if RewardType.ENV_ASSERTION in criteria.reward_basis:
        breakdown[RewardType.ENV_ASSERTION] = assertions_reward
        reward *= assertions_reward
    return RewardInfo(
        reward=reward,
        db_check=DBCheck(db_match=db_match, db_reward=db_reward),
        env_assertions=checks,
        reward_basis=criteria.reward_basis,
        reward_breakdown=breakdown,
    )


_PROVOKED = "_arena_provoked_by_env_assertion"


def provoking_assertion(error: BaseException) -> EnvAssertion | None:
    """The environment assertion whose function raised ``error`` on the state the attempt left, if that is where it
    came from (e.g. mock's ``assert_task_status`` on a task the agent never created: "Task task_2 not found").

    tau2's ``evaluate_simulation`` raises there, and :func:`evaluate` raises the same; but the failure is the
    conversation's doing (the agent's, including doing nothing), so it is the agent's failure, scored 0 as tau2's
    runner scores a run whose evaluation raised. Anything else :func:`evaluate` raises (a replayed tool output that
    differs, the gold side, our own code) stays a harness error."""
    found = getattr(error, _PROVOKED, None)
    return found if isinstance(found, EnvAssertion) else None


def evaluate(
    simulation: SimulationRun, task: Task, domain: str, gold: GoldCache | None = None, *, retrieval: str | None = None
) -> RewardInfo:
    """What ``evaluate_simulation(simulation, task, EvaluationType.ALL, solo_mode=False, domain)`` returns or raises.

    Under upstream tau2 v1.0.x (``installed_tau2().flavour == "upstream"``) it *is* that call: v1.0.x's evaluator
    differs (tool types in action checks, NL assertions in 39 of retail's 40 test tasks' reward basis, which need
    its LLM judge: offline that raises, a harness error, never the agent's), so nothing is re-derived there; its
    environments get what tau2's runner gives them (banking_knowledge: ``retrieval``, the task, its allowlist)."""
    if installed_tau2().flavour == "upstream":
        return _upstream_evaluate(simulation, task, domain, retrieval)
    if simulation.termination_reason not in SCORED:
        reason = simulation.termination_reason.value
        return RewardInfo(
            reward=0.0,
            reward_basis=None,
            info={"note": f"Simulation terminated prematurely. Termination reason: {reason}"},
        )
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, reward_basis=None, info={"note": "No evaluation criteria"})
    messages = simulation.messages
    environment = environment_check(task, messages, domain, gold)
    action = ActionEvaluator.calculate_reward(task=task, full_trajectory=messages)
    communicate = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages)
    basis = set(criteria.reward_basis)
    reward = 1.0
    breakdown: dict[RewardType, float] = {}
    for part, counted in (
        (environment, bool(basis & ENVIRONMENT_BASIS)),
        (action, RewardType.ACTION in basis),
        (None, RewardType.NL_ASSERTION in basis),
        (communicate, RewardType.COMMUNICATE in basis),
    ):
        if not counted:
            continue
        if part is None:
            raise ValueError("NL assertions are part of the reward basis, but they are not being evaluated.")
        if part.reward_breakdown is not None:
            breakdown.update(part.reward_breakdown)
        reward *= part.reward
    return RewardInfo(
        reward=reward,
        db_check=environment.db_check,
        env_assertions=environment.env_assertions,
        action_checks=action.action_checks,
        nl_assertions=None,
        communicate_checks=communicate.communicate_checks,
        reward_basis=criteria.reward_basis,
        reward_breakdown=breakdown,
        info={"env": environment.info, "nl": None, "communicate": communicate.info, "action": action.info},
    )


def _upstream_evaluate(simulation: SimulationRun, task: Task, domain: str, retrieval: str | None = None) -> RewardInfo:
    """Upstream tau2's own ``evaluate_simulation`` (imports its evaluator and litellm on first use), with the
    environment arguments tau2's runner passes (``tau2.runner.build._build_env_kwargs``; none outside
    banking_knowledge)."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from green_agent.engine.tau.banking import environment_kwargs

    extra = environment_kwargs(domain, task, retrieval)
    info: RewardInfo = evaluate_simulation(
        simulation=simulation,
        task=task,
        evaluation_type=EvaluationType.ALL,
        solo_mode=False,
        domain=domain,
        **({"env_kwargs": extra} if extra else {}),
    )
    return info
