"""One battle's setup, in the AgentBeats order: reset through launchers, wait for ready, battle_info to every
agent, arm the battle timeout, battle_start to the green agent over a streaming A2A call.

Differences from AgentBeats, on purpose:
- a green agent that is slow to acknowledge battle_start is only logged as late, never errored: its reports are
  accepted until the battle timeout (AgentBeats errors the battle after 5 s of silence);
- a battle_info that is not answered in time is logged and the battle goes on (an unreachable agent or an error
  answer still fails the battle, as in AgentBeats);
- launchers are reset concurrently, and a ready report wakes the waiter at once (the poll remains as a fallback);
- the battle token goes to the green agent only (its battle_info and battle_start). AgentBeats put it in every
  agent's battle_info, so an opponent could post a forged result with it and the green agent's real result was then
  refused; opponents receive nothing that lets them write to the battle. Text an agent sends back (its
  acknowledgement, error messages) is logged with the token blanked out, since interact_history is public.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from battle_backend.battles.a2a_messages import A2ADeliveryError, send_text, stream_text
from battle_backend.battles.agent_cards import a2a_endpoint
from battle_backend.battles.launcher_client import LauncherError, reset_agent
from battle_backend.battles.service import BattleService
from battle_backend.settings import BackendSettings
from battle_backend.store.records import AgentRecord, BattleRecord, BattleState

logger = logging.getLogger(__name__)

FAILED_TASK_STATES = frozenset({"failed", "rejected", "canceled", "cancelled"})
REDACTED = "[battle_token]"


def redact_token(text: str, token: str | None) -> str:
    """``text`` with the battle token blanked out: an agent may echo its battle_info/battle_start back, and what the
    backend logs from it ends up in the public interact_history."""
    return text.replace(token, REDACTED) if token else text


@dataclass(frozen=True)
class Seat:
    """One agent's place in a battle: the record plus the name it plays under."""

    agent: AgentRecord
    battle_name: str
    """"green_agent" for the green agent (AgentBeats' battle_info name), else the participant-requirement name."""
    is_green: bool

    @property
    def label(self) -> str:
        """How error messages name this agent."""
        role = "green agent" if self.is_green else f"opponent '{self.battle_name}'"
        return f"{role} {self.agent.alias} ({self.agent.agent_id})"

    @property
    def endpoint(self) -> str:
        """Where its JSON-RPC goes."""
        return a2a_endpoint(self.agent.agent_card, self.agent.agent_url)


