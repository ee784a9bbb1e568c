"""The flaky agent: the seeded fault draw (properties) and each fault's behaviour over real A2A."""

from __future__ import annotations

import asyncio
import typing
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.white_agent.conftest import gold_calls, serving, tau2_task
from tests.white_agent.helpers import Answer, Talker, arena_block, completed_state, failed_state, first_message, talk
from white_agent.errors import TurnAbandoned, WhiteAgentConfigError
from white_agent.flaky import (
    FAULTS,
    MALFORMED_TEXT,
    TURN_FAULTS,
    FlakyAgent,
    choose_fault,
    corrupt_arguments,
    faulty_script,
    validate_fault_rates,
)
from white_agent.gold import load_gold_task
from white_agent.protocol import ArenaInfo, GreenTurn

TELECOM_0 = "[mobile_data_issue]data_saver_mode_on|user_abroad_roaming_enabled_off[PERSONA:Easy]"
TASK = "40"  # retail test: 3 reads then a write; communicate_info ["60", "mastercard"]
INFO = ["60", "mastercard"]


def test_fault_list_matches_the_green_agent_config() -> None:
    from launcher.cli.scenario import FlakyFault

    assert typing.get_args(FlakyFault) == FAULTS


def test_rates_are_validated() -> None:
    with pytest.raises(WhiteAgentConfigError, match="sum to at most 1"):
        validate_fault_rates({"crash": 0.6, "no_reply": 0.5})
    with pytest.raises(WhiteAgentConfigError, match="unknown fault 'explode'"):
        validate_fault_rates({"explode": 0.1})
    with pytest.raises(WhiteAgentConfigError, match="between 0 and 1"):
        validate_fault_rates({"crash": -0.1})
    with pytest.raises(WhiteAgentConfigError):
        FlakyAgent(fault_rates={"crash": 1.0, "skip_action": 0.5})


rates_strategy = st.dictionaries(st.sampled_from(FAULTS), st.floats(0, 1), max_size=len(FAULTS)).filter(
    lambda r: sum(r.values()) <= 1.0
)


@given(
    seed=st.integers(),
    task=st.text(max_size=5),
    attempt=st.integers(1, 50),
    rates=rates_strategy,
    n_turns=st.integers(1, 30),
)
def test_fault_draw_is_a_pure_function_with_the_cumulative_walk(
    seed: int, task: str, attempt: int, rates: dict[str, float], n_turns: int
) -> None:
    decision = choose_fault(seed, "retail", task, attempt, rates, n_turns)
    assert decision == choose_fault(seed, "retail", task, attempt, dict(reversed(list(rates.items()))), n_turns)
    assert 0 <= decision.turn < n_turns
    cumulative = 0.0
    expected = None
    for name in FAULTS:
        if decision.draw < cumulative + rates.get(name, 0.0):
            expected = name
            break
        cumulative += rates.get(name, 0.0)
    assert decision.fault == expected


@given(fault=st.sampled_from(FAULTS), seed=st.integers(), attempt=st.integers(1, 100))
def test_rate_one_always_and_rate_zero_never(fault: str, seed: int, attempt: int) -> None:
    assert choose_fault(seed, "airline", "7", attempt, {fault: 1.0}, 5).fault == fault
    assert choose_fault(seed, "airline", "7", attempt, {fault: 0.0}, 5).fault is None


