"""The replay (calibration) agent over real A2A: gold actions in order, the final statement, isolation, LRU."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.white_agent.conftest import gold_calls, run_attempt, serving, tau2_task
from tests.white_agent.helpers import arena_block, failed_state, first_message, talk
from white_agent.replay import CLOSING_TEXT, ReplayAgent, ask_user_text

TELECOM_10 = "[service_issue]airplane_mode_on|overdue_bill_suspension[PERSONA:None]"
"""tau2's id of telecom/test 10."""


async def test_card_announces_both_protocol_versions() -> None:
    async with serving(ReplayAgent()) as url, httpx.AsyncClient() as http:
        card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
    versions = {i["protocolVersion"] for i in card["supportedInterfaces"]}
    assert versions == {"1.0", "0.3"}
    assert card["url"] == url + "/"  # the legacy field 0.3 clients read
    assert card["name"] == ReplayAgent.card_name


async def test_replays_gold_actions_then_tells_the_information(wire: str) -> None:
    task = tau2_task("retail", "test", "32")
    info = task.evaluation_criteria.communicate_info
    assert len(gold_calls(task)) > 5 and info
    async with serving(ReplayAgent()) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
        answers = await run_attempt(talker, "ctx-1", arena_block("32", index=7))
        after = await talker.send("ctx-1", "User message:\nThanks!")
        again = await talker.send("ctx-1", "User message:\nBye")
    assert all(a.kind == "message" for a in answers)
    actions = [a.action() for a in answers]
    assert actions[:-1] == gold_calls(task)
    final = actions[-1]
    assert final is not None and final["name"] == "respond"
    content = final["arguments"]["content"]
    assert "?" not in content
    for needle in info:  # tau2's check: case-insensitive, commas removed from the message
        assert needle.lower() in content.lower().replace(",", "")
    for closing in (after, again):
        assert closing.action() == {
            "name": "respond",
            "arguments": {"content": CLOSING_TEXT},
            "kwargs": {"content": CLOSING_TEXT},
        }


async def test_first_task_of_retail_test_split() -> None:
    task = tau2_task("retail", "test", "5")
    async with serving(ReplayAgent()) as url, talk(url) as talker:
        answers = await run_attempt(talker, "c", arena_block("5"))
    assert [a.action() for a in answers[:-1]] == gold_calls(task)
    assert answers[-1].action()["name"] == "respond"  # type: ignore[index]


async def test_arena_in_metadata_only_or_data_only_is_enough() -> None:
    async with serving(ReplayAgent()) as url, talk(url) as talker:
        text, data, metadata = first_message("hi", arena=arena_block("5"))
        only_meta = await talker.send(
            "a", text, data={k: v for k, v in data.items() if k != "arena"}, metadata=metadata
        )
        only_data = await talker.send("b", text, data=data, metadata=None)
    expected = gold_calls(tau2_task("retail", "test", "5"))[0]
    assert only_meta.action() == expected
    assert only_data.action() == expected


async def test_without_metadata_it_says_it_is_a_calibration_agent(wire: str) -> None:
    async with serving(ReplayAgent()) as url, talk(url, wire) as talker:  # type: ignore[arg-type]
        text, data, _ = first_message("hi")
        answer = await talker.send("ctx", text, data=data)
    action = answer.action()
    assert answer.kind == "message" and action is not None and action["name"] == "respond"
    assert "calibration" in action["arguments"]["content"].lower()
    assert "?" not in action["arguments"]["content"]


async def test_unknown_task_is_reported_as_failure() -> None:
    async with serving(ReplayAgent()) as url, talk(url) as talker:
        text, data, metadata = first_message("hi", arena=arena_block("no-such-task"))
        answer = await talker.send("ctx", text, data=data, metadata=metadata)
    assert failed_state(answer)
    assert "no-such-task" in answer.text


async def test_interleaved_contexts_get_independent_sequences() -> None:
    gold_5 = gold_calls(tau2_task("retail", "test", "5"))
    gold_32 = gold_calls(tau2_task("retail", "test", "32"))
    async with serving(ReplayAgent()) as url, talk(url) as talker:
        t5, d5, m5 = first_message("hi", arena=arena_block("5"))
        t32, d32, m32 = first_message("hi", arena=arena_block("32"))
        seen: dict[str, list[dict[str, Any]]] = {"A": [], "B": [], "C": []}
        seen["A"].append((await talker.send("A", t5, data=d5, metadata=m5)).action())  # type: ignore[arg-type]
        seen["B"].append((await talker.send("B", t32, data=d32, metadata=m32)).action())  # type: ignore[arg-type]
        seen["C"].append((await talker.send("C", t5, data=d5, metadata=m5)).action())  # type: ignore[arg-type]
        for _ in range(3):
            for ctx in ("A", "B", "C"):
                seen[ctx].append((await talker.send(ctx, "Tool call result:\nx")).action())  # type: ignore[arg-type]
        # and concurrently: one more turn in each context at once
        more = await asyncio.gather(*(talker.send(ctx, "Tool call result:\ny") for ctx in ("A", "B", "C")))
        for ctx, answer in zip(("A", "B", "C"), more, strict=True):
            seen[ctx].append(answer.action())  # type: ignore[arg-type]
    assert seen["A"] == gold_5[:5]
    assert seen["C"] == gold_5[:5]
    assert seen["B"] == gold_32[:5]


