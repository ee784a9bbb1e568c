"""The storage seam: what the backend needs from a database, as a Protocol.

Two implementations: `sqlite.store.SQLiteStore` (one file, one backend process: the embedded default) and
`postgres.store.PostgresStore` (a database server that several backend replicas share). Every method that changes a
battle does the whole change in one transaction (state, events, ELO, agent locks), so readers never see half a
transition; every decision that must hold across replicas (the next sequence number, the one accepted result, which
replica starts a queued battle, which agents are locked) is taken inside that transaction, by the database.

Replicas: each store instance is one replica (``replica_id``). A replica owns the battles it started (it runs their
setup, timeout and green-agent stream) and renews a lease (``heartbeat``); ``claim_orphaned_battles`` hands the
running battles of a replica whose lease ran out (or that shut down) to the caller. Changes committed by *other*
replicas reach this one as :class:`StoreNotice` through ``set_notice_handler`` (PostgreSQL: LISTEN/NOTIFY); the
embedded SQLite store has no other replicas and never calls the handler.

Durability contract of every write: when the call returns, its change is committed; when it raises, nothing of it is
stored. How the store gets there is its own business: SQLite commits the writes that arrive together in one
transaction (group commit, `sqlite_writer`), each in its own savepoint so that a refused write fails alone;
PostgreSQL runs one transaction per call, except for a battle's progress events, which one writer per battle and
replica commits together when they arrive while the previous commit runs (`postgres_appends`: each event checked and
written on its own by one database call that returns refusals instead of raising). Either way a refusal (the
exceptions below) depends only on the call and on the writes committed before it, never on an unrelated write that
happened to share its transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from battle_backend.store.records import AgentRecord, BattleRecord, BattleState, EventRecord, FinishSpec

if TYPE_CHECKING:
    from battle_backend.store.attempt_records import AttemptQueue


class StoreError(Exception):
    """Base class of the store's refusals."""


class BattleNotFound(StoreError):
    """No battle with that id."""


class BattleExists(StoreError):
    """``create_battle`` was given a battle id the store already holds: nothing was written."""

    def __init__(self, battle_id: str) -> None:
        super().__init__(f"Battle {battle_id} already exists")
        self.battle_id = battle_id


class BattleClosed(StoreError):
    """The battle is finished or errored: events are refused."""

    def __init__(self, battle_id: str, state: BattleState) -> None:
        super().__init__(f"Battle {battle_id} is {state.value}: it accepts no more events")
        self.battle_id = battle_id
        self.state = state


class DuplicateEvent(StoreError):
    """The battle already holds an event with this idempotency key: nothing was written; ``record`` is the event
    stored the first time (the poster's retry after a lost answer is acknowledged with it)."""

    def __init__(self, record: EventRecord, event_id: str) -> None:
        super().__init__(f"Battle {record.battle_id} already holds event {event_id!r} (seq {record.seq})")
        self.record = record
        self.event_id = event_id


class TokenRejected(StoreError):
    """The presented battle token is wrong, or it is missing while tokens are required; ``reason`` says which."""

    def __init__(self, battle_id: str, reason: str) -> None:
        super().__init__(f"Battle {battle_id}: {reason}")
        self.battle_id = battle_id
        self.reason = reason


class WriteFailed(StoreError):
    """The database could not commit the transaction holding this write (disk full, I/O error, ...): nothing of it
    was stored. A store that commits several callers' writes together (SQLite's group commit) raises this in every
    one of them, so no caller is ever told "stored" for a write that is not there; retrying is safe (the event's
    idempotency key keeps a retry from being stored twice)."""


class StoreUnavailable(StoreError):
    """The database cannot be reached right now (a read found no connection within the store's wait, or lost it):
    nothing was read. Answered 503 with ``Retry-After``; the caller may retry."""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer backend (a schema version or revision unknown here): refused rather than
    guessed at. Raised on start by either store; a RuntimeError, not a :class:`StoreError`: it is no answer to a
    request."""


class AgentDeleteOutcome(StrEnum):
    """What ``delete_agent`` did."""

    DELETED = "deleted"
    NOT_FOUND = "not_found"
    LOCKED = "locked"


class StartOutcome(StrEnum):
    """What ``start_battle`` did."""

    STARTED = "started"
    AGENTS_BUSY = "agents_busy"
    """An agent is locked by another battle: the battle stays queued."""
    NOT_QUEUED = "not_queued"
    MISSING_AGENT = "missing_agent"
    """A participant was deleted since the battle was created: the caller fails the battle."""


@dataclass(frozen=True)
class StoreNotice:
    """A change another replica committed: battle ``key`` changed (``state`` after it, when it moved), or agent
    ``key`` reported ready."""

    kind: Literal["battle", "agent_ready", "resync"]
    key: str
    state: str | None = None
    """A BattleState value for kind "battle" when the change moved the battle's state."""


NoticeHandler = Callable[[StoreNotice], None]
"""Called on the event loop for every notice; must not block. A ``resync`` notice (key "") means notices may have
been missed (the listening connection was lost and is back): every view should re-read the store."""