def test_rates_are_roughly_honoured_over_many_attempts() -> None:
    rates = {"crash": 0.25, "task_reply": 0.25}
    faults = [choose_fault(3, "retail", str(t), a, rates, 4).fault for t in range(100) for a in range(1, 5)]
    assert 60 <= faults.count("crash") <= 140 and 60 <= faults.count("task_reply") <= 140
    assert 120 <= faults.count(None) <= 280


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@given(arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_corrupt_arguments_changes_exactly_one_value(arguments: dict[str, Any]) -> None:
    original = dict(arguments)
    corrupted, key = corrupt_arguments(arguments)
    assert arguments == original  # the input is not modified
    changed = {k for k in set(corrupted) | set(original) if corrupted.get(k, object()) != original.get(k, object())}
    assert changed == {key}


def _decision(agent: FlakyAgent, task_id: str = TASK) -> Any:
    arena = ArenaInfo.model_validate(arena_block(task_id))
    return agent.decide(arena, load_gold_task("retail", "test", task_id))


def _agent_striking_mid_attempt(fault: str, **options: Any) -> tuple[FlakyAgent, int]:
    """A flaky agent whose drawn turn for ``fault`` lies strictly inside the attempt (not first, not final)."""
    n_turns = len(load_gold_task("retail", "test", TASK).actions) + 1
    for seed in range(200):
        agent = FlakyAgent(seed=seed, fault_rates={fault: 1.0}, **options)
        turn = _decision(agent).turn
        if 0 < turn < n_turns - 1:
            return agent, turn
    raise AssertionError("no seed gives a mid-attempt turn")


async def _drive(talker: Talker, context_id: str, task_id: str, turns: int) -> list[Answer]:
    """Send the first message and then tool results, ``turns`` messages in all, whatever the agent answers."""
    text, data, metadata = first_message("hello", arena=arena_block(task_id))
    answers = [await talker.send(context_id, text, data=data, metadata=metadata)]
    for _ in range(turns - 1):
        answers.append(await talker.send(context_id, "Tool call result:\nok"))
    return answers


def _final_content(answers: list[Answer]) -> str:
    finals = [a.action() for a in answers if a.action() and a.action()["name"] == "respond"]  # type: ignore[index]
    return str(finals[0]["arguments"]["content"])  # type: ignore[index]


def _gold() -> list[dict[str, Any]]:
    return gold_calls(tau2_task("retail", "test", TASK))


@pytest.mark.parametrize("fault", ["skip_action", "wrong_argument", "drop_final", "partial_final"])
async def test_script_faults(fault: str) -> None:
    gold = _gold()
    async with serving(FlakyAgent(seed=1, fault_rates={fault: 1.0})) as url, talk(url) as talker:
        answers = await _drive(talker, "ctx", TASK, len(gold) + 1)
    assert all(a.kind == "message" for a in answers)
    calls = [a.action() for a in answers if a.action()["name"] != "respond"]  # type: ignore[index]
    final = _final_content(answers)
    if fault == "skip_action":
        assert calls == gold[:-1]  # the last (write) action is gone
    elif fault == "wrong_argument":
        assert len(calls) == len(gold) and calls[:-1] == gold[:-1]
        assert calls[-1]["name"] == gold[-1]["name"]  # type: ignore[index]
        diff = {k for k in gold[-1]["arguments"] if calls[-1]["arguments"].get(k) != gold[-1]["arguments"][k]}  # type: ignore[index]
        assert len(diff) == 1
    else:
        assert calls == gold
    text = final.lower().replace(",", "")
    if fault == "drop_final":
        assert not any(i in text for i in INFO)
    elif fault == "partial_final":
        assert "60" in text and "mastercard" not in text
    else:
        assert all(i in text for i in INFO)


@pytest.mark.parametrize("fault", ["malformed_reply", "crash", "report_failure"])
async def test_turn_faults_strike_at_the_drawn_turn(fault: str, wire: str) -> None:
    gold = _gold()
    agent, turn = _agent_striking_mid_attempt(fault)
    async with serving(agent) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
        answers = await _drive(talker, "ctx", TASK, len(gold) + 2)
    struck = answers[turn]
    if fault == "malformed_reply":
        assert struck.kind == "message" and struck.text == MALFORMED_TEXT
        assert "{" not in struck.text and "<json>" not in struck.text
    elif fault == "crash":
        assert struck.kind == "error" and struck.error_code == -32603
    else:
        assert failed_state(struck) and "could not complete" in struck.text
    others = [a for i, a in enumerate(answers) if i != turn]
    assert all(a.kind == "message" for a in others)
    # the fault did not consume a gold action: the script resumes where it was
    assert [a.action() for a in others[: len(gold)]] == gold
    assert others[len(gold)].action()["name"] == "respond"  # type: ignore[index]


async def test_task_reply_answers_every_turn_with_a_completed_task(wire: str) -> None:
    gold = _gold()
    async with serving(FlakyAgent(seed=2, fault_rates={"task_reply": 1.0})) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
        answers = await _drive(talker, "ctx", TASK, len(gold) + 2)
    assert all(completed_state(a) for a in answers)
    assert all(a.artifact_texts == [a.text] for a in answers)
    assert [a.action() for a in answers[: len(gold)]] == gold
    assert all(i in _final_content(answers).lower() for i in INFO)


async def test_no_reply_hangs_at_the_drawn_turn() -> None:
    agent, turn = _agent_striking_mid_attempt("no_reply")
    async with serving(agent) as url, talk(url, "0.3") as talker:
        text, data, metadata = first_message("hello", arena=arena_block(TASK))
        messages = [(text, data, metadata)] + [("Tool call result:\nok", None, None)] * turn
        for index, (body, part, meta) in enumerate(messages):
            if index < turn:
                answer = await talker.send("ctx", body, data=part, metadata=meta)
                assert answer.kind == "message"
            else:
                with pytest.raises(httpx.ReadTimeout):
                    await talker.send("ctx", body, data=part, metadata=meta, timeout=1.5)


async def test_no_reply_answers_after_its_delay_as_if_nothing_happened() -> None:
    gold = _gold()
    agent, _turn = _agent_striking_mid_attempt("no_reply", no_reply_s=0.05)
    async with serving(agent) as url, talk(url) as talker:
        answers = await _drive(talker, "ctx", TASK, len(gold) + 1)
    assert [a.action() for a in answers[: len(gold)]] == gold
    assert answers[len(gold)].action()["name"] == "respond"  # type: ignore[index]


async def _until_hanging(pending: asyncio.Task[Any]) -> None:
    """Give a turn time to reach its hang (it fails the same way if abandoned before: see the tests below)."""
    done, _ = await asyncio.wait({pending}, timeout=0.3)
    assert not done, "the no_reply turn answered instead of hanging"


async def test_abandoning_wakes_the_hanging_turn_and_fails_later_ones_at_once() -> None:
    agent, turn = _agent_striking_mid_attempt("no_reply")
    other, _ = _agent_striking_mid_attempt("no_reply")
    text, data, metadata = first_message("hello", arena=arena_block(TASK))
    async with serving(agent) as url, talk(url) as talker:
        for index in range(turn):
            message = (text, data, metadata) if index == 0 else ("Tool call result:\nok", None, None)
            assert (await talker.send("ctx", message[0], data=message[1], metadata=message[2])).kind == "message"
        hanging = asyncio.create_task(talker.send("ctx", "Tool call result:\nok"))
        await _until_hanging(hanging)
        agent.abandon_hanging_turns()
        answer = await asyncio.wait_for(hanging, timeout=10)
    # never a reply: the JSON-RPC internal error, which the green agent counts as a communication error
    assert answer.kind == "error" and answer.error_code == -32603
    assert "abandoned this turn" in answer.error_message
    # once abandoning, a no_reply turn fails at once (no hang)
    first = GreenTurn(kind="first", text="hello", content="hello", arena=ArenaInfo.model_validate(arena_block(TASK)))
    later = GreenTurn(kind="tool_result", text="Tool call result:\nok", content="ok")
    other.abandon_hanging_turns()
    for index in range(turn):
        await other.reply("ctx", first if index == 0 else later)
    with pytest.raises(TurnAbandoned):
        await asyncio.wait_for(other.reply("ctx", later), timeout=10)


async def test_same_seed_same_faults_other_seed_other_faults() -> None:
    rates = {"crash": 0.3, "malformed_reply": 0.3}
    a, b, c = (FlakyAgent(seed=s, fault_rates=rates) for s in (5, 5, 6))
    tasks = ["5", "9", "12", "17", "18", "32", "40"]
    draws = [[_decision(agent, t).fault for t in tasks] for agent in (a, b, c)]
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


def test_turn_faults_are_the_documented_ones() -> None:
    assert {"malformed_reply", "no_reply", "crash", "report_failure"} == TURN_FAULTS


def test_telecom_faults_reach_the_customers_actions() -> None:
    # telecom/test 0: only device actions (toggle_data_saver_mode, toggle_roaming); the last write is the user's.
    gold = load_gold_task("telecom", "test", TELECOM_0)
    assert [(s.requestor, s.name) for s in gold.steps] == [
        ("user", "toggle_data_saver_mode"),
        ("user", "toggle_roaming"),
    ]
    assert gold.actions == ()
    faithful = faulty_script(gold, None).actions
    assert [(a.name, a.by_user) for a in faithful] == [("toggle_data_saver_mode", True), ("toggle_roaming", True)]
    assert [a.name for a in faulty_script(gold, "skip_action").actions] == ["toggle_data_saver_mode"]
    wrong = faulty_script(gold, "wrong_argument").actions
    assert wrong[1].by_user and wrong[1].arguments() == {"unexpected_argument": "x"}
    assert wrong[1].reply().count("unexpected_argument") == 2  # in "arguments" and "kwargs" of the respond action
    # Turns for turn-bound faults: one per step (the customer's included) plus the final statement.
    agent = FlakyAgent(seed=5, fault_rates={"crash": 1.0})
    arena = ArenaInfo.model_validate(arena_block(gold.task_id, domain="telecom"))
    expected = choose_fault(5, "telecom", gold.task_id, 1, {"crash": 1.0}, len(gold.steps) + 1)
    assert agent.decide(arena, gold) == expected
