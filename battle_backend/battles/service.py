"""The backend's operations, shared by the JSON API, the web forms, the MCP tools, the battle flow and the scheduler.

Each operation validates, writes through the store, then publishes the change, so every live view hears about
every write no matter which entry point made it. Events are bounded here (not only in the HTTP route) because the
MCP tools reach the store through this same path: whatever the entry point, an event is checked for its size
(``max_event_bytes`` / ``max_result_bytes``) and its JSON values (`body_limits`), and is written only with the
battle's token when one is presented or required.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from typing import Any

import anyio.to_thread
import httpx

from battle_backend.battles.agent_cards import AgentCardError, fetch_agent_card
from battle_backend.battles.api_models import AgentRegistration, ApiError, BattleCreate, BattleEvent
from battle_backend.battles.facts import result_says_calibration
from battle_backend.battles.json_limits import BodyTooLarge, JsonLimits, check_json_value
from battle_backend.battles.launcher_client import check_launcher
from battle_backend.live.hub import BattleChange, LiveHub
from battle_backend.settings import BackendSettings
from battle_backend.store.json_text import scrub_text, scrub_value
from battle_backend.store.protocol import (
    AgentDeleteOutcome,
    BattleClosed,
    BattleNotFound,
    BattleStore,
    DuplicateEvent,
    StartOutcome,
    TokenRejected,
    WriteFailed,
)
from battle_backend.store.records import (
    AgentRecord,
    BattleRecord,
    BattleState,
    EventRecord,
    FinishSpec,
    system_event,
    utc_now_iso,
)
from battle_backend.store.timestamps import result_finish_time
from battle_backend.store.tokens import tokens_match

logger = logging.getLogger(__name__)


def token_error() -> ApiError:
    """401 for a missing or wrong battle token (the same answer for both: it tells a guesser nothing)."""
    return ApiError(
        401,
        "This battle's events need its battle token, which only the green agent receives: send the battle_token "
        "from battle_info/battle_start as 'X-Battle-Token: <token>' or 'Authorization: Bearer <token>'",
        headers={"WWW-Authenticate": "Bearer"},
    )


INLINE_MEASURE_BYTES = 16 * 1024
"""Events posted in bodies smaller than this are measured on the event loop: a thread hop costs more than that."""
TOKEN_CACHE_SIZE = 4096
"""Battle tokens remembered for :meth:`BattleService.precheck_token` (a token never changes once a battle has one)."""


def _requirement_key(requirements: list[Any]) -> list[tuple[str, str, bool]]:
    """Participant requirements compared by what matters (name, role, required), in any order."""
    return sorted(
        (str(r.get("name")), str(r.get("role")), bool(r.get("required"))) for r in requirements if isinstance(r, dict)
    )


def write_failed_error(battle_id: str) -> ApiError:
    """503 for an event the database could not commit: nothing was stored, and a retry (same event_id) is safe."""
    return ApiError(
        503,
        f"Battle {battle_id}: the event could not be stored (the database refused the write); nothing was stored, "
        "retry it",
        headers={"Retry-After": "1"},
    )


class BattleService:
    """Validated operations over the store, each followed by a change notification."""

    def __init__(self, store: BattleStore, hub: LiveHub, settings: BackendSettings, http: httpx.AsyncClient) -> None:
        self.store = store
        self.hub = hub
        self.settings = settings
        self.http = http
        self._tokens: OrderedDict[str, str] = OrderedDict()

    # --- agents -------------------------------------------------------------------------------------------
    async def register_agent(self, body: AgentRegistration) -> AgentRecord:
        """Fetch the card (400 when it cannot be had, as AgentBeats), then store the agent."""
        try:
            card = await fetch_agent_card(
                self.http,
                body.agent_url,
                timeout=self.settings.http_timeout_s,
                max_bytes=self.settings.max_request_bytes,
                limits=JsonLimits.from_settings(self.settings),
            )
        except AgentCardError as exc:
            raise ApiError(400, str(exc)) from exc
        info = body.model_dump(mode="json", exclude_unset=True)
        info["agent_url"] = body.agent_url
        info["launcher_url"] = body.launcher_url
        if not body.alias.strip():
            info["alias"] = str(card.get("name") or "Unnamed Agent")
        if body.pool is not None:
            await self._check_pool_requirements(body.pool, info.get("participant_requirements") or [])
        return await self.store.create_agent(info, card)

    async def _check_pool_requirements(self, pool: str, requirements: list[Any]) -> None:
        """400 unless the pool's members declare the same participant requirements as this new member: a battle
        queued for the pool must be runnable by whichever member is free."""
        for member in await self.pool_members(pool):
            declared = member.register_info.get("participant_requirements") or []
            if _requirement_key(declared) != _requirement_key(requirements):
                raise ApiError(
                    400,
                    f"pool '{pool}': participant_requirements differ from those of member {member.alias} "
                    f"({member.agent_id}); every member of a pool must declare the same ones",
                )

    async def pool_members(self, pool: str) -> list[AgentRecord]:
        """The green agents of a pool, oldest first."""
        return [agent for agent in await self.store.list_agents() if agent.pool == pool]

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent."""
        return await self.store.list_agents()

    async def get_agent(self, agent_id: str) -> AgentRecord:
        """One agent or 404."""
        agent = await self.store.get_agent(agent_id)
        if agent is None:
            raise ApiError(404, f"Agent with ID {agent_id} not found")
        return agent

    async def set_ready(self, agent_id: str, ready: bool) -> None:
        """The launcher's ready report; wakes battles waiting for it."""
        if not await self.store.set_agent_ready(agent_id, ready):
            raise ApiError(404, f"Agent with ID {agent_id} not found")
        if ready:
            self.hub.agent_ready(agent_id)

    async def delete_agent(self, agent_id: str) -> None:
        """Delete, refusing (409) while a battle holds the agent."""
        outcome = await self.store.delete_agent(agent_id)
        if outcome is AgentDeleteOutcome.NOT_FOUND:
            raise ApiError(404, f"Agent with ID {agent_id} not found")
        if outcome is AgentDeleteOutcome.LOCKED:
            raise ApiError(409, f"Agent {agent_id} is locked by a running battle; delete it when the battle is over")

    async def check_launcher(self, launcher_url: str) -> dict[str, Any]:
        """AgentBeats' launcher check."""
        return await check_launcher(self.http, launcher_url, timeout=self.settings.http_timeout_s)

    # --- battles ------------------------------------------------------------------------------------------
    async def _requested_green(self, body: BattleCreate) -> tuple[AgentRecord, str | None]:
        """The green agent a battle is created for and the pool it may run on (None: only that agent)."""
        if body.green_agent_id is None:
            assert body.green_pool is not None  # the model requires one of the two
            members = await self.pool_members(body.green_pool)
            if not members:
                raise ApiError(404, f"Green agent pool '{body.green_pool}' has no members")
            return members[0], body.green_pool
        green = await self.store.get_agent(body.green_agent_id)
        if green is None:
            raise ApiError(404, f"Green agent with ID {body.green_agent_id} not found")
        if not green.is_green:
            raise ApiError(400, f"Agent {green.agent_id} ({green.alias}) is not a green agent")
        if body.green_pool is not None and green.pool != body.green_pool:
            raise ApiError(400, f"Green agent {green.agent_id} is not a member of pool '{body.green_pool}'")
        return green, green.pool

    async def create_battle(self, body: BattleCreate, request_base_url: str) -> BattleRecord:
        """Validate the participants against the green agent's requirements and queue the battle. A green agent
        of a pool may be busy: the battle waits for a free member (AgentBeats refuses a locked green agent, and so
        does this backend for a green agent outside any pool)."""
        green, pool = await self._requested_green(body)
        if pool is None and green.status != "unlocked":
            raise ApiError(400, f"Green agent {green.agent_id} is not unlocked")
        requirements = [r for r in green.register_info.get("participant_requirements") or [] if isinstance(r, dict)]
        expected = [str(r.get("name")) for r in requirements]
        expected_text = ", ".join(expected) if expected else "(none: this green agent declares no participants)"
        opponents: list[dict[str, Any]] = []
        seen: set[str] = set()
        for opponent in body.opponents:
            if opponent.name not in expected:
                raise ApiError(
                    400,
                    f"Opponent name '{opponent.name}' does not match the participant requirements of green agent "
                    f"{green.agent_id}; expected names: {expected_text}",
                )
            if opponent.name in seen:
                raise ApiError(400, f"Opponent name '{opponent.name}' is given twice; expected names: {expected_text}")
            seen.add(opponent.name)
            agent = await self.store.get_agent(opponent.agent_id)
            if agent is None:
                raise ApiError(404, f"Opponent agent {opponent.name} with ID {opponent.agent_id} not found")
            if agent.status != "unlocked":
                raise ApiError(400, f"Opponent agent {opponent.name} with ID {opponent.agent_id} is not unlocked")
            entry = opponent.model_dump(mode="json", exclude_none=True)
            if "role" not in entry:
                entry["role"] = next(str(r.get("role")) for r in requirements if r.get("name") == opponent.name)
            opponents.append(entry)
        missing = [str(r.get("name")) for r in requirements if r.get("required") and r.get("name") not in seen]
        if missing:
            raise ApiError(
                400, f"Required participant(s) missing: {', '.join(missing)}; expected names: {expected_text}"
            )
        backend_url = self.settings.public_url or request_base_url.rstrip("/")
        battle = await self.store.create_battle(green.agent_id, opponents, body.config, backend_url, green_pool=pool)
        self.hub.publish(BattleChange(battle.battle_id, BattleState.QUEUED))
        return battle

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord:
        """One battle or 404."""
        battle = await self.store.get_battle(battle_id, include_events=include_events)
        if battle is None:
            raise ApiError(404, f"Battle with ID {battle_id} not found")
        return battle

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""
        return await self.store.list_battles(include_events=include_events)

    async def queue_positions(self) -> dict[str, int]:
        """1-based positions of the queued battles (AgentBeats reports ``queue_position``)."""
        queued = await self.store.battle_ids_in_state(BattleState.QUEUED)
        return {battle_id: index + 1 for index, battle_id in enumerate(queued)}

    async def post_event(
        self,
        battle_id: str,
        event: BattleEvent,
        posted: dict[str, Any],
        token: str | None,
        *,
        size_hint: int | None = None,
    ) -> EventRecord:
        """Store an agent's event exactly as posted (plus a timestamp when missing); a result finishes the battle.

        Refused before anything is written: a payload out of bounds (400), larger than its kind's cap (413), a
        missing token when tokens are required or a wrong one in any case (401), an unknown battle (404), a battle
        already over (400). A refused result leaves the battle open: the green agent's real result still counts.

        Exactly once: an event whose ``event_id`` the battle already holds (a poster's retry after a lost answer)
        is acknowledged with the stored record and writes nothing, even once the battle is over (so a retried
        result is a 204, while a different second result is still a 400). The token is checked first.

        ``size_hint`` is the byte size of the body the event was parsed from, when known: a small event is measured
        on the event loop (microseconds), a big or unknown one in a worker thread (a result may be megabytes, and
        serialising it to measure it must not stall the loop). The measure itself is the same either way.
        """
        payload = dict(posted)
        if payload.get("timestamp") in (None, ""):  # a numeric 0 is a timestamp as sent, kept
            payload["timestamp"] = utc_now_iso()
        limits = JsonLimits.from_settings(self.settings)
        if size_hint is not None and size_hint < INLINE_MEASURE_BYTES:
            size = check_json_value(payload, limits)
        else:
            size = await anyio.to_thread.run_sync(functools.partial(check_json_value, payload, limits))
        if event.is_result and size > self.settings.max_result_bytes:
            raise BodyTooLarge(self.settings.max_result_bytes, "max_result_bytes", what="the result event")
        if not event.is_result and size > self.settings.max_event_bytes:
            raise BodyTooLarge(self.settings.max_event_bytes, "max_event_bytes", what="the progress event")
        finish = None
        if event.is_result:
            finish = FinishSpec(
                winner=event.winner or "draw",
                detail=event.detail if event.detail is not None else {},
                finish_time=result_finish_time(payload["timestamp"]),
                # a calibration battle checks the harness, not an agent: no rating moves (battle_facts says why
                # only the token-protected result decides this)
                rated=not result_says_calibration(event.detail),
            )
        try:
            record = await self.store.append_event(
                # A result decides the battle: it is accepted only with the battle's token (which only the green
                # agent receives), whatever require_token says; progress events need it only with require_token.
                battle_id,
                payload,
                finish=finish,
                presented_token=token,
                enforce_token=self.settings.require_token or event.is_result,
                event_id=event.event_id,
            )
        except DuplicateEvent as exc:
            logger.info("battle %s: event %r is already stored; not stored again", battle_id, exc.event_id)
            return exc.record
        except BattleNotFound as exc:
            raise ApiError(404, f"Battle with ID {battle_id} not found") from exc
        except TokenRejected as exc:
            kind = "result" if event.is_result else "progress event"
            logger.warning("battle %s: %s refused: %s", battle_id, kind, exc.reason)
            raise token_error() from exc
        except BattleClosed as exc:
            raise ApiError(400, f"Battle {battle_id} is not in a valid state for updates: {exc.state.value}") from exc
        except WriteFailed as exc:
            logger.error("battle %s: event not stored: %s", battle_id, exc)
            raise write_failed_error(battle_id) from exc
        self.hub.publish(BattleChange(battle_id, BattleState.FINISHED if finish else None))
        return record

    async def precheck_token(self, battle_id: str, token: str | None) -> None:
        """Refuse (404/401) before a body is even read: a poster without the right token makes the backend parse
        nothing. Only a shortcut: the store checks again in the very transaction that writes the event."""
        if token is None and not self.settings.require_token:
            return
        if token is None:
            raise token_error()
        known = self._tokens.get(battle_id)
        if known is None:
            battle = await self.store.get_battle(battle_id, include_events=False)
            if battle is None:
                raise ApiError(404, f"Battle with ID {battle_id} not found")
            known = battle.battle_token
            if known is not None:  # set once when the battle starts, never changed: safe to remember
                self._tokens[battle_id] = known
                if len(self._tokens) > TOKEN_CACHE_SIZE:
                    self._tokens.popitem(last=False)
        if not tokens_match(known, token):
            raise token_error()

    # --- used by the battle flow and the scheduler ----------------------------------------------------------
    async def log(self, battle_id: str, message: str, detail: Any = None) -> None:
        """A system entry in the battle's history (dropped silently once the battle is over). Text an agent sent
        (an acknowledgement, an error message) may be in it: lone surrogates are replaced, never stored."""
        event = system_event(scrub_text(message), scrub_value(detail))
        if await self.store.add_system_event(battle_id, event) is not None:
            self.hub.publish(BattleChange(battle_id))

    async def start(self, battle_id: str, token: str) -> StartOutcome:
        """queued -> running (agents locked) when possible."""
        outcome = await self.store.start_battle(battle_id, token)
        if outcome is StartOutcome.STARTED:
            self.hub.publish(BattleChange(battle_id, BattleState.RUNNING))
        return outcome

    async def fail(self, battle_id: str, reason: str) -> bool:
        """-> error with a reason; agents unlocked. False if the battle had already moved on."""
        reason = scrub_text(reason).replace("\x00", "\ufffd")  # agent text may be in it; a text column holds no NUL
        logger.warning("battle %s failed: %s", battle_id, reason)
        done = await self.store.fail_battle(battle_id, reason)
        if done:
            self.hub.publish(BattleChange(battle_id, BattleState.ERROR))
        return done

    async def time_out(self, battle_id: str, battle_timeout: float) -> bool:
        """The battle timeout expired: finish as a draw (AgentBeats' result shape), later results get 400."""
        finish = FinishSpec(
            winner="draw",
            detail={"message": "Battle timed out", "battle_timeout": battle_timeout},
            finish_time=utc_now_iso(),
            extra={"reason": "timeout"},
        )
        event = system_event(
            f"Battle timed out after {battle_timeout:g} seconds: finished as a draw", {"battle_timeout": battle_timeout}
        )
        done = await self.store.finish_battle(battle_id, finish, event)
        if done:
            self.hub.publish(BattleChange(battle_id, BattleState.FINISHED))
        return done