async def test_idle_contexts_are_forgotten_least_recently_used_first() -> None:
    agent = ReplayAgent(max_contexts=2, idle_s=0)  # idle at once: forgotten least recently used first
    async with serving(agent) as url, talk(url) as talker:
        text, data, metadata = first_message("hi", arena=arena_block("5"))
        for ctx in ("A", "B"):
            await talker.send(ctx, text, data=data, metadata=metadata)
        await talker.send("A", "Tool call result:\nx")  # A is now the most recently used
        await talker.send("C", text, data=data, metadata=metadata)  # evicts B
        assert agent.contexts.context_ids() == ["A", "C"]
        kept = await talker.send("A", "Tool call result:\nx")
        forgotten = await talker.send("B", "Tool call result:\nx")  # a new context now; evicts C
        assert agent.contexts.context_ids() == ["A", "B"]
    assert "calibration" in forgotten.action()["arguments"]["content"].lower()  # type: ignore[index]
    assert kept.action() == gold_calls(tau2_task("retail", "test", "5"))[2]
    assert len(agent.contexts) == 2


async def test_streaming_clients_get_the_same_action() -> None:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.helpers import get_message_text, new_data_part, new_text_part
    from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest

    text, data, metadata = first_message("hi", arena=arena_block("5"))
    message = Message(
        role=Role.ROLE_USER, message_id="m1", context_id="s", parts=[new_text_part(text), new_data_part(data)]
    )
    message.metadata.update(metadata or {})
    async with serving(ReplayAgent()) as url, httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        items = [item async for item in client.send_message(SendMessageRequest(message=message))]
    assert [i.WhichOneof("payload") for i in items] == ["message"]
    assert get_message_text(items[0].message).startswith("<json>")
    assert gold_calls(tau2_task("retail", "test", "5"))[0]["name"] in get_message_text(items[0].message)


async def test_telecom_asks_the_customer_for_their_own_actions_in_order() -> None:
    # telecom/test 10 (tau2 id below): the customer's device actions and the agent's interleaved.
    task = tau2_task("telecom", "test", TELECOM_10)
    gold = task.evaluation_criteria.actions
    assert {a.requestor for a in gold} == {"user", "assistant"}
    async with serving(ReplayAgent()) as url, talk(url) as talker:
        arena = arena_block(TELECOM_10, domain="telecom")
        text, data, metadata = first_message("My phone has no service.", arena=arena)
        answers = [await talker.send("t", text, data=data, metadata=metadata)]
        for _ in gold:
            action = answers[-1].action()
            assert action is not None
            follow_up = "User message:\nI ran it." if action["name"] == "respond" else "Tool call result:\nok"
            answers.append(await talker.send("t", follow_up))
    actions = [a.action() for a in answers]
    for expected, got in zip(gold, actions, strict=False):
        assert got is not None
        if expected.requestor == "assistant":
            assert (got["name"], got["arguments"]) == (expected.name, expected.arguments)
        else:  # asked for in words: the user tool's exact name, and its arguments as JSON when it takes any
            assert got["name"] == "respond"
            assert got["arguments"]["content"] == ask_user_text(expected.name, dict(expected.arguments))
            assert f" {expected.name}" in got["arguments"]["content"]
    final = actions[len(gold)]
    assert final is not None and final["name"] == "respond" and "?" not in final["arguments"]["content"]


def test_the_request_to_the_customer_names_the_tool_and_its_arguments() -> None:
    assert ask_user_text("toggle_airplane_mode", {}) == (
        "Please do this on your phone: toggle_airplane_mode. Let me know when it is done."
    )
    assert ask_user_text("set_network_mode_preference", {"mode": "4g_5g_preferred"}) == (
        'Please do this on your phone: set_network_mode_preference with {"mode": "4g_5g_preferred"}. '
        "Let me know when it is done."
    )
