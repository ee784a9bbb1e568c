"""The backend against a real a2a-sdk 1.3 server (the stack our green and white agents use), with the 0.3 compat
layer on as docs/design/agentbeats-protocol.md requires: card fetch, battle_info over message/send, battle_start
over message/stream, and the agent's reports back to the backend."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from a2a.helpers import get_message_text, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, Role
from starlette.applications import Starlette

from tests.battle_backend.conftest import Arena, wait_until
from tests.support.servers import serve_app_factory


class RecordingExecutor(AgentExecutor):
    """Acknowledges every message at once; on battle_start reports two events and a result in the background."""

    def __init__(self) -> None:
        self.texts: list[dict[str, Any]] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message) if context.message else ""
        payload = json.loads(text)
        self.texts.append(payload)
        if payload.get("type") == "battle_start":
            task = asyncio.create_task(self._report(payload))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        await event_queue.enqueue_event(new_text_message(f"ack {payload.get('type')}", role=Role.ROLE_AGENT))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None

    async def _report(self, start: dict[str, Any]) -> None:
        context = start["green_battle_context"]
        url = f"{context['backend_url']}/battles/{start['battle_id']}"
        headers = {"X-Battle-Token": context["battle_token"]}
        async with httpx.AsyncClient(trust_env=False) as client:
            await client.post(
                url, json={"is_result": False, "message": "sdk progress", "reported_by": "sdk-green"}, headers=headers
            )
            await client.post(
                url,
                json={
                    "is_result": True,
                    "message": "sdk done",
                    "winner": "white_agent",
                    "reported_by": "sdk-green",
                    "detail": {},
                },
                headers=headers,
            )


def sdk_app(base_url: str, executor: RecordingExecutor, name: str) -> Starlette:
    card = AgentCard(
        name=name,
        description="a2a-sdk 1.3 agent for the interop test",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=base_url + "/", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=base_url + "/", protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)]
    )


async def test_battle_with_a2a_sdk_agents(arena: Arena) -> None:
    green_exec, white_exec = RecordingExecutor(), RecordingExecutor()
    green_url = await arena.stack.enter_async_context(
        serve_app_factory(lambda url: sdk_app(url, green_exec, "sdk-green"))
    )
    white_url = await arena.stack.enter_async_context(
        serve_app_factory(lambda url: sdk_app(url, white_exec, "sdk-white"))
    )
    client = arena.client
    green = (
        await client.post(
            "/agents",
            json={
                "alias": "sdk green",
                "agent_url": green_url,
                "launcher_url": "",
                "is_green": True,
                "participant_requirements": [{"role": "blue_agent", "name": "white_agent", "required": True}],
            },
        )
    ).json()
    white = (
        await client.post(
            "/agents", json={"alias": "sdk white", "agent_url": white_url, "launcher_url": "", "is_green": False}
        )
    ).json()
    assert green["agent_card"]["name"] == "sdk-green"
    battle = (
        await client.post(
            "/battles",
            json={
                "green_agent_id": green["agent_id"],
                "opponents": [{"name": "white_agent", "agent_id": white["agent_id"]}],
            },
        )
    ).json()
    finished = await arena.wait_state(battle["battle_id"], "finished", "error")
    assert finished["state"] == "finished", finished.get("error")
    assert finished["result"]["winner"] == "white_agent"
    messages = [e.get("message") for e in finished["interact_history"]]
    assert "sdk progress" in messages and "sdk done" in messages
    assert [t["type"] for t in green_exec.texts] == ["battle_info", "battle_start"]
    assert [t["type"] for t in white_exec.texts] == ["battle_info"]
    await wait_until(lambda: _drained(green_exec))


async def _drained(executor: RecordingExecutor) -> bool:
    await asyncio.sleep(0)
    return not executor.tasks
