"""The PostgreSQL store's agents and battles: create, read, list, ready, delete (one transaction each).

Why a module of its own: these calls read and write rows without deciding a transition; the state transitions (event
append, start, finish, fail) are in :mod:`battle_backend.store.postgres.transitions`.
"""

from __future__ import annotations

from typing import Any

from battle_backend.store import sql
from battle_backend.store.json_text import dumps
from battle_backend.store.postgres.pool import (
    Conn,
    PostgresPool,
    storable,
)
from battle_backend.store.protocol import (
    AgentDeleteOutcome,
    BattleExists,
)
from battle_backend.store.records import (
    AgentRecord,
    BattleHistoryEntry,
    BattleRecord,
    BattleState,
    EventRecord,
)
from battle_backend.store.rows import (
    EVENT_COLUMNS,
    Row,
    agent_record,
    battle_record,
    event_record,
    history_entry,
)
from battle_backend.store.sql import POSTGRES
from battle_backend.store.transition_rules import (
    new_agent,
    new_battle,
)


class PostgresAgentsAndBattles(PostgresPool):
    """Agents and battles of `PostgresStore` (see the module docstring)."""

    # --- agents -------------------------------------------------------------------------------------------
    async def create_agent(self, register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
        """Store a new agent: unlocked, not ready, rated 1000 unless green."""
        agent = new_agent(register_info, agent_card)

        async def fn(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO agents (agent_id, register_info, agent_card, elo_rating, created_at, pool)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    agent.agent_id,
                    dumps(agent.register_info),
                    dumps(agent.agent_card),
                    agent.elo_rating,
                    agent.created_at,
                    agent.pool,
                ),
            )

        await self._write(fn)
        return agent

    async def _history(self, conn: Conn, agent_ids: list[str] | None) -> dict[str, list[BattleHistoryEntry]]:
        if agent_ids is None:
            rows = await self._rows(conn, "SELECT * FROM agent_battle_history ORDER BY position")
        else:
            rows = await self._rows(
                conn, "SELECT * FROM agent_battle_history WHERE agent_id = ANY(%s) ORDER BY position", (agent_ids,)
            )
        out: dict[str, list[BattleHistoryEntry]] = {}
        for row in rows:
            out.setdefault(row["agent_id"], []).append(history_entry(row))
        return out

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        """One agent with its history."""
        if not storable(agent_id):
            return None

        async def fn(conn: Conn) -> AgentRecord | None:
            row = await self._row(conn, POSTGRES(sql.AGENT_BY_ID), (agent_id,))
            if row is None:
                return None
            history = await self._history(conn, [agent_id])
            return agent_record(row, history.get(agent_id, []))

        return await self._read(fn)

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent, oldest first."""

        async def fn(conn: Conn) -> list[AgentRecord]:
            history = await self._history(conn, None)
            rows = await self._rows(conn, "SELECT * FROM agents ORDER BY position")
            return [agent_record(row, history.get(row["agent_id"], [])) for row in rows]

        return await self._read(fn)

    async def set_agent_ready(self, agent_id: str, ready: bool) -> bool:
        """Set the ready flag the launcher reports (and tell the replicas waiting for it)."""
        if not storable(agent_id):
            return False

        async def fn(conn: Conn) -> bool:
            cur = await conn.execute(POSTGRES(sql.SET_AGENT_READY), (ready, agent_id))
            if cur.rowcount > 0 and ready:
                await self._notify(conn, "agent_ready", agent_id)
            return cur.rowcount > 0

        return await self._write(fn)

    async def delete_agent(self, agent_id: str) -> AgentDeleteOutcome:
        """Delete an agent and its history unless a battle holds it."""
        if not storable(agent_id):
            return AgentDeleteOutcome.NOT_FOUND

        async def fn(conn: Conn) -> AgentDeleteOutcome:
            row = await self._row(conn, "SELECT locked_by FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            if row is None:
                return AgentDeleteOutcome.NOT_FOUND
            if row["locked_by"]:
                return AgentDeleteOutcome.LOCKED
            await conn.execute(POSTGRES(sql.DELETE_AGENT_HISTORY), (agent_id,))
            await conn.execute(POSTGRES(sql.DELETE_AGENT), (agent_id,))
            return AgentDeleteOutcome.DELETED

        return await self._write(fn)

    # --- battles ------------------------------------------------------------------------------------------
    async def create_battle(
        self,
        green_agent_id: str,
        opponents: list[dict[str, Any]],
        config: dict[str, Any],
        backend_url: str | None,
        *,
        battle_id: str | None = None,
        green_pool: str | None = None,
        owned: bool = False,
    ) -> BattleRecord:
        """Store a queued battle (BattleExists for a given ``battle_id`` the database already holds); an ``owned``
        one belongs to this replica at once, so no other replica's scheduler starts it."""
        battle = new_battle(
            green_agent_id,
            opponents,
            config,
            backend_url,
            battle_id=battle_id,
            green_pool=green_pool,
            owner=self._replica_id if owned else None,
        )
        opponents_text, config_text = dumps(opponents), dumps(config)

        async def fn(conn: Conn) -> None:
            row = await self._row(
                conn,
                POSTGRES(sql.INSERT_BATTLE) + " ON CONFLICT (battle_id) DO NOTHING RETURNING 1 AS ok",
                (
                    battle.battle_id,
                    green_agent_id,
                    opponents_text,
                    config_text,
                    battle.created_at,
                    backend_url,
                    green_pool,
                    battle.owner,
                ),
            )
            if row is None:
                raise BattleExists(battle.battle_id)
            await self._notify(conn, "battle", battle.battle_id, BattleState.QUEUED)

        await self._write(fn)
        return battle

    async def _events(self, conn: Conn, battle_id: str, after_seq: int, limit: int | None) -> list[dict[str, Any]]:
        sql = f"SELECT {EVENT_COLUMNS} FROM battle_events WHERE battle_id = %s AND seq > %s ORDER BY seq"
        params: list[Any] = [battle_id, after_seq]
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return await self._rows(conn, sql, params)

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord | None:
        """One battle (events included unless asked not to)."""
        if not storable(battle_id):
            return None

        async def fn(conn: Conn) -> tuple[Row | None, list[dict[str, Any]]]:
            row = await self._row(conn, POSTGRES(sql.BATTLE_BY_ID), (battle_id,))
            if row is None or not include_events:
                return row, []
            return row, await self._events(conn, battle_id, 0, None)

        row, events = await self._read(fn)
        if row is None:
            return None
        size = sum(len(event["payload"]) for event in events) + len(row["result"] or "")
        return await self._decode(
            lambda: battle_record(row, [event_record(battle_id, event) for event in events]), size
        )

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""

        async def fn(conn: Conn) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
            rows = await self._rows(conn, POSTGRES(sql.ALL_BATTLES))
            events: dict[str, list[dict[str, Any]]] = {}
            if include_events:
                for event in await self._rows(
                    conn, f"SELECT battle_id, {EVENT_COLUMNS} FROM battle_events ORDER BY battle_id, seq"
                ):
                    events.setdefault(event["battle_id"], []).append(event)
            return rows, events

        rows, events = await self._read(fn)
        size = sum(len(row["result"] or "") + len(row["config"]) for row in rows)
        size += sum(len(event["payload"]) for batch in events.values() for event in batch)

        def build() -> list[BattleRecord]:
            return [
                battle_record(
                    row, [event_record(row["battle_id"], event) for event in events.get(row["battle_id"], [])]
                )
                for row in rows
            ]

        return await self._decode(build, size)

    async def battle_ids_in_state(self, state: BattleState) -> list[str]:
        """Oldest first: for queued battles this is the queue."""

        async def fn(conn: Conn) -> list[str]:
            rows = await self._rows(conn, POSTGRES(sql.BATTLE_IDS_IN_STATE), (state.value,))
            return [row["battle_id"] for row in rows]

        return await self._read(fn)

    async def list_events(self, battle_id: str, *, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events after a sequence number (the SSE stream resumes with this)."""
        if not storable(battle_id):
            return []
        rows = await self._read(lambda conn: self._events(conn, battle_id, after_seq, limit))
        size = sum(len(row["payload"]) for row in rows)
        return await self._decode(lambda: [event_record(battle_id, row) for row in rows], size)