class BattleFlow:
    """Runs the setup of battles; the scheduler owns the tasks it hands over (timeout, green stream)."""

    def __init__(
        self,
        service: BattleService,
        settings: BackendSettings,
        http: httpx.AsyncClient,
        *,
        arm_timeout: Callable[[str, float, float], None],
        adopt_task: Callable[[str, asyncio.Task[None]], None],
    ) -> None:
        self._service = service
        self._settings = settings
        self._http = http
        self._arm_timeout = arm_timeout
        self._adopt_task = adopt_task

    async def run(self, battle_id: str) -> None:
        """Set the battle up; any unexpected failure becomes the battle's error instead of a stuck battle."""
        try:
            await self._run(battle_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("battle %s: setup crashed", battle_id)
            await self._service.fail(
                battle_id, f"internal error while setting up the battle: {type(exc).__name__}: {exc}"
            )

    async def _still_running(self, battle_id: str) -> bool:
        battle = await self._service.store.get_battle(battle_id, include_events=False)
        return battle is not None and battle.state is BattleState.RUNNING

    async def _seats(self, battle: BattleRecord) -> list[Seat] | None:
        store = self._service.store
        green = await store.get_agent(battle.green_agent_id)
        if green is None:
            await self._service.fail(battle.battle_id, f"Green agent {battle.green_agent_id} not found")
            return None
        seats = [Seat(agent=green, battle_name="green_agent", is_green=True)]
        for opponent in battle.opponents:
            agent = await store.get_agent(str(opponent["agent_id"]))
            if agent is None:
                await self._service.fail(battle.battle_id, f"Opponent agent {opponent['agent_id']} not found")
                return None
            seats.append(Seat(agent=agent, battle_name=str(opponent["name"]), is_green=False))
        return seats

    async def _run(self, battle_id: str) -> None:
        battle = await self._service.store.get_battle(battle_id, include_events=False)
        if battle is None or battle.state is not BattleState.RUNNING:
            return
        seats = await self._seats(battle)
        if seats is None:
            return
        backend_url = battle.backend_url or self._settings.public_url or ""
        if not await self._reset(battle, seats, backend_url):
            return
        if not await self._wait_ready(battle_id, seats):
            return
        if not await self._still_running(battle_id) or not await self._battle_info(battle, seats, backend_url):
            return
        green = seats[0]
        battle_timeout = float(
            green.agent.register_info.get("battle_timeout") or self._settings.battle_timeout_default_s
        )
        if not await self._service.store.set_deadline(battle_id, time.time() + battle_timeout, battle_timeout):
            return
        self._arm_timeout(battle_id, time.time() + battle_timeout, battle_timeout)
        await self._service.log(battle_id, f"Battle timeout set to {battle_timeout:g} seconds, starting battle.")
        if self._settings.start_delay_s:
            await asyncio.sleep(self._settings.start_delay_s)
        if await self._still_running(battle_id):
            await self._battle_start(battle, seats, backend_url)

    # --- steps --------------------------------------------------------------------------------------------
    async def _reset(self, battle: BattleRecord, seats: list[Seat], backend_url: str) -> bool:
        with_launcher = [seat for seat in seats if seat.agent.launcher_url]
        without = [seat.agent.agent_id for seat in seats if not seat.agent.launcher_url]
        await self._service.log(
            battle.battle_id,
            "Resetting agents through their launchers",
            {"launchers": {s.agent.agent_id: s.agent.launcher_url for s in with_launcher}, "no_launcher": without},
        )
        outcomes = await asyncio.gather(
            *(
                reset_agent(
                    self._http,
                    seat.agent.launcher_url,
                    seat.agent.agent_id,
                    backend_url,
                    timeout=self._settings.http_timeout_s,
                )
                for seat in with_launcher
            ),
            return_exceptions=True,
        )
        for seat, outcome in zip(with_launcher, outcomes, strict=True):
            if isinstance(outcome, LauncherError):
                await self._service.fail(battle.battle_id, f"Failed to reset {seat.label}: {outcome}")
                return False
            if isinstance(outcome, BaseException):
                await self._service.fail(
                    battle.battle_id, f"Failed to reset {seat.label}: {type(outcome).__name__}: {outcome}"
                )
                return False
        return True

    async def _wait_ready(self, battle_id: str, seats: list[Seat]) -> bool:
        """Wait until every agent with a launcher reported ready; wakes on each report, polls as a fallback."""
        pending = {seat.agent.agent_id: seat for seat in seats if seat.agent.launcher_url}
        timeout = self._settings.ready_timeout_s
        await self._service.log(battle_id, "Waiting for agents to be ready", {"ready_timeout": timeout})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with self._service.hub.ready_waiter(list(pending)) as woken:
            while True:
                woken.clear()
                for agent_id in list(pending):
                    agent = await self._service.store.get_agent(agent_id)
                    if agent is not None and agent.ready:
                        del pending[agent_id]
                if not pending:
                    break
                if not await self._still_running(battle_id):
                    return False
                remaining = deadline - loop.time()
                if remaining <= 0:
                    names = "; ".join(seat.label for seat in pending.values())
                    await self._service.fail(
                        battle_id,
                        f"Not all agents ready after {timeout:g} seconds: {names} did not report "
                        '{"ready": true} through PUT /agents/{agent_id}',
                    )
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), timeout=min(self._settings.ready_poll_interval_s, remaining))
        await self._service.log(battle_id, "All agents ready", {"agent_ids": [seat.agent.agent_id for seat in seats]})
        return True

    async def _battle_info(self, battle: BattleRecord, seats: list[Seat], backend_url: str) -> bool:
        async def deliver(seat: Seat) -> None:
            info: dict[str, Any] = {
                "type": "battle_info",
                "battle_id": battle.battle_id,
                "agent_name": seat.battle_name,
                "agent_id": seat.agent.agent_id,
                "backend_url": backend_url,
            }
            if battle.battle_token and seat.is_green:
                info["battle_token"] = battle.battle_token
            await send_text(self._http, seat.endpoint, json.dumps(info), timeout=self._settings.a2a_timeout_s)

        outcomes = await asyncio.gather(*(deliver(seat) for seat in seats), return_exceptions=True)
        for seat, outcome in zip(seats, outcomes, strict=True):
            if isinstance(outcome, httpx.TimeoutException):
                await self._service.log(
                    battle.battle_id,
                    f"{seat.label} has not answered battle_info within {self._settings.a2a_timeout_s:g} s; going on",
                )
            elif isinstance(outcome, A2ADeliveryError):
                reason = redact_token(str(outcome), battle.battle_token)
                await self._service.fail(battle.battle_id, f"{seat.label} did not accept battle_info: {reason}")
                return False
            elif isinstance(outcome, BaseException):
                reason = redact_token(f"{type(outcome).__name__}: {outcome}", battle.battle_token)
                await self._service.fail(battle.battle_id, f"{seat.label} did not accept battle_info: {reason}")
                return False
        await self._service.log(battle.battle_id, "battle_info sent to every agent")
        return True

    def battle_start_message(self, battle: BattleRecord, seats: list[Seat], backend_url: str) -> dict[str, Any]:
        """The battle_start text, in AgentBeats' shape (names are the agents' aliases there, as in AgentBeats),
        plus ``battle_token`` and, when the battle has one, the battle's ``config``."""
        green, opponents = seats[0], seats[1:]
        green_context: dict[str, Any] = {
            "battle_id": battle.battle_id,
            "backend_url": backend_url,
            "agent_name": green.agent.alias,
            "task_config": f"Task description: {green.agent.register_info.get('task_config') or ''}",
        }
        if battle.config:
            green_context["config"] = battle.config
        if battle.battle_token:
            green_context["battle_token"] = battle.battle_token
        message: dict[str, Any] = {
            "type": "battle_start",
            "battle_id": battle.battle_id,
            "green_battle_context": green_context,
            "red_battle_contexts": {
                seat.agent.agent_url: {
                    "battle_id": battle.battle_id,
                    "backend_url": backend_url,
                    "agent_name": seat.agent.alias,
                }
                for seat in opponents
            },
            "opponent_infos": [
                {"name": seat.agent.alias, "agent_url": seat.agent.agent_url, "participant_name": seat.battle_name}
                for seat in opponents
            ],
        }
        if battle.battle_token:
            message["battle_token"] = battle.battle_token
        return message

    async def _battle_start(self, battle: BattleRecord, seats: list[Seat], backend_url: str) -> None:
        """Open the stream; the first reply is the acknowledgement. The stream keeps being read in a task the
        scheduler owns (cancelled when the battle ends), so task-mode green agents are not cut off."""
        green = seats[0]
        text = json.dumps(self.battle_start_message(battle, seats, backend_url))
        first = asyncio.Event()
        battle_id = battle.battle_id

        async def consume() -> None:
            try:
                async for reply in stream_text(
                    self._http, green.endpoint, text, connect_timeout=self._settings.http_timeout_s
                ):
                    status = reply.raw.get("status")
                    state = str(status.get("state", "")) if isinstance(status, dict) else ""
                    if not first.is_set():
                        first.set()
                        if state in FAILED_TASK_STATES:
                            await self._service.fail(
                                battle_id,
                                f"{green.label} refused battle_start (task {state}): "
                                f"{redact_token(reply.text, battle.battle_token)[:500]}",
                            )
                            return
                        await self._service.log(
                            battle_id,
                            "Green agent acknowledged battle_start",
                            {"kind": reply.kind, "text": redact_token(reply.text, battle.battle_token)[:2000]},
                        )
            except A2ADeliveryError as exc:
                if not first.is_set():
                    first.set()
                    await self._service.fail(
                        battle_id,
                        f"Failed to notify {green.label} at {green.endpoint}: "
                        f"{redact_token(str(exc), battle.battle_token)}",
                    )
                else:
                    logger.info("battle %s: green agent stream ended with %s", battle_id, exc)

        task = asyncio.create_task(consume(), name=f"green-stream-{battle_id}")
        self._adopt_task(battle_id, task)
        try:
            await asyncio.wait_for(first.wait(), timeout=self._settings.green_ack_timeout_s)
        except TimeoutError:
            await self._service.log(
                battle_id,
                f"Green agent has not acknowledged battle_start within {self._settings.green_ack_timeout_s:g} s; "
                "its reports are still accepted until the battle timeout",
            )
