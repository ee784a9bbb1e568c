"""The PostgreSQL store's state transitions: one transaction each, the battle's row locked first.

Why a module of its own: this is where replicas could disagree, so each call locks the battle's row (and then its
agents' rows in id order) and decides with the rules both stores share (:mod:`battle_backend.store.transition_rules`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread

from battle_backend.store.json_text import dumps
from battle_backend.store.postgres.appends import PendingAppend, token_digest
from battle_backend.store.postgres.battles import PostgresAgentsAndBattles
from battle_backend.store.postgres.pool import (
    BATTLE_ROW,
    Conn,
    storable,
)
from battle_backend.store.protocol import (
    BattleNotFound,
    StartOutcome,
)
from battle_backend.store.records import (
    OPEN_STATES,
    BattleState,
    EventRecord,
    FinishSpec,
    system_event,
    utc_now_iso,
)
from battle_backend.store.rows import (
    EVENT_COLUMNS,
    Row,
    event_record,
)
from battle_backend.store.transition_rules import (
    HISTORY_COLUMNS,
    AgentFacts,
    PoolMember,
    append_refusal,
    choose_green,
    error_outcome,
    finish_outcome,
    participant_ids,
    plan_outcomes,
)


class PostgresTransitions(PostgresAgentsAndBattles):
    """State transitions of `PostgresStore` (see the module docstring)."""

    # --- transitions (one transaction each, the battle's row locked first) ---------------------------------
    async def _battle_row(self, conn: Conn, battle_id: str) -> Row | None:
        return await self._row(conn, f"{BATTLE_ROW} WHERE battle_id = %s FOR UPDATE", (battle_id,))

    async def _append(
        self,
        conn: Conn,
        battle_id: str,
        last_seq: int,
        payload_text: str,
        payload: dict[str, Any],
        event_id: str | None,
        *,
        verified: bool = True,
    ) -> EventRecord:
        seq = last_seq + 1
        received_at = utc_now_iso()
        await conn.execute("UPDATE battles SET last_seq = %s WHERE battle_id = %s", (seq, battle_id))
        await conn.execute(
            "INSERT INTO battle_events (battle_id, seq, payload, received_at, event_id, verified)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (battle_id, seq, payload_text, received_at, event_id, verified),
        )
        return EventRecord(battle_id=battle_id, seq=seq, payload=payload, received_at=received_at, verified=verified)

    async def _lock_agents(self, conn: Conn, agent_ids: list[str], pool: str | None = None) -> list[dict[str, Any]]:
        """Lock the rows of these agents (and of every member of ``pool``) in one statement, in agent_id order."""
        return await self._rows(
            conn,
            "SELECT agent_id, locked_by, register_info, agent_card, elo_rating, pool, position FROM agents"
            " WHERE agent_id = ANY(%s) OR (%s::text IS NOT NULL AND pool = %s) ORDER BY agent_id FOR UPDATE",
            (agent_ids, pool, pool),
        )

    async def _participants(self, conn: Conn, row: Row) -> tuple[list[dict[str, Any]], dict[str, AgentFacts]]:
        """The battle's opponents and its participants that still exist, their rows locked."""
        opponents = json.loads(row["opponents"])
        ids = participant_ids(row["green_agent_id"], opponents)
        agents = {
            agent["agent_id"]: AgentFacts(
                agent_id=agent["agent_id"],
                register_info=json.loads(agent["register_info"]),
                agent_card=json.loads(agent["agent_card"]),
                elo_rating=agent["elo_rating"],
            )
            for agent in await self._lock_agents(conn, ids)
        }
        return opponents, agents

    async def _record_outcomes(
        self,
        conn: Conn,
        row: Row,
        opponents: list[dict[str, Any]],
        agents: dict[str, AgentFacts],
        outcome: Callable[[str], tuple[str, int]],
    ) -> None:
        """History entries and rating changes for every participant, then release the battle's locks."""
        battle_id = row["battle_id"]
        for entry in plan_outcomes(battle_id, row["green_agent_id"], opponents, agents, outcome):
            await conn.execute(
                "UPDATE agents SET elo_rating = %s WHERE agent_id = %s AND elo_rating IS NOT NULL",
                (entry.final_rating, entry.agent_id),
            )
            await conn.execute(
                f"INSERT INTO agent_battle_history ({HISTORY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (agent_id, battle_id) DO NOTHING",
                entry.history_values(),
            )
        await conn.execute("UPDATE agents SET locked_by = NULL, ready = FALSE WHERE locked_by = %s", (battle_id,))

    async def _finish(self, conn: Conn, row: Row, spec: FinishSpec, result_text: str) -> None:
        """Finish: result, ELO (none when ``spec.rated`` is False), history, unlock, notice."""
        opponents, agents = await self._participants(conn, row)
        outcome = finish_outcome(spec, row["green_agent_id"], opponents, agents)
        await self._record_outcomes(conn, row, opponents, agents, outcome)
        await conn.execute(
            "UPDATE battles SET state = 'finished', result = %s, finished_at = %s WHERE battle_id = %s",
            (result_text, utc_now_iso(), row["battle_id"]),
        )
        await self._notify(conn, "battle", row["battle_id"], BattleState.FINISHED)

    async def append_event(
        self,
        battle_id: str,
        payload: dict[str, Any],
        *,
        finish: FinishSpec | None = None,
        presented_token: str | None = None,
        enforce_token: bool = False,
        event_id: str | None = None,
        trusted: bool = False,
    ) -> EventRecord:
        """One event, one row; committed when this returns. The battle's row lock orders concurrent appends from
        every replica; the unique index on (battle_id, verified, event_id) backs up the duplicate check made under
        that lock (a key is looked up in the event's own space: verified or not).
        A progress event goes through the battle's writer on this replica (:mod:`battle_backend.store.postgres.appends`:
        one database call, batched with the battle's other waiting events); a result, which finishes the battle,
        gets a transaction of its own, in its turn among them."""
        if not storable(battle_id):
            raise BattleNotFound(battle_id)
        if event_id is not None and not storable(event_id):
            raise ValueError("event_id: a NUL character or a lone surrogate cannot be stored")
        if finish is not None:  # a result may be megabytes: encoded off the event loop
            payload_text, result_text = await anyio.to_thread.run_sync(
                lambda: (dumps(payload), dumps(finish.result_body()))
            )
        else:
            payload_text, result_text = dumps(payload), ""
        verified = trusted or presented_token is not None

        async def finish_alone(conn: Conn) -> EventRecord:
            """The result's own transaction: the contract's checks (those arena_append_event makes in the database for
            progress events), then the finish."""
            row = await self._battle_row(conn, battle_id)
            if row is None:
                raise BattleNotFound(battle_id)
            stored = None
            if event_id is not None:
                stored = await self._row(
                    conn,
                    f"SELECT {EVENT_COLUMNS} FROM battle_events"
                    " WHERE battle_id = %s AND verified = %s AND event_id = %s",
                    (battle_id, verified, event_id),
                )
            refusal = append_refusal(
                battle_id,
                row["state"],
                row["battle_token"],
                presented_token=presented_token,
                enforce_token=enforce_token,
                event_id=event_id,
                stored=event_record(battle_id, stored) if stored is not None else None,
            )
            if refusal is not None:
                raise refusal
            record = await self._append(
                conn, battle_id, row["last_seq"], payload_text, payload, event_id, verified=verified
            )
            assert finish is not None  # progress events take the writer's path (arena_append_event)
            await self._finish(conn, row, finish, result_text)
            return record

        item = PendingAppend(
            battle_id=battle_id,
            payload=payload,
            payload_text=payload_text,
            event_id=event_id,
            token_sha256=token_digest(presented_token),
            enforce_token=enforce_token,
            trusted=trusted,
            future=asyncio.get_running_loop().create_future(),
            alone=(lambda: self._write(finish_alone)) if finish is not None else None,
        )
        return await self._appends.submit(item)

    async def start_battle(self, battle_id: str, battle_token: str) -> StartOutcome:
        """queued -> running with every participant locked and this replica the owner, or an outcome saying why
        not. The battle's row lock makes the start happen once, whichever replicas try."""
        if not storable(battle_id):
            return StartOutcome.NOT_QUEUED
        started = system_event("Battle started")

        async def fn(conn: Conn) -> StartOutcome:
            row = await self._battle_row(conn, battle_id)
            if row is None or row["state"] != BattleState.QUEUED.value:
                return StartOutcome.NOT_QUEUED
            if row["owner"] is not None and row["owner"] != self._replica_id:
                return StartOutcome.NOT_QUEUED  # another replica writes it itself (an import)
            opponents = json.loads(row["opponents"])
            pool = row["green_pool"]
            candidates = participant_ids(row["green_agent_id"], opponents)
            locked = {agent["agent_id"]: agent for agent in await self._lock_agents(conn, candidates, pool)}
            green_id = row["green_agent_id"]
            if pool is not None:
                members = sorted((a for a in locked.values() if a["pool"] == pool), key=lambda a: a["position"])
                if not members:
                    return StartOutcome.MISSING_AGENT
                chosen = choose_green(green_id, [PoolMember(m["agent_id"], bool(m["locked_by"])) for m in members])
                if chosen is None:
                    return StartOutcome.AGENTS_BUSY
                green_id = chosen
            ids = participant_ids(green_id, opponents)
            if any(agent_id not in locked for agent_id in ids):
                return StartOutcome.MISSING_AGENT
            if any(locked[agent_id]["locked_by"] for agent_id in ids):
                return StartOutcome.AGENTS_BUSY
            await conn.execute(
                "UPDATE agents SET locked_by = %s, ready = FALSE WHERE agent_id = ANY(%s)", (battle_id, ids)
            )
            await conn.execute(
                "UPDATE battles SET state = 'running', started_at = %s, battle_token = %s, owner = %s,"
                " green_agent_id = %s WHERE battle_id = %s",
                (utc_now_iso(), battle_token, self._replica_id, green_id, battle_id),
            )
            record = await self._append(conn, battle_id, row["last_seq"], dumps(started), started, None)
            agents_locked = system_event("Agents locked", {"agent_ids": ids})
            await self._append(conn, battle_id, record.seq, dumps(agents_locked), agents_locked, None)
            await self._notify(conn, "battle", battle_id, BattleState.RUNNING)
            return StartOutcome.STARTED

        return await self._write(fn)

    async def set_deadline(self, battle_id: str, deadline_at: float, battle_timeout: float) -> bool:
        """Persist the timeout so that whichever replica owns the battle next re-arms it."""
        if not storable(battle_id):
            return False

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute(
                "UPDATE battles SET deadline_at = %s, battle_timeout = %s WHERE battle_id = %s AND state = 'running'",
                (deadline_at, battle_timeout, battle_id),
            )
            return cur.rowcount > 0

        return await self._write(fn)

    async def fail_battle(
        self, battle_id: str, reason: str, *, from_states: Sequence[BattleState] = OPEN_STATES
    ) -> bool:
        """-> error, atomically with the system event, error history and unlock."""
        if not storable(battle_id):
            return False
        event = system_event(f"Battle error: {reason}")

        async def fn(conn: Conn) -> bool:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            await self._append(conn, battle_id, row["last_seq"], dumps(event), event, None)
            opponents, agents = await self._participants(conn, row)
            await self._record_outcomes(conn, row, opponents, agents, error_outcome)
            await conn.execute(
                "UPDATE battles SET state = 'error', error = %s, finished_at = %s WHERE battle_id = %s",
                (reason, utc_now_iso(), battle_id),
            )
            await self._notify(conn, "battle", battle_id, BattleState.ERROR)
            return True

        return await self._write(fn)

    async def finish_battle(
        self,
        battle_id: str,
        finish: FinishSpec,
        event: dict[str, Any],
        *,
        from_states: Sequence[BattleState] = (BattleState.RUNNING,),
    ) -> bool:
        """-> finished without a posted result (the timeout draw)."""
        if not storable(battle_id):
            return False
        result_text = dumps(finish.result_body())

        async def fn(conn: Conn) -> bool:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]) not in from_states:
                return False
            await self._append(conn, battle_id, row["last_seq"], dumps(event), event, None)
            await self._finish(conn, row, finish, result_text)
            return True

        return await self._write(fn)

    async def add_system_event(self, battle_id: str, event: dict[str, Any]) -> EventRecord | None:
        """Append unless the battle is gone or terminal."""
        if not storable(battle_id):
            return None
        text = dumps(event)

        async def fn(conn: Conn) -> EventRecord | None:
            row = await self._battle_row(conn, battle_id)
            if row is None or BattleState(row["state"]).is_terminal:
                return None
            record = await self._append(conn, battle_id, row["last_seq"], text, event, None)
            await self._notify(conn, "battle", battle_id)
            return record

        return await self._write(fn)