class BattleStore(Protocol):
    """Agents CRUD, battles CRUD, atomic event append and state transitions."""

    @property
    def replica_id(self) -> str:
        """This replica's identity in the store (owner of the battles it starts)."""

    @property
    def shared(self) -> bool:
        """True when other replicas may use the same database at once (then leases and notices matter)."""

    @property
    def description(self) -> str:
        """Where the data lives, safe to log (no password)."""

    @property
    def attempts(self) -> AttemptQueue:
        """The attempt queue a pool of green agents works a battle through (:mod:`.attempt_records`)."""

    async def open(self) -> None:
        """Create or migrate the schema, register this replica; must be called before anything else."""

    async def close(self) -> None:
        """Flush, retire this replica (its battles become claimable at once) and release connections and threads."""

    def set_notice_handler(self, handler: NoticeHandler | None) -> None:
        """Deliver other replicas' committed changes to ``handler`` (None: stop delivering)."""

    # --- replicas -----------------------------------------------------------------------------------------
    async def heartbeat(self) -> None:
        """Renew this replica's lease (the database's clock decides, so replicas' clocks need not agree)."""

    async def claim_orphaned_battles(self) -> list[str]:
        """Make this replica the owner of every running battle whose owner has not renewed its lease within that
        owner's own lease time, retired, or is unknown; returns their ids (oldest first). Atomic: two replicas never
        claim the same battle. The embedded store, having no other replicas, claims every running battle it does
        not own (they were left by a previous process)."""

    async def owned_running_battles(self) -> list[str]:
        """The running battles this replica owns (oldest first): what its scheduler should be running, no more
        (another replica took over the rest) and no less (one it claimed but failed to pick up)."""

    # --- agents -------------------------------------------------------------------------------------------
    async def create_agent(self, register_info: dict[str, Any], agent_card: dict[str, Any]) -> AgentRecord:
        """Store a new, unlocked, not-ready agent (rating 1000 unless green)."""

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        """One agent with its ELO history, or None."""

    async def list_agents(self) -> list[AgentRecord]:
        """Every agent, oldest first."""

    async def set_agent_ready(self, agent_id: str, ready: bool) -> bool:
        """Set the ready flag; False when the agent does not exist."""

    async def delete_agent(self, agent_id: str) -> AgentDeleteOutcome:
        """Delete an agent unless a battle holds its lock."""

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
        """Store a new battle in state queued, under a new random id, or under ``battle_id`` (an imported battle keeps
        its run's id, so links into it stay valid); raises BattleExists for an id the store already holds. With
        ``green_pool`` the battle may run on any green agent of that pool (``start_battle`` picks the member). With
        ``owned`` it belongs to this replica from the start: no other replica's scheduler may start it (an import
        writes such a battle through the store itself)."""

    async def get_battle(self, battle_id: str, *, include_events: bool = True) -> BattleRecord | None:
        """One battle, with its events in sequence order when asked."""

    async def list_battles(self, *, include_events: bool = False) -> list[BattleRecord]:
        """Every battle, oldest first."""

    async def battle_ids_in_state(self, state: BattleState) -> list[str]:
        """Ids of the battles in one state, oldest first (the queue order for queued)."""

    async def list_events(self, battle_id: str, *, after_seq: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events with seq > after_seq, in order."""

    # --- writes that move a battle ------------------------------------------------------------------------
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
        """Append one event (its own row; committed when the call returns, in its own transaction or a group
        commit's savepoint, see the module docstring); with ``finish`` also finish the battle, apply ELO
        (unless ``finish.rated`` is False: then every history entry has an elo_change of 0 and no rating moves)
        and unlock the agents in that same transaction. Raises BattleNotFound, TokenRejected, DuplicateEvent,
        BattleClosed, checked in that order inside the transaction, before anything is written; WriteFailed when
        the transaction could not commit (nothing stored). The sequence number is the battle's next one in commit
        order.

        Token rule (so a refused result never uses up the battle's one result): a ``presented_token`` must equal
        the battle's token (a battle that has none yet accepts none); with ``enforce_token`` one must be presented.

        Verified or not: the event is stored as verified (``EventRecord.verified``) when it was posted with the
        battle's token or ``trusted`` (an operator's import), as unverified otherwise (anyone may post progress
        events without ``enforce_token``).

        Idempotency rule: ``event_id`` (the poster's key, None for none) is unique per battle *within its key
        space*: verified events' keys and unverified events' keys are two separate spaces, so nothing posted
        without the token can ever make a token holder's event a duplicate (or the other way round). When the
        battle already holds an event with that key in the event's own space, nothing is written (no event, no
        finish) and DuplicateEvent carries the stored record, also once the battle is over (a retried result of a
        finished battle is a duplicate, not BattleClosed). The key decides alone: a repeated key with a different
        payload is still the same event. The check and the insert must be atomic (two concurrent posts of one key
        store it once)."""

    async def start_battle(self, battle_id: str, battle_token: str) -> StartOutcome:
        """queued -> running if every participant exists and is unlocked: lock them, clear their ready flags,
        store the token, make this replica the owner and log the start, all at once. A pool battle takes the green
        agent it names when that one is free, else the oldest free member of its pool (``green_agent_id`` is then
        that member); AGENTS_BUSY when no member is free; NOT_QUEUED for a battle another replica owns (``owned``).
        Atomic across replicas: a battle starts once."""

    async def set_deadline(self, battle_id: str, deadline_at: float, battle_timeout: float) -> bool:
        """Record when a running battle times out (survives a restart)."""

    async def fail_battle(
        self,
        battle_id: str,
        reason: str,
        *,
        from_states: Sequence[BattleState] = (BattleState.QUEUED, BattleState.RUNNING),
    ) -> bool:
        """-> error with the reason, a system event, error entries in the agents' histories, agents unlocked.
        False when the battle was not in one of ``from_states`` (someone else moved it first)."""

    async def finish_battle(
        self,
        battle_id: str,
        finish: FinishSpec,
        event: dict[str, Any],
        *,
        from_states: Sequence[BattleState] = (BattleState.RUNNING,),
    ) -> bool:
        """-> finished (used for the timeout draw): event appended, ELO applied, agents unlocked, atomically."""

    async def add_system_event(self, battle_id: str, event: dict[str, Any]) -> EventRecord | None:
        """Append a backend-written event unless the battle is terminal (then None)."""
